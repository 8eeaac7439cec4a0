"""Event time per host: a fast clock cannot move the fleet's event time, and misbehaving hosts
are counted by name (``clocks``, ``ingest.count_rows``, ``open_windows``)."""

from __future__ import annotations

import json
from collections import namedtuple

import pytest

from streaming.job import clocks
from streaming.job.ingest import BatchContext, BatchCounts, count_rows, counts_dict, merge_counts
from streaming.job.open_windows import OpenWindows

pytestmark = pytest.mark.unit

Row = namedtuple("Row", "bucket key value reason events host window_start_s last_event_s")
NOW = 1_800_000_000.0
# Watermark 120 s behind NOW: windows (60 s) ending at or before NOW - 120 are closed.
CTX = BatchContext(batch=7, window_s=60, now=NOW, watermark_s=NOW - 120, tolerance_s=10)


def row(host: str, t: float, events: int = 10) -> Row:
    return Row(1, "k", json.dumps({"host": host}), None, events, host, t - t % 60, t)


def test_count_rows_drops_late_rows_and_reports_only_misbehaving_hosts():
    c = BatchCounts()
    rows = [
        row("ok", NOW - 3),
        row("fast", NOW + 180),
        row("fast", NOW + 175, events=5),
        row("slow", NOW - 400, events=7),
        row("slow", NOW - 100, events=2),
        Row(None, None, None, "malformed_json", 4, None, None, None),
    ]
    passed = list(count_rows(rows, c, CTX))
    assert [json.loads(r.value)["host"] for r in passed] == ["ok", "fast", "fast", "slow"]
    # the value gets the batch and the event time bounded by the job's clock
    assert json.loads(passed[1].value) == {"host": "fast", "batch": 7, "progress_s": NOW}
    assert json.loads(passed[0].value)["progress_s"] == NOW - 3
    assert c.late == 7
    assert c.events == {"": 34, "malformed_json": 4}
    assert sorted(c.hosts) == ["fast", "slow"]  # "ok" stays on the executor
    assert c.hosts["fast"].events == 15 and c.hosts["fast"].newest == NOW + 180
    assert c.hosts["slow"].late == 7 and c.hosts["slow"].events == 9
    # the fast host's events do not carry the fleet's time past the job's clock
    assert c.max_event_s == NOW


def test_counts_survive_the_accumulator_round_trip():
    a, b = BatchCounts(), BatchCounts()
    list(count_rows([row("fast", NOW + 180)], a, CTX))
    list(count_rows([row("fast", NOW + 170, events=3), row("x", NOW - 500)], b, CTX))
    merged = BatchCounts()
    merge_counts(merged, counts_dict(a))
    merge_counts(merged, counts_dict(b))
    assert merged.hosts["fast"].events == 13 and merged.hosts["fast"].newest == NOW + 180
    assert merged.late == 10 and merged.hosts["x"].late == 10


def test_offsets_are_measured_against_the_bounded_fleet_time():
    hc = clocks.HostClocks(tolerance_s=10)
    fast = clocks.HostBatch(events=100, newest=NOW + 181)
    slow = clocks.HostBatch(events=20, late=20, newest=NOW - 200)
    hc.update({"fast": fast, "slow": slow}, clocks.bounded(NOW + 181, NOW), NOW)
    snap = {r["host"]: r for r in hc.snapshot(NOW)}
    assert snap["fast"]["clock_offset_s"] == pytest.approx(181)
    assert snap["slow"]["clock_offset_s"] == pytest.approx(-200)
    assert snap["fast"]["skewed_events_total"] == 100 and snap["fast"]["late_events_total"] == 0
    assert snap["slow"]["late_events_total"] == 20
    assert [r["host"] for r in hc.snapshot(NOW)] == ["slow", "fast"]  # most skewed first


def test_a_late_host_within_the_tolerance_counts_late_events_not_skew():
    hc = clocks.HostClocks(tolerance_s=10)
    hc.update({"h": clocks.HostBatch(events=5, late=5, newest=NOW - 4)}, NOW, NOW)
    (r,) = hc.snapshot(NOW)
    assert r == {
        "host": "h",
        "clock_offset_s": None,
        "skewed_events_total": 0,
        "late_events_total": 5,
    }


def test_offsets_age_out_and_hosts_are_forgotten():
    hc = clocks.HostClocks(tolerance_s=10)
    hc.update({"h": clocks.HostBatch(events=1, newest=NOW + 60)}, NOW, NOW)
    later = NOW + clocks.OFFSET_TTL_S + 1
    assert hc.snapshot(later)[0]["clock_offset_s"] is None
    assert hc.snapshot(later)[0]["skewed_events_total"] == 1
    hc.update({}, NOW, NOW + clocks.FORGET_AFTER_S + 1)
    assert hc.snapshot(NOW + clocks.FORGET_AFTER_S + 1) == []


def test_the_list_is_bounded_and_the_rest_summed():
    hc = clocks.HostClocks(tolerance_s=10)
    n = clocks.HOSTS_MAX + 5
    batch = {f"h{i:03d}": clocks.HostBatch(events=1, newest=NOW + 20 + i) for i in range(n)}
    hc.update(batch, NOW, NOW)
    snap = hc.snapshot(NOW)
    assert len(snap) == clocks.HOSTS_MAX + 1
    assert snap[0]["host"] == f"h{n - 1:03d}"
    assert snap[-1] == {
        "host": clocks.OTHERS,
        "clock_offset_s": None,
        "skewed_events_total": 5,
        "late_events_total": 0,
    }


def test_replay_has_no_clock_bound_and_no_late_rows_before_a_watermark():
    c = BatchCounts()
    ctx = BatchContext(batch=0, window_s=60)
    (r,) = count_rows([row("fast", NOW + 180)], c, ctx)
    assert json.loads(r.value)["progress_s"] == NOW + 180 and c.hosts == {} and c.late == 0


def _part(host: str, start: float, last: float, progress: float | None) -> dict:
    p = {
        "window_start_s": start,
        "side": "client",
        "host": host,
        "app": "a",
        "cluster": "c",
        "broker": "1",
        "peer_host": None,
        "events": 1,
        "last_event_s": last,
    }
    if progress is not None:
        p["progress_s"] = progress
    return p


def test_a_fast_host_does_not_close_the_fleets_current_window():
    """Windows of 60 s, watermark 120 s: a host 180 s ahead next to a healthy one."""
    now = 1_800_000_030.0
    start = now - now % 60
    bounded = OpenWindows(60, 120)
    bounded.apply([_part("fast", start + 180, now + 180, now), _part("ok", start, now, now)])
    res = bounded.apply([_part("ok", start, now + 5, now + 5)])
    assert res.late == 0 and len(res.rows) == 1
    # the same rows without the bound (an older partial row): the healthy host's window is late
    unbounded = OpenWindows(60, 120)
    unbounded.apply([_part("fast", start + 180, now + 180, None), _part("ok", start, now, None)])
    assert unbounded.apply([_part("ok", start, now + 5, None)]).late == 1
