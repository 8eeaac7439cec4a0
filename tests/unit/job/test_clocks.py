"""Event time per host: a fast clock cannot move the fleet's event time, and misbehaving hosts
are counted by name (``clocks``, ``open_windows``; the buckets' counts: test_buckets.py)."""

from __future__ import annotations

import pytest

from streaming.job import clocks
from streaming.job.open_windows import OpenWindows

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0


def test_host_counts_merge_over_buckets():
    merged: dict[str, clocks.HostBatch] = {}
    clocks.merge_hosts(merged, {"fast": clocks.HostBatch(10, 0, 170.0).to_dict()})
    clocks.merge_hosts(merged, {"fast": {"events": 3, "late": 0, "offset_s": 180.0}})
    clocks.merge_hosts(merged, {"x": {"events": 10, "late": 10, "offset_s": None}})
    assert merged["fast"] == clocks.HostBatch(13, 0, 180.0)  # the newest event decides
    assert merged["x"] == clocks.HostBatch(10, 10, None)


def test_offsets_are_kept_per_host_the_most_skewed_first():
    hc = clocks.HostClocks(tolerance_s=10)
    fast = clocks.HostBatch(events=100, offset_s=181.0)
    slow = clocks.HostBatch(events=20, late=20, offset_s=-200.0)
    hc.update({"fast": fast, "slow": slow}, NOW)
    snap = {r["host"]: r for r in hc.snapshot(NOW)}
    assert snap["fast"]["clock_offset_s"] == pytest.approx(181)
    assert snap["slow"]["clock_offset_s"] == pytest.approx(-200)
    assert snap["fast"]["skewed_events_total"] == 100 and snap["fast"]["late_events_total"] == 0
    assert snap["slow"]["late_events_total"] == 20
    assert [r["host"] for r in hc.snapshot(NOW)] == ["slow", "fast"]  # most skewed first


def test_a_late_host_within_the_tolerance_counts_late_events_not_skew():
    hc = clocks.HostClocks(tolerance_s=10)
    hc.update({"h": clocks.HostBatch(events=5, late=5, offset_s=-4.0)}, NOW)
    (r,) = hc.snapshot(NOW)
    assert r == {
        "host": "h",
        "clock_offset_s": None,
        "skewed_events_total": 0,
        "late_events_total": 5,
    }


def test_offsets_age_out_and_hosts_are_forgotten():
    hc = clocks.HostClocks(tolerance_s=10)
    hc.update({"h": clocks.HostBatch(events=1, offset_s=60.0)}, NOW)
    later = NOW + clocks.OFFSET_TTL_S + 1
    assert hc.snapshot(later)[0]["clock_offset_s"] is None
    assert hc.snapshot(later)[0]["skewed_events_total"] == 1
    hc.update({}, NOW + clocks.FORGET_AFTER_S + 1)
    assert hc.snapshot(NOW + clocks.FORGET_AFTER_S + 1) == []


def test_the_list_is_bounded_and_the_rest_summed():
    hc = clocks.HostClocks(tolerance_s=10)
    n = clocks.HOSTS_MAX + 5
    batch = {f"h{i:03d}": clocks.HostBatch(events=1, offset_s=20.0 + i) for i in range(n)}
    hc.update(batch, NOW)
    snap = hc.snapshot(NOW)
    assert len(snap) == clocks.HOSTS_MAX + 1
    assert snap[0]["host"] == f"h{n - 1:03d}"
    assert snap[-1] == {
        "host": clocks.OTHERS,
        "clock_offset_s": None,
        "skewed_events_total": 5,
        "late_events_total": 0,
    }


def _part(host: str, start: float, last: float) -> dict:
    return {
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


def test_a_fast_host_does_not_close_the_fleets_current_window():
    """Windows of 60 s, watermark 120 s: a host 180 s ahead next to a healthy one."""
    now = 1_800_000_030.0
    start = now - now % 60
    bounded = OpenWindows(60, 120)
    bounded.apply([_part("fast", start + 180, now + 180), _part("ok", start, now)], bound=now)
    res = bounded.apply([_part("ok", start, now + 5)], bound=now + 5)
    assert res.late == 0 and len(res.windows) == 1
    # the same rows without the bound (a replay): the healthy host's window is late
    unbounded = OpenWindows(60, 120)
    unbounded.apply([_part("fast", start + 180, now + 180), _part("ok", start, now)])
    res = unbounded.apply([_part("ok", start, now + 5)])
    assert res.late == 1 and res.late_by_host == {"ok": 1}
