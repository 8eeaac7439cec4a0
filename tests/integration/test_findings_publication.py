"""The publication rule, live against a real broker: a CLOSE_WAIT leak held for a quarter of an
hour, its events read a few per micro-batch, is written to the findings topic when it
fires, when a number doubles and as a heartbeat, not once per batch."""

from __future__ import annotations

import math
import time
from typing import Any

from job_helpers import Topics, consume_all, gen_epoch, lines, produce, recording, wait_for

from streaming.detectors.config import DetectorConfig
from streaming.job.pipeline import start_job
from streaming.schema.findings import CHANGES

KEY = "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"


def _bins(first: float, last: float) -> int:
    """Powers of two a growing number crosses on its way from ``first`` to ``last``."""
    return math.floor(math.log2(last)) - math.floor(math.log2(first))


def test_a_held_leak_is_written_on_change_and_heartbeat_not_every_batch(
    kafka_cluster, spark, unique_name, tmp_path
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    # A few events per micro-batch: the leak reaches the job over about 30 batches, so that
    # even when the state query takes several of them at once (a loaded machine) the old rule
    # below has many more evaluations to write than the new one.
    per_batch = 16
    job = start_job(
        spark,
        t.settings(checkpoint=str(tmp_path / "ckpt"), max_offsets_per_trigger=per_batch),
    )
    events = recording("close_wait_leak", end=time.time())

    def series() -> list[dict[str, Any]]:
        return [
            v
            for _k, v in consume_all(t.bootstrap, t.aggregates)
            if v["app"] == "payments-sarama" and v["broker"] == "2"
        ]

    try:
        produce(t.bootstrap, t.events, lines(events), key="app-7")
        newest = max(gen_epoch(e["event_time"]) for e in events)
        wait_for(
            "the leak's last window",
            lambda: any(gen_epoch(a["window_end"]) > newest for a in series()),
            timeout_s=240,
        )
        aggs = series()
        records = [v for k, v in consume_all(t.bootstrap, t.findings) if k == KEY]
    finally:
        job.stop()

    changes = [r["change"] for r in records]
    assert changes and changes[0] == "fired", changes
    assert set(changes) <= set(CHANGES) - {"resolved"}, changes
    assert {r["first_fired_at"] for r in records} == {records[0]["window_start"]}
    # The bound, from what the aggregates say the leak did: its count and its oldest age only
    # grow, and a record for either needs it to double since the last record.
    leaking = [a for a in aggs if a["close_wait_count"]]
    counts = [a["close_wait_count"] for a in leaking]
    ages = [a["close_wait_oldest_age_s"] for a in leaking if a["close_wait_oldest_age_s"]]
    fired_at = gen_epoch(records[0]["window_start"])
    held_s = max(gen_epoch(a["window_end"]) for a in leaking) - fired_at
    doublings = _bins(min(counts), max(counts)) + _bins(
        max(min(ages), DetectorConfig().close_wait_grace_s), max(ages)
    )
    heartbeats = math.floor(held_s / DetectorConfig().finding_heartbeat_s)
    bound = 1 + 2 + doublings + heartbeats  # fire, severity either way, doublings, heartbeats
    assert len(records) <= bound, (changes, bound)
    # The old rule (a record whenever a window's evidence changed) exceeds it here.
    updates = len({(a["window_start"], a["close_wait_count"], a["updated_at"]) for a in leaking})
    assert updates > bound, (updates, bound)
    print(f"evaluations {updates}, bound {bound}")
    per_hour = len(records) * 3600 / held_s
    print(f"{len(records)} records in {held_s:.0f} s of event time: {per_hour:.0f} per hour")
