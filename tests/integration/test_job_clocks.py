"""Event time per host, live against a real broker: an agent whose clock is 3 minutes fast
makes no other host's events late, and hosts whose clocks are off are named in the job status
with their offset; a host 8 minutes slow has its late events counted by name."""

from __future__ import annotations

import time
from typing import Any

from job_helpers import Topics, consume_all, latest_by_key, lines, produce, recording, wait_for

from streaming.job.pipeline import start_job

SKEW_S = 180.0
# Behind by more than the watermark (120 s) plus a window (60 s) plus the test's own pauses
# (up to five minutes between the fast host's batch and the slow host's events on a loaded
# machine), so that every one of its events is late.
SLOW_S = 480.0


def _as_host(events: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [{**e, "host": host} for e in events]


def _host_rows(bootstrap: str, topic: str) -> dict[str, dict[str, Any]]:
    """The newest job status's ``hosts``, by host."""
    statuses = [v for _k, v in consume_all(bootstrap, topic)]
    return {h["host"]: h for h in (statuses[-1]["hosts"] if statuses else [])}


def test_a_host_three_minutes_fast_makes_no_other_host_late(
    kafka_cluster, spark, unique_name, tmp_path
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    job = start_job(spark, t.settings(checkpoint=str(tmp_path / "ckpt")))
    try:
        # The fast host's last 5 minutes, stamped by its clock: 3 minutes in the future.
        fast = _as_host(recording("healthy", end=time.time() + SKEW_S, duration_s=300), "fast-1")
        produce(t.bootstrap, t.events, lines(fast), key="fast-1")
        row = wait_for(
            "the fast host in the job status",
            lambda: _host_rows(t.bootstrap, t.status).get("fast-1"),
            timeout_s=180,
        )
        assert abs(row["clock_offset_s"] - SKEW_S) < 30, row
        assert row["skewed_events_total"] > 0 and row["late_events_total"] == 0

        # Then the rest of the fleet, on time, and one host 8 minutes slow.
        ok = _as_host(recording("healthy", duration_s=120), "ok-1")
        slow = _as_host(recording("healthy", end=time.time() - SLOW_S, duration_s=60), "slow-1")
        produce(t.bootstrap, t.events, lines(ok + slow), key="ok-1")

        def ok_aggregates() -> list[dict[str, Any]]:
            aggs = latest_by_key(consume_all(t.bootstrap, t.aggregates))
            return [a for a in aggs.values() if a["host"] == "ok-1"]

        aggs = wait_for("the on-time host's aggregates", ok_aggregates, timeout_s=180)
        assert {a["app"] for a in aggs} == {"orders-consumer"}

        # The slow host's events may span several batches: wait until the status has counted
        # them all (or more, which the assertion below then reports).
        def all_slow_counted() -> dict[str, dict[str, Any]] | None:
            h = _host_rows(t.bootstrap, t.status)
            row = h.get("slow-1")
            return h if row and row["late_events_total"] >= len(slow) else None

        hosts = wait_for(
            "the slow host's late events in the job status", all_slow_counted, timeout_s=120
        )
        slow_row = hosts["slow-1"]
        assert slow_row["late_events_total"] == len(slow), slow_row
        assert abs(slow_row["clock_offset_s"] + SLOW_S) < 30, slow_row
        assert "ok-1" not in hosts  # nothing of the on-time host was late or skewed
        status = consume_all(t.bootstrap, t.status)[-1][1]
        assert status["late_events_total"] == len(slow)
        assert all(q.isActive for q in job.queries)
    finally:
        job.stop()
