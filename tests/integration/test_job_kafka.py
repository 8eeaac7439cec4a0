"""The job against a real Kafka broker (KRaft): canned events in, findings, aggregates, dead
letters and job status out; SIGKILL + restart from the checkpoint; a Spark standalone cluster."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from job_helpers import (
    CONNMON,
    Proc,
    Topics,
    _descendants,
    _kill_group,
    _start_cli,
    _stat,
    _table,
    consume_all,
    gen,
    latest_by_key,
    lines,
    produce,
    recording,
    sigkill_and_restart,
    wait_for,
)

from streaming.detectors.config import DetectorConfig
from streaming.job.checkpoint import INGEST_QUERY, LEGACY_INGEST_DIR
from streaming.job.pipeline import start_job
from streaming.schema.aggregates import client_id
from streaming.schema.findings import finding_key
from streaming.schema.times import iso

# Helpers that other test modules import from here rather than from job_helpers.
__all__ = ["CONNMON", "Proc", "_descendants", "_stat", "_table"]


# ---- in-process job ----------------------------------------------------------------------
def test_canned_events_give_findings_aggregates_dead_letters_and_status(
    kafka_cluster, spark, unique_name, tmp_path
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    produce(t.bootstrap, t.events, gen.MALFORMED, key="bad")
    produce(t.bootstrap, t.events, [v for v, _ in gen.KAFKA_REJECTS], key="bad")
    # A URI, as for hdfs: or s3a:, goes through Hadoop's filesystem API like Spark's own.
    job = start_job(spark, t.settings(checkpoint=f"file://{tmp_path}/ckpt"))
    try:

        def cw_finding():
            found = latest_by_key(consume_all(t.bootstrap, t.findings))
            f = found.get("close_wait_buildup|client:app-7:payments-sarama|prod-eu|2")
            # 7 sockets leak; a record follows each doubling, so the last has more than 3.
            return f if f and 2 * f["evidence"]["close_wait_count"] > 7 else None

        f = wait_for("close_wait_buildup finding", cw_finding)
        assert f["status"] == "firing" and f["severity"] in ("warning", "critical")
        assert f["schema"] == 1 and f["side"] == "client" and f["broker_endpoint"]
        assert set(f) >= {
            "kind", "severity", "status", "side", "host", "app", "broker_id", "broker_endpoint",
            "peer_host", "window_start", "window_end", "evidence", "summary", "recommendation",
            "key", "updated_at",
        }  # fmt: skip

        n_bad = len(gen.MALFORMED) + len(gen.KAFKA_REJECTS)
        dead = wait_for(
            f"{n_bad} dead letters",
            lambda: (d := consume_all(t.bootstrap, t.deadletter)) and len(d) >= n_bad and d,
        )
        reasons = sorted(v["reason"] for _, v in dead)
        assert reasons == sorted([*gen.MALFORMED_REASONS, *(r for _, r in gen.KAFKA_REJECTS)])
        assert all(v["topic"] == t.events for _, v in dead)
        assert all(v["raw"] for _, v in dead if v["reason"] not in ("null_value", "empty_value"))
        # a dead letter keeps a bounded prefix of the record, its size and its hash
        big = next(v for _, v in dead if v["reason"] == "too_large")
        raw = next(line.encode() for line in gen.MALFORMED if len(line) > 16384)
        assert base64.b64decode(big["raw"]) == raw[:4096]
        assert (big["raw_bytes"], big["raw_sha256"]) == (len(raw), hashlib.sha256(raw).hexdigest())

        aggs = latest_by_key(consume_all(t.bootstrap, t.aggregates))
        a = aggs["client|app-7|payments-sarama|prod-eu|2"]
        assert a["close_wait_count"] == 7 and a["sockets"]["CLOSE_WAIT"] == 7
        assert a["series"] == "client|app-7|payments-sarama|prod-eu|2" and a["schema"] == 1

        status = wait_for(
            "job status with the dead-letter total",
            lambda: [
                v for _, v in consume_all(t.bootstrap, t.status) if v["dead_letter_total"] == n_bad
            ],
        )
        assert status[-1]["job_id"] == "connmon-job" and status[-1]["schema"] == 1
        assert status[-1]["query"] == "ingest"
        # each query has records of its own, keyed by job and query
        by_key = latest_by_key(consume_all(t.bootstrap, t.status))
        assert set(by_key) == {"connmon-job:ingest", "connmon-job:state"}
        state = by_key["connmon-job:state"]
        assert state["query"] == "state" and state["watermark"] is not None
        assert state["offsets_behind"] == 0 and state["dead_letter_total"] == 0
        # the state query's record says how big its state is; the ingest query's has none
        assert state["state_series"] >= 1 and state["state_bytes"] > 0, state
        assert 1 <= state["state_bucket_series_max"] <= state["state_series"], state
        assert state["state_series_shed_total"] == 0
        assert "state_series" not in by_key["connmon-job:ingest"]

        # the job keeps running after bad input: a new series shows up, its events sent with
        # no key, a huge key and headers, which the job does not read
        dup_lines = lines(recording("duplicate_clients"))
        third = len(dup_lines) // 3
        produce(t.bootstrap, t.events, dup_lines[:third], key=None)
        produce(t.bootstrap, t.events, dup_lines[third : 2 * third], key="k" * 100_000)
        produce(
            t.bootstrap, t.events, dup_lines[2 * third :], headers=[("trace", b"1"), ("x", None)]
        )
        dup = wait_for(
            "duplicate_connections finding",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(
                "duplicate_connections|client:app-5:billing-service|prod-eu|1"
            ),
        )
        assert dup["evidence"]["dup_used_max_idle_s"] >= 120 and dup["severity"] == "info"
        assert dup["evidence"]["dup_unused_processes"] == 1  # the bootstrap leftover beside it
        assert all(q.isActive for q in job.queries)
    finally:
        job.stop()


def _summary(host: str, t: float, state: str, count: int, age_s: float) -> dict:
    return {"schema": 1, "kind": "summary", "event_time": iso(t), "host": host,
            "agent_id": host, "seq": 1, "cluster": "prod", "side": "client", "app": "orders",
            "broker_id": 1, "broker_endpoint": "10.0.0.11:9092", "state": state,
            "count": count, "oldest_state_age_s": age_s, "interval_s": 10.0}  # fmt: skip


def test_a_bucket_of_thousands_of_series_is_saved_and_restored(
    kafka_cluster, spark, unique_name, tmp_path
):
    """Every series in one bucket (30,000): its rows of a batch (about 18 MB) go out as several
    records, each far below the partials topic's limit; its saved state, about a megabyte, goes
    to the state store as one value, and the next batch restores it whole."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    now = time.time()
    fleet = [_summary(f"fleet-{i:05d}", now, "ESTABLISHED", 2, 60.0) for i in range(30000)]
    produce(t.bootstrap, t.events, lines([*fleet, _summary("leaky-1", now, "CLOSE_WAIT", 3, 300)]))
    job = start_job(spark, t.settings(checkpoint=str(tmp_path / "ckpt"), state_buckets=1))
    try:

        def firing(host: str):
            key = finding_key("close_wait_buildup", client_id("client", host, "orders", None),
                              "prod", "1")  # fmt: skip
            return latest_by_key(consume_all(t.bootstrap, t.findings)).get(key)

        assert wait_for("the first finding", lambda: firing("leaky-1"))["status"] == "firing"
        produce(t.bootstrap, t.events, lines([_summary("leaky-2", now + 5, "CLOSE_WAIT", 3, 300)]))
        assert wait_for("a finding after a restore", lambda: firing("leaky-2"))
        assert all(q.isActive for q in job.queries)
    finally:
        job.stop()


