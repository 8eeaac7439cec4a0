"""Two jobs on one Kafka cluster, sharing the partials topic (real broker, real Spark): nothing
one job does, not even being frozen in the middle of its work, holds up the other's reads."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from job_helpers import (
    Topics,
    _descendants,
    _kill_group,
    _start_cli,
    consume_all,
    latest_by_key,
    lines,
    produce,
    recording,
    wait_for,
)

from streaming.job.pipeline import start_job


def _signal_all(pid: int, sig: int) -> None:
    """The job's process group and everything below it (its JVM has a group of its own)."""
    for p in [pid, *(p for p, _ in _descendants(pid))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


def test_a_frozen_job_does_not_hold_up_another_on_the_same_partials_topic(
    kafka_cluster, spark, unique_name, tmp_path
):
    """Job B runs, then is frozen (SIGSTOP: the worst a job can do to a shared topic is stop
    anywhere, a write half done). Job A, started on the same partials topic with its own
    checkpoint and outputs, still gets its events to findings and catches up (offsets behind
    0); B, thawed, goes on with its own."""
    a = Topics(kafka_cluster.bootstrap_servers, f"{unique_name}-a")
    b = Topics(kafka_cluster.bootstrap_servers, f"{unique_name}-b")
    produce(b.bootstrap, b.events, lines(recording("duplicate_clients")), key="app-5")
    b_args = [*b.cli_args(), "--partials-topic", a.partials, "--checkpoint", str(tmp_path / "b")]
    log = tmp_path / "b.log"
    pb = _start_cli(b_args, log)
    job = None
    try:
        dup = "duplicate_connections|client:app-5:billing-service|prod-eu|1"
        wait_for(
            "job B's finding", lambda: dup in latest_by_key(consume_all(b.bootstrap, b.findings))
        )
        produce(b.bootstrap, b.events, lines(recording("close_wait_leak")), key="app-7")
        time.sleep(2)  # B is reading and writing when it freezes
        _signal_all(pb.pid, signal.SIGSTOP)

        job = start_job(spark, a.settings(checkpoint=str(tmp_path / "a")))
        produce(a.bootstrap, a.events, lines(recording("close_wait_leak")), key="app-7")
        leak = "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"
        started = time.monotonic()
        wait_for(
            "job A's finding", lambda: leak in latest_by_key(consume_all(a.bootstrap, a.findings))
        )
        print(f"job A's first finding {time.monotonic() - started:.1f} s after its events")
        wait_for(
            "job A's state query caught up",
            lambda: (
                (st := latest_by_key(consume_all(a.bootstrap, a.status)).get("connmon-job:state"))
                and st["offsets_behind"] == 0
            ),
        )
        assert dup not in latest_by_key(consume_all(a.bootstrap, a.findings))  # B's own

        _signal_all(pb.pid, signal.SIGCONT)
        wait_for(
            "job B's findings after the thaw",
            lambda: leak in latest_by_key(consume_all(b.bootstrap, b.findings)),
        )
        assert pb.poll() is None, log.read_text()[-3000:]
    finally:
        _signal_all(pb.pid, signal.SIGCONT)
        _kill_group(pb, signal.SIGTERM)
        if job is not None:
            job.stop()
