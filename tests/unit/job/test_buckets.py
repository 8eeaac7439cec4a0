"""The job's per-bucket state (no Spark): series spread over buckets that see only their own
records plus the fleet's event time (as Spark's watermark and timers give it), each restored
from its saved state before every call, publish what one process holding every series would."""

from __future__ import annotations

import json
import random

from streaming.detectors.config import DetectorConfig
from streaming.job.buckets import (
    Bucket,
    Emitted,
    Record,
    decompress,
    fleet_time,
    output_rows,
    process_or_set_aside,
    window_end_clock,
)
from streaming.job.open_windows import flat_col

CFG = DetectorConfig()
T0 = 1_795_000_020.0  # a window start (a multiple of 60)
TOPICS = {"aggregates": "aggs", "findings": "finds", "deadletter": "dead"}


def _row(t: float, host: str, batch: int, rng: random.Random) -> dict:
    series = {"side": "client", "host": host, "app": "orders", "cluster": "prod", "broker": "1"}
    row = {**series, "window_start_s": t - t % 60, "events": 2, "last_event_s": t}
    row.update(summary_last_t=t, summary_interval_s=10.0)
    if host != "web-0" and rng.random() < 0.6:  # web-0 stays healthy
        row.update(
            {
                flat_col("CLOSE_WAIT", "t"): t,
                flat_col("CLOSE_WAIT", "count"): rng.randint(1, 9),
                flat_col("CLOSE_WAIT", "oldest_state_age_s"): 30.0 * batch,
            }
        )
    if rng.random() < 0.1:
        row.update(opens=1, closes_after_idle=1, closes_after_idle_local=1)
    return row


def _workload(seed: int, batches: int = 60) -> list[list[dict]]:
    """Eight hosts every 20 s; some go quiet for minutes (longer than the stale time), one
    sends late rows now and then."""
    rng = random.Random(seed)
    hosts = [f"web-{h}" for h in range(8)]
    quiet = {h: (rng.randrange(batches), rng.choice((5, 40))) for h in hosts}
    quiet["web-2"] = quiet["web-5"] = (20, 35)  # a whole bucket goes quiet (see below)
    out = []
    for b in range(batches):
        t = T0 + 20 * b + 1
        rows = [
            _row(t, h, b, rng) for h in hosts if not quiet[h][0] <= b < quiet[h][0] + quiet[h][1]
        ]
        if b > 12 and rng.random() < 0.2:
            rows.append({**_row(t - 300, "web-3", b, rng), "events": 5})  # late by then
        out.append(rows)
    return out


def _record(batch: int, rows: list[dict], fleet: float | None, part: int = 0) -> Record:
    return Record(batch, part, None, fleet, "\n".join(json.dumps(r) for r in rows))


def _batches(seed: int) -> list[tuple[int, list[dict], float | None]]:
    """(batch, rows, the fleet's newest event time before the batch)."""
    newest = None
    out = []
    for b, rows in enumerate(_workload(seed)):
        out.append((b, rows, newest))
        for r in rows:
            newest = r["last_event_s"] if newest is None else max(newest, r["last_event_s"])
    return out


def _one_process(seed: int) -> tuple[list, list, int]:
    b = Bucket(CFG, window_end_clock)
    findings, aggs, late = [], [], 0
    for batch, rows, fleet in _batches(seed):
        em = b.process([_record(batch, rows, fleet)], fleet)
        findings += em.findings
        aggs += em.aggregates
        late += em.late
    return findings, aggs, late


def test_buckets_restored_every_call_publish_what_one_process_would():
    for seed in (1, 2, 3):
        findings, aggs, late = _one_process(seed)
        assert len(findings) > 10 and late > 0, "the workload exercises detectors and lateness"
        kinds = {f["status"] for _, f in findings}
        assert kinds == {"firing", "resolved"}
        saved: dict[int, bytes | None] = {}
        got_f, got_a, got_late = [], [], 0
        for batch, rows, fleet in _batches(seed):
            for k in range(3):  # three buckets, by host: web-2 and web-5 share one
                mine = [r for r in rows if int(r["host"][-1]) % 3 == k]
                bucket = Bucket.load(saved.get(k), CFG, window_end_clock)
                # a bucket without rows is called by its timer, with the watermark's time
                records = [_record(batch, mine, fleet)] if mine else []
                em = bucket.process(records, fleet)
                saved[k] = None if bucket.empty() else bucket.dump()
                got_f += em.findings
                got_a += em.aggregates
                got_late += em.late
        assert sorted(map(repr, got_f)) == sorted(map(repr, findings)), f"seed {seed}"
        assert sorted(map(repr, got_a)) == sorted(map(repr, aggs)), f"seed {seed}"
        assert got_late == late