def test_a_batch_that_fails_is_named_with_the_events_it_was_reading(
    kafka_cluster, spark, unique_name, tmp_path
):
    """The one line ``connmon job`` prints when a query stops: the batch, the events offsets it
    was reading (from Spark's own offset log), and the ``--skip-offsets`` that sets them aside."""
    from streaming.job.checkpoint import INGEST_QUERY, join
    from streaming.job.cli import failure_line
    from streaming.job.pipeline import kafka_source

    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, ["{}"] * 7, key="one-partition")
    s = t.settings(checkpoint=str(tmp_path / "ckpt"))

    def fail(_df, batch_id):
        raise RuntimeError(f"a bug in batch {batch_id}")

    q = (
        kafka_source(spark, s)
        .writeStream.foreachBatch(fail)
        .option("checkpointLocation", join(s.checkpoint, INGEST_QUERY))
        .start()
    )
    with contextlib.suppress(Exception):
        q.awaitTermination(120)
    assert q.exception() is not None
    line = failure_line(spark, s, INGEST_QUERY, q.exception())
    partition = next(p for p, n in enumerate(partition_sizes(t)) if n)
    skip = f"{partition}:0-6"
    assert line.startswith(
        f"connmon job: query ingest failed in batch 0 (events offsets {skip}; "
        f"to set them aside: --skip-offsets {skip}): "
    ), line
    assert line.endswith("RuntimeError: a bug in batch 0") and "\n" not in line


