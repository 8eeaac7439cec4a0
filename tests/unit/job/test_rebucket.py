"""Saved buckets taken apart by series and put together in other buckets (no Spark): a job
whose state moves to another bucket count half way publishes what one process would."""

from __future__ import annotations

import json
from collections import defaultdict

from test_buckets import CFG, _batches, _one_process, _record

from streaming.job.buckets import Bucket, window_end_clock
from streaming.job.rebucket import merge, resolved_findings, series_in, split


def _run(batches, saved, bucket_of):
    """Each batch's rows to their buckets (every bucket called, as its timer would); what
    they publish."""
    findings, aggs, late = [], [], 0
    keys = set(saved) | {bucket_of(r["host"]) for _b, rows, _f in batches for r in rows}
    for batch, rows, fleet in batches:
        for k in sorted(keys):
            mine = [r for r in rows if bucket_of(r["host"]) == k]
            bucket = Bucket.load(saved.get(k), CFG, window_end_clock)
            em = bucket.process([_record(batch, mine, fleet)] if mine else [], fleet)
            saved[k] = None if bucket.empty() else bucket.dump()
            findings += em.findings
            aggs += em.aggregates
            late += em.late
    return findings, aggs, late


def test_state_moved_from_3_to_4_buckets_half_way_publishes_what_one_process_would():
    for seed in (1, 2, 3):
        findings, aggs, late = _one_process(seed)
        batches = _batches(seed)
        half = len(batches) // 2
        saved: dict[int, bytes | None] = {}
        got = _run(batches[:half], saved, lambda h: int(h[-1]) % 3)
        assert any(f["status"] == "firing" for _k, f in got[0]), "findings fire before the move"

        moved = defaultdict(list)
        for blob in filter(None, saved.values()):
            for fields, part in split(blob, CFG):
                moved[int(fields[1][-1]) % 4].append(part)  # the host picks the new bucket
        saved = {k: merge(parts) for k, parts in moved.items()}
        rest = _run(batches[half:], saved, lambda h: int(h[-1]) % 4)

        assert sorted(map(repr, got[0] + rest[0])) == sorted(map(repr, findings)), seed
        assert sorted(map(repr, got[1] + rest[1])) == sorted(map(repr, aggs)), seed
        assert got[2] + rest[2] == late


def test_a_bucket_splits_into_its_series_and_merges_back_whole():
    saved: dict[int, bytes | None] = {}
    _run(_batches(1)[:30], saved, lambda h: 0)
    blob = saved[0]
    assert blob is not None
    parts = split(blob, CFG)
    hosts = sorted(f[1] for f, _ in parts)
    assert len(hosts) == len(set(hosts)) > 3  # one part per series, each series once
    assert all(f[0] == "client" and f[2] == "orders" and f[4] == "1" for f, _ in parts)
    whole = Bucket.load(blob, CFG, window_end_clock)
    back = Bucket.load(merge(p for _, p in parts), CFG, window_end_clock)
    assert back.windows.open == whole.windows.open
    assert back.windows.max_event_s == whole.windows.max_event_s
    assert back.tracker.to_state() == whole.tracker.to_state()
    assert back.applied is None and back.timer_ms is None
    assert sorted(series_in(blob, CFG)) == sorted(f for f, _ in parts)


def test_a_buckets_firing_findings_come_out_resolved_at_the_given_time():
    saved: dict[int, bytes | None] = {}
    _run(_batches(2)[:30], saved, lambda h: 0)
    firing = Bucket.load(saved[0], CFG, window_end_clock).tracker.findings
    assert firing
    out = dict(resolved_findings(saved[0], CFG, "2026-11-27T00:00:00Z"))
    assert set(out) == set(firing)
    for key, text in out.items():
        f = json.loads(text)
        assert (f["key"], f["status"], f["updated_at"]) == (key, "resolved", "2026-11-27T00:00:00Z")
        assert f["summary"] == "Resolved: " + firing[key].summary