def test_the_fleets_time_alone_resolves_a_quiet_series_and_empties_the_bucket():
    rng = random.Random(0)
    b = Bucket(CFG, window_end_clock)
    row = _row(T0 + 5, "web-1", 0, rng)
    row[flat_col("CLOSE_WAIT", "count")] = 5
    row[flat_col("CLOSE_WAIT", "t")] = T0 + 5
    row[flat_col("CLOSE_WAIT", "oldest_state_age_s")] = 600.0
    em = b.process([_record(0, [row], None)], None)
    assert [f["status"] for _, f in em.findings] == ["firing"]
    em = b.process([], T0 + 1000)  # a timer: only other series moved on
    assert [f["status"] for _, f in em.findings] == ["resolved"]
    assert b.next_timer_ms() is not None  # history is still kept
    b.process([], T0 + 4000)
    assert b.empty() and b.next_timer_ms() is None


def test_the_timer_is_set_for_the_next_window_boundary_of_the_fleets_time():
    rng = random.Random(0)
    b = Bucket(CFG, window_end_clock)
    b.process([_record(0, [_row(T0 + 5, "web-1", 0, rng)], None)], None)
    # the fleet's time T0 + 5 reaches the boundary T0 + 60 when Spark's watermark (the
    # fleet's newest event time) does
    assert b.next_timer_ms() == (T0 + 60) * 1000
    assert fleet_time(int(b.next_timer_ms())) == T0 + 60
    assert fleet_time(0) is None  # no watermark yet


def test_an_ingest_batch_written_twice_is_applied_once():
    rng = random.Random(3)
    rows = [_row(T0 + 5, f"web-{h}", 0, rng) for h in range(3)]
    once, twice = Bucket(CFG, window_end_clock), Bucket(CFG, window_end_clock)
    once.process([_record(7, rows, None)], None)
    twice.process([_record(7, rows, None)], None)
    em = twice.process([_record(7, rows, None), _record(7, rows, None)], None)
    assert em.duplicates == 2 and em.aggregates == [] and em.stats()["duplicates"] == 2
    assert twice.windows.open == once.windows.open
    # another part of the same batch, then the next batch, are applied
    em = twice.process([_record(8, rows, T0 + 5), _record(7, rows[:1], None, part=3)], None)
    assert em.duplicates == 0 and (twice.applied.batch, twice.applied.parts) == (8, [0])
    # a part of a batch written again after a crash, after the parts that were applied
    em = twice.process([_record(8, rows, T0 + 5), _record(8, rows, T0 + 5, part=5)], None)
    assert em.duplicates == 1 and (twice.applied.batch, twice.applied.parts) == (8, [0, 5])


def test_records_are_applied_in_batch_order_each_against_the_time_before_it():
    rng = random.Random(4)
    early = _row(T0 + 5, "web-1", 0, rng)
    later = _row(T0 + 400, "web-2", 1, rng)
    b = Bucket(CFG, window_end_clock)
    # both batches in one call, in the wrong order: the first is not late by the second
    em = b.process([_record(1, [later], T0 + 5), _record(0, [early], None)], None)
    assert em.late == 0 and len(em.aggregates) == 2


def test_saved_state_is_compressed_and_round_trips():
    b = Bucket(CFG, window_end_clock)
    rng = random.Random(1)
    b.process([_record(0, [_row(T0 + 5, f"web-{h}", 0, rng) for h in range(50)], None)], None)
    b.timer_ms = 123
    blob = b.dump()
    assert len(blob) < len(decompress(blob)) / 3
    again = Bucket.load(blob, CFG, window_end_clock)
    assert again.dump() == blob and again.timer_ms == 123
    assert (again.applied.batch, again.applied.parts) == (0, [0])