def partition_sizes(t: Topics) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": t.bootstrap, "group.id": "sizes"})
    try:
        return [c.get_watermark_offsets(TopicPartition(t.events, p), timeout=10)[1] for p in (0, 1)]
    finally:
        c.close()


# ---- SIGKILL and restart -------------------------------------------------------------------
def test_sigkill_and_restart_lose_no_finding_and_add_no_key(
    kafka_cluster, spark, unique_name, tmp_path
):
    """The restart also meets the checkpoint as a connmon that named the ingest query
    ``aggregates`` left it: the ingest query goes on from that folder, reading each event once."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    ckpt = tmp_path / "ckpt"
    commits = ckpt / "state" / "commits"
    legacy = ckpt / LEGACY_INGEST_DIR
    sigkill_and_restart(
        t,
        spark,
        tmp_path,
        str(ckpt),
        committed=lambda: any(f.name.isdigit() for f in commits.glob("*")),
        between=lambda: (ckpt / INGEST_QUERY).rename(legacy),
    )
    assert not (ckpt / INGEST_QUERY).exists()
    newest = max(int(f.name) for f in (legacy / "commits").glob("*") if f.name.isdigit())
    assert newest >= 1  # batches after the restart committed there
    status = latest_by_key(consume_all(t.bootstrap, t.status))
    assert f"connmon-job:{INGEST_QUERY}" in status


def test_oversized_records_never_stop_the_job_nor_its_restart(kafka_cluster, unique_name, tmp_path):
    """At the broker's default limits: a ~1 MB invalid record and a valid event with a 400 KB
    app name are dead-lettered; later events still aggregate, before and after a SIGKILL."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    hostile_app = recording("close_wait_leak")[-1] | {"app": "a" * 400_000}
    produce(t.bootstrap, t.events, [b"\xff" + b"x" * 999_000, json.dumps(hostile_app).encode()])
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    args = [*t.cli_args(), "--checkpoint", str(tmp_path / "ckpt")]
    log = tmp_path / "job.log"
    p = _start_cli(args, log)
    try:
        dead = wait_for(
            "two dead letters",
            lambda: d if len(d := consume_all(t.bootstrap, t.deadletter)) >= 2 else None,
        )
        assert sorted((v["reason"], v["raw_bytes"]) for _, v in dead) == sorted(
            [("too_large", 999_001), ("too_large", len(json.dumps(hostile_app)))]
        )
        assert all(len(base64.b64decode(v["raw"])) == 4096 for _, v in dead)
        wait_for(
            "the leak's aggregate",
            lambda: (
                "client|app-7|payments-sarama|prod-eu|2"
                in latest_by_key(consume_all(t.bootstrap, t.aggregates))
            ),
        )
        _kill_group(p)
        produce(t.bootstrap, t.events, [b"{" + b" " * 1_000_000 + b"}"], key="again")
        produce(t.bootstrap, t.events, lines(recording("duplicate_clients")), key="app-5")
        p = _start_cli(args, log)
        wait_for(
            "an aggregate of events sent after the restart",
            lambda: any(
                k.startswith("client|app-5|")
                for k in latest_by_key(consume_all(t.bootstrap, t.aggregates))
            ),
            240,
        )
        assert p.poll() is None, log.read_text()[-3000:]
        # written after the batch's rows, so perhaps a moment after that aggregate; a batch
        # the kill interrupted before its commit writes its dead letters again, with the same
        # keys (at least once)
        wait_for(
            "a third dead letter",
            lambda: len({k for k, _ in consume_all(t.bootstrap, t.deadletter)}) == 3,
        )
    finally:
        _kill_group(p, signal.SIGTERM)


