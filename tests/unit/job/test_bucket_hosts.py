"""The hosts a state bucket reports for a batch (no Spark): only those with late events or a
clock ahead of the job's, each with its events, late events and newest offset."""

from __future__ import annotations

import json

from streaming.detectors.config import DetectorConfig
from streaming.job.buckets import Bucket, Record, window_end_clock

CFG = DetectorConfig()
NOW = 1_795_000_020.0  # the job's clock when the batch started


def _row(host: str, app: str, t: float, events: int) -> dict:
    series = {"side": "client", "host": host, "app": app, "cluster": "prod", "broker": "1"}
    return {**series, "window_start_s": t - t % 60, "events": events, "last_event_s": t}


def test_only_hosts_ahead_are_reported_with_their_events_and_newest_offset():
    ahead = CFG.clock_skew_tolerance_s + 100
    rows = [
        _row("web-0", "orders", NOW + ahead, 3),
        _row("web-0", "billing", NOW + ahead + 50, 4),
        _row("web-1", "orders", NOW - 5, 7),
        _row("web-2", "orders", NOW + ahead + 10, 1),
    ]
    record = Record(0, 0, NOW, None, "\n".join(json.dumps(r) for r in rows))
    em = Bucket(CFG, window_end_clock).process([record], None)
    got = {h: b.to_dict() for h, b in em.hosts.items()}
    assert got == {
        "web-0": {"events": 7, "late": 0, "offset_s": ahead + 50},
        "web-2": {"events": 1, "late": 0, "offset_s": ahead + 10},
    }


def test_a_healthy_batch_reports_no_host():
    rows = [_row(f"web-{i}", "orders", NOW - i, 2) for i in range(50)]
    record = Record(0, 0, NOW, None, "\n".join(json.dumps(r) for r in rows))
    assert Bucket(CFG, window_end_clock).process([record], None).hosts == {}


def test_a_late_host_is_reported_with_its_late_events_and_all_its_events():
    bucket = Bucket(CFG, window_end_clock)
    first = [_row("web-1", "orders", NOW, 2)]
    bucket.process([Record(0, 0, NOW, None, "\n".join(json.dumps(r) for r in first))], None)
    # A window that closed before this batch (older than the watermark's delay), and one
    # still open, from the same host; another host on time.
    old = NOW - CFG.watermark_s - 3 * CFG.window_s
    rows = [
        _row("web-2", "orders", old, 5),
        _row("web-2", "billing", NOW - 1, 2),
        _row("web-1", "orders", NOW + 1, 9),
    ]
    em = bucket.process([Record(1, 0, NOW + 2, None, "\n".join(json.dumps(r) for r in rows))], None)
    got = {h: b.to_dict() for h, b in em.hosts.items()}
    assert got == {"web-2": {"events": 7, "late": 5, "offset_s": -3.0}}
