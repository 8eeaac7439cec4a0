"""Moving a running job to a new checkpoint with more state-store partitions and state buckets
(``--migrate-from``), against a real broker and real Spark: the state goes along, so the job
ends exactly where one that never moved would."""

from __future__ import annotations

import json
import signal
from collections import Counter

import pytest
from job_helpers import (
    Topics,
    consume_all,
    latest_by_key,
    lines,
    produce,
    recording,
    sigkill_and_restart,
    wait_for,
)

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.job import rebucket
from streaming.job.checkpoint import INGEST_QUERY, META
from streaming.job.pipeline import start_job
from streaming.job.settings import JobSettings


def test_a_job_moved_to_8_partitions_and_64_buckets_keeps_its_state(
    kafka_cluster, spark, unique_name, tmp_path
):
    """Stopped with SIGTERM on 2 partitions and 16 buckets while findings fire, started with
    ``--migrate-from`` on 8 and 64: the rest of the events give exactly the findings of one
    replay of all of them (open windows, history and firing findings went along), and each
    series' state sits in the one bucket its new rows go to."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    old, new = tmp_path / "ckpt", tmp_path / "ckpt-8"
    commits = old / "state" / "commits"
    sigkill_and_restart(
        t,
        spark,
        tmp_path,
        str(old),
        committed=lambda: any(f.name.isdigit() for f in commits.glob("*")),
        stop=signal.SIGTERM,
        restart_args=[
            "--checkpoint",
            str(new),
            "--migrate-from",
            str(old),
            "--shuffle-partitions",
            "8",
            "--state-buckets",
            "64",
        ],  # fmt: skip
        restarted="migrated the state of",
    )
    assert json.loads((new / META).read_text())["state_buckets"] == 64
    partitions = {p.name for p in (new / "state" / "state" / "0").iterdir() if p.name.isdigit()}
    assert partitions == {str(i) for i in range(8)}

    saved = (
        spark.read.format("statestore")
        .option("path", str(new / "state"))
        .option("stateVarName", "bucket")
        .load()
        .collect()
    )
    assert saved
    where = Counter(
        s for r in saved for s in rebucket.series_in(bytes(r.value.state), DetectorConfig())
    )
    assert [s for s, n in where.items() if n > 1] == []


def _checkpoint(path, ingest_batches=(0, 1), ingest_commits=(0, 1)) -> str:
    """A checkpoint as the job leaves it, as far as the migration reads it before Spark does."""
    path.mkdir()
    meta = {"layout": 4, "run_id": "abc", "window_s": 60.0, "state_buckets": 16}
    (path / META).write_text(json.dumps(meta))
    for folder, ids in (("offsets", ingest_batches), ("commits", ingest_commits)):
        (path / INGEST_QUERY / folder).mkdir(parents=True)
        for i in ids:
            (path / INGEST_QUERY / folder / str(i)).write_text('v1\n{}\n{"events":{"0":5}}\n')
    return str(path)


def test_a_migration_that_would_lose_or_double_rows_is_refused(spark, tmp_path):
    """A job killed in the middle of an ingest batch (its records half written): refused at
    start, naming why, and the new checkpoint is left unmade."""
    old = _checkpoint(tmp_path / "old", ingest_commits=(0,))
    new = tmp_path / "new"
    s = JobSettings(checkpoint=str(new), migrate_from=old, check_topics=False).validate()
    with pytest.raises(ConfigError, match="did not finish batch 1 of its ingest query"):
        start_job(spark, s)
    assert not (new / META).exists()


def test_windows_of_another_length_start_over_and_resolve_the_old_findings(
    kafka_cluster, spark, unique_name, tmp_path
):
    """Open windows and history cannot change length: the new checkpoint starts without them,
    and the findings the old job had firing are published resolved, not left firing."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    key = "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"
    old, new = tmp_path / "ckpt", tmp_path / "ckpt-30s"
    job = start_job(spark, t.settings(checkpoint=str(old)))
    try:
        wait_for(
            "a firing finding",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(key),
        )
    finally:
        assert job.stop(wait_s=60)
    assert latest_by_key(consume_all(t.bootstrap, t.findings))[key]["status"] == "firing"

    s = t.settings(
        checkpoint=str(new), migrate_from=str(old), detectors=DetectorConfig(window_s=30.0)
    )
    job = start_job(spark, s)
    try:
        last = latest_by_key(consume_all(t.bootstrap, t.findings))[key]
        assert last["status"] == "resolved" and last["summary"].startswith("Resolved: ")
        assert json.loads((new / META).read_text())["window_s"] == 30.0
        assert not (new / "migrated" / "state").exists()
    finally:
        job.stop()