# ---- Spark standalone cluster --------------------------------------------------------------
def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@pytest.fixture
def standalone(tmp_path):
    """A Spark master and two workers (1 core, 1 GiB each) on 127.0.0.1; yields the master URL
    and each worker's folder."""
    from streaming.stack.ports import free_port

    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    procs = []
    workers = [tmp_path / "w1", tmp_path / "w2"]
    commands = [
        (["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
          "--webui-port", str(ui)], tmp_path / "master.log", {}),
    ] + [
        (["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
          "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(w),
          f"spark://127.0.0.1:{port}"], tmp_path / f"{w.name}.log", {})
        for w in workers
    ]  # fmt: skip
    try:
        for cmd, log, extra in commands:
            procs.append(
                subprocess.Popen(
                    [_spark_class(), *cmd], stdout=open(log, "ab"),  # noqa: SIM115
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, env={**env, **extra},
                )
            )  # fmt: skip
            time.sleep(3)
        yield f"spark://127.0.0.1:{port}", workers
    finally:
        for proc in reversed(procs):
            _kill_group(proc, signal.SIGTERM, timeout_s=20)


def _ran_state_tasks(worker: Path) -> bool:
    """Whether an executor of this worker loaded a partition of the job's state store."""
    return any(
        "RocksDBStateStoreProvider" in f.read_text(errors="replace")
        for f in worker.glob("app-*/*/stderr")
    )


def test_job_on_a_standalone_cluster(kafka_cluster, standalone, unique_name, tmp_path):
    """The job on a cluster of two one-core workers: findings come out, and the state store's
    partitions are processed on both workers (the series' state scales out)."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("idle_zombie")))
    args = [
        *t.cli_args(), "--master", standalone[0], "--checkpoint", str(tmp_path / "ckpt"),
        "--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.cores.max=2",
        "--spark-conf", "spark.executor.cores=1", "--shuffle-partitions", "4",
    ]  # fmt: skip
    log = tmp_path / "job.log"
    master, workers = standalone
    p = _start_cli(args, log)
    try:
        f = wait_for(
            "idle_zombie finding from the cluster",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(
                "idle_zombie|client:app-6:legacy-reporter|prod-eu|2"
            ),
        )
        assert f["evidence"]["max_idle_s"] >= DetectorConfig().zombie_idle_s
        wait_for("state-store tasks on both workers", lambda: all(map(_ran_state_tasks, workers)))
    finally:
        _kill_group(p, signal.SIGTERM)


def test_a_bucket_over_its_series_limit_keeps_the_firing_series(
    kafka_cluster, spark, unique_name, tmp_path
):
    """One bucket that may keep one series, three series (one leaking toward broker 2): the
    healthy two are forgotten and counted in the state query's status, the leak's finding
    fires all the same."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    job = start_job(spark, t.settings(state_buckets=1, state_max_series_per_bucket=1))
    key = "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"
    try:
        f = wait_for(
            "the leak's finding",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(key),
        )

        def status() -> dict:
            return latest_by_key(consume_all(t.bootstrap, t.status)).get("connmon-job:state") or {}

        # The healthy series' windows may close in different batches, so they may be forgotten
        # one batch apart: wait until both are counted.
        state = wait_for(
            "both healthy series forgotten in the status",
            lambda: s if ((s := status()).get("state_series_shed_total") or 0) >= 2 else None,
            detail=status,
        )
    finally:
        job.stop()
    assert f["status"] == "firing"
    assert state["state_bucket_series_max"] == state["state_series"] == 1, state