def test_output_rows_list_aggregates_then_findings_then_stats():
    b = Bucket(CFG, window_end_clock)
    rng = random.Random(2)
    row = _row(T0 + 5, "web-1", 0, rng)
    row[flat_col("CLOSE_WAIT", "count")] = 5
    row[flat_col("CLOSE_WAIT", "t")] = T0 + 5
    row[flat_col("CLOSE_WAIT", "oldest_state_age_s")] = 600.0
    rows = list(output_rows(b.process([_record(0, [row], None)], None), TOPICS))
    assert [r[0] for r in rows] == ["aggs", "finds"]  # nothing counted: no stats row
    assert rows[0][1] == "client|web-1|orders|prod|1"
    counted = Emitted(late=3)
    assert list(output_rows(counted, TOPICS))[-1][:2] == (None, None)


def test_hosts_with_late_events_or_a_clock_ahead_are_counted_by_name():
    rng = random.Random(5)
    now = T0 + 1000
    b = Bucket(CFG, window_end_clock)
    b.process([_record(0, [_row(now - 5, "web-1", 0, rng)], None)], None)
    rows = [
        _row(now - 5, "web-1", 1, rng),  # on time
        {**_row(now - 400, "web-2", 1, rng), "events": 4},  # late
        _row(now + 90, "web-3", 1, rng),  # 90 s ahead of the job's clock
    ]
    em = b.process([Record(1, 0, now, now - 5, "\n".join(json.dumps(r) for r in rows))], None)
    hosts = em.stats()["hosts"]
    assert set(hosts) == {"web-2", "web-3"}
    assert hosts["web-2"]["late"] == 4 and hosts["web-2"]["offset_s"] == -400.0
    assert hosts["web-3"]["late"] == 0 and hosts["web-3"]["offset_s"] == 90.0
    # the clock bounds the fleet's time: web-3 does not make web-1's next window late
    assert b.windows.max_event_s == now


def test_a_record_the_bucket_fails_on_is_set_aside_and_the_others_are_applied():
    rng = random.Random(6)
    good = [_row(T0 + 5, f"web-{h}", 0, rng) for h in range(3)]
    saved = Bucket(CFG, window_end_clock).dump()
    bad = Record(1, 0, None, T0 + 5, json.dumps({**good[0], "window_start_s": "soon"}))
    records = [_record(0, good, None), bad, _record(2, good, T0 + 5)]
    bucket, em = process_or_set_aside(saved, records, None, CFG, window_end_clock, True, "b 7")
    ((key, letter),) = em.dead_letters
    assert key == "b 7:1:0" and letter["reason"] == "internal_error"
    assert letter["detail"].startswith("TypeError") and letter["raw_bytes"] == len(bad.rows)
    assert em.stats()["internal_errors"] == 1
    assert bucket.applied.batch == 2 and len(em.aggregates) == 3  # batches 0 and 2 applied
    clean = Bucket(CFG, window_end_clock)
    clean.process([_record(0, good, None), _record(2, good, T0 + 5)], None)
    assert bucket.windows.open == clean.windows.open  # nothing of the bad record stayed
    rows = list(output_rows(em, TOPICS))
    assert ("dead", "b 7:1:0") in {r[:2] for r in rows}


def test_the_parts_of_a_batch_are_judged_against_the_time_before_it_whatever_their_order():
    """A batch spanning minutes (a replay, a backlog): its parts, applied one after the other
    or in separate calls, merge as the whole batch would; none is late by another's events."""
    rng = random.Random(7)
    hosts = [f"web-{h}" for h in range(6)]
    rows = [_row(T0 + 60 * m + 5, h, 0, rng) for m in range(10) for h in hosts]
    by_host = {h: [r for r in rows if r["host"] == h] for h in hosts}
    whole = Bucket(CFG, window_end_clock)
    em_whole = whole.process([_record(0, rows, None)], None)
    assert em_whole.late == 0
    apart = Bucket(CFG, window_end_clock)
    late = 0
    for part, h in enumerate(hosts):  # one call per part, restored in between
        apart = Bucket.load(apart.dump(), CFG, window_end_clock)
        late += apart.process([_record(0, by_host[h], None, part=part)], None).late
    assert late == 0 and apart.windows.open == whole.windows.open