def test_a_batch_run_again_after_a_crash_publishes_the_same_records(
    kafka_cluster, spark, unique_name, tmp_path
):
    """The state query wrote a batch's records, then the job died before Spark committed it
    (here: stopped, and the batch's commit removed, as a crash leaves it). The restarted job
    runs that batch again: the records it writes again are byte for byte the first run's,
    ``updated_at`` included (the batch's time, which Spark keeps in its offset log), so a
    reader of the compacted topics sees nothing change."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    ckpt = tmp_path / "ckpt"
    commits = ckpt / "state" / "commits"
    settings = t.settings(checkpoint=str(ckpt))
    conf = "spark.sql.streaming.noDataMicroBatches.enabled"
    spark.conf.set(conf, "false")  # batches with data only: the last one wrote records

    offsets = ckpt / "state" / "offsets"
    topics = (t.findings, t.aggregates)

    def last_batch() -> int | None:
        done = [int(f.name) for f in commits.glob("*") if f.name.isdigit()]
        planned = [int(f.name) for f in offsets.glob("*") if f.name.isdigit()]
        return max(done) if done and max(done) == max(planned) else None

    def batch_time(batch: int) -> str:
        """The ``updated_at`` a batch stamps its records with: its time in the offset log."""
        meta = json.loads((offsets / str(batch)).read_text().splitlines()[1])
        return iso(meta["batchTimestampMs"] / 1000.0)

    try:
        job = start_job(spark, settings)
        try:
            wait_for("the leak's finding", lambda: consume_all(t.bootstrap, t.findings))
            # Until no batch commits for four triggers.
            last, since = last_batch(), time.monotonic()
            while last is None or time.monotonic() - since < 4 * settings.trigger_s:
                if (now := last_batch()) != last:
                    last, since = now, time.monotonic()
                time.sleep(0.2)
        finally:
            job.stop(wait_s=30)
        first = {topic: consume_all(t.bootstrap, topic) for topic in topics}
        # The batch to run again is the last one that wrote records: the one whose time the
        # newest records carry (a later batch may write none: a window's partials can come in
        # two).
        newest = max(v["updated_at"] for records in first.values() for _k, v in records)
        done = sorted(int(f.name) for f in commits.glob("*") if f.name.isdigit())
        batch = next(b for b in reversed(done) if batch_time(b) == newest)
        # A crash after the batch's records and before its commit: no commit from it on, no
        # batch planned after it (with their checksum files: Spark writes both).
        for log, first_gone in ((commits, batch), (offsets, batch + 1)):
            for f in log.iterdir():
                number = f.name.lstrip(".").split(".")[0]
                if number.isdigit() and int(number) >= first_gone:
                    f.unlink()

        def written_again() -> list[tuple[str, dict]]:
            return [
                r for topic in topics for r in consume_all(t.bootstrap, topic)[len(first[topic]) :]
            ]

        job = start_job(spark, settings)
        try:
            wait_for("the batch run again and committed", lambda: (commits / str(batch)).exists())
            again = wait_for("its records", written_again)
        finally:
            job.stop(wait_s=30)
    finally:
        spark.conf.unset(conf)
    assert again, "the batch run again wrote nothing"
    missing = [r for r in again if r not in first[t.findings] + first[t.aggregates]]
    assert not missing, missing[:3]
