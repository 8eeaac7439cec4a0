"""The job's per-bucket state (no Spark): series spread over buckets that see only their own
partial rows plus the fleet's ticks, each restored from its saved state before every batch,
publish what one process holding every series would."""

from __future__ import annotations

import os
import random
import zlib

import pytest

from streaming.detectors.config import DetectorConfig
from streaming.job.buckets import (
    END,
    STATE_PIECE_BYTES,
    TICK,
    ZSTD_MAGIC,
    Bucket,
    decompress,
    joined_state,
    output_frame,
    state_pieces,
    window_end_clock,
)
from streaming.job.open_windows import flat_col

CFG = DetectorConfig()
T0 = 1_795_000_000.0  # a window start (a multiple of 60)


def _row(t: float, host: str, batch: int, rng: random.Random) -> dict:
    series = {"side": "client", "host": host, "app": "orders", "cluster": "prod", "broker": "1"}
    row = {**series, "window_start_s": t - t % 60, "events": 2, "last_event_s": t}
    row.update(batch=batch, summary_last_t=t, summary_interval_s=10.0)
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


def _ticked(batches: list[list[dict]]) -> list[tuple[list[dict], dict]]:
    newest = None
    out = []
    for b, rows in enumerate(batches):
        for r in rows:
            newest = r["last_event_s"] if newest is None else max(newest, r["last_event_s"])
        out.append((rows, {"batch": b, END: True, TICK: newest}))
    return out


def _one_process(seed: int) -> tuple[list, list, int]:
    b = Bucket(CFG, window_end_clock)
    findings, aggs, late = [], [], 0
    for rows, tick in _ticked(_workload(seed)):
        em = b.process([*rows, tick], latest_only=False)
        findings += em.findings
        aggs += em.aggregates
        late += em.late
    return findings, aggs, late


def test_buckets_restored_every_batch_publish_what_one_process_would():
    for seed in (1, 2, 3):
        findings, aggs, late = _one_process(seed)
        assert len(findings) > 10 and late > 0, "the workload exercises detectors and lateness"
        kinds = {f["status"] for _, f in findings}
        assert kinds == {"firing", "resolved"}
        saved: dict[int, bytes | None] = {}
        got_f, got_a, got_late = [], [], 0
        for rows, tick in _ticked(_workload(seed)):
            for k in range(3):  # three buckets, by host: web-2 and web-5 share one
                mine = [r for r in rows if int(r["host"][-1]) % 3 == k]
                bucket = Bucket.load(saved.get(k), CFG, window_end_clock)
                em = bucket.process([*mine, tick], latest_only=False)
                saved[k] = None if bucket.empty() else bucket.dump()
                got_f += em.findings
                got_a += em.aggregates
                got_late += em.late
        assert sorted(map(repr, got_f)) == sorted(map(repr, findings)), f"seed {seed}"
        assert sorted(map(repr, got_a)) == sorted(map(repr, aggs)), f"seed {seed}"
        assert got_late == late


def test_ticks_alone_resolve_a_quiet_series_and_empty_the_bucket():
    rng = random.Random(0)
    b = Bucket(CFG, window_end_clock)
    row = _row(T0 + 5, "web-1", 0, rng)
    row[flat_col("CLOSE_WAIT", "count")] = 5
    row[flat_col("CLOSE_WAIT", "t")] = T0 + 5
    row[flat_col("CLOSE_WAIT", "oldest_state_age_s")] = 600.0
    em = b.process([row, {"batch": 0, END: True, TICK: T0 + 5}])
    assert [f["status"] for _, f in em.findings] == ["firing"]
    em = b.process([{"batch": 1, END: True, TICK: T0 + 1000}])  # only other series moved on
    assert [f["status"] for _, f in em.findings] == ["resolved"]
    b.process([{"batch": 2, END: True, TICK: T0 + 4000}])
    assert b.empty()


def test_saved_state_is_compressed_and_round_trips():
    b = Bucket(CFG, window_end_clock)
    rng = random.Random(1)
    b.process([*(_row(T0 + 5, f"web-{h}", 0, rng) for h in range(50)), {"batch": 0, END: True}])
    blob = b.dump()
    assert blob.startswith(ZSTD_MAGIC) and len(blob) < len(decompress(blob)) / 3
    again = Bucket.load(blob, CFG, window_end_clock)
    assert again.dump() == blob


def test_a_bucket_saved_as_zlib_by_an_earlier_version_is_read():
    b = Bucket(CFG, window_end_clock)
    rng = random.Random(2)
    b.process([*(_row(T0 + 5, f"web-{h}", 0, rng) for h in range(20)), {"batch": 0, END: True}])
    earlier = zlib.compress(decompress(b.dump()), 1)
    again = Bucket.load(earlier, CFG, window_end_clock)
    assert again.dump() == b.dump() and again.windows.open == b.windows.open


def test_output_rows_list_aggregates_then_findings_then_stats():
    b = Bucket(CFG, window_end_clock)
    rng = random.Random(2)
    row = _row(T0 + 5, "web-1", 0, rng)
    row[flat_col("CLOSE_WAIT", "count")] = 5
    row[flat_col("CLOSE_WAIT", "t")] = T0 + 5
    row[flat_col("CLOSE_WAIT", "oldest_state_age_s")] = 600.0
    pdf = output_frame(b.process([row, {"batch": 0, END: True}]))
    assert list(pdf["kind"]) == ["aggregates", "findings", "stats"]
    assert pdf["key"][0] == "client|web-1|orders|prod|1"


def test_ticks_go_out_once_the_fleets_time_moved_on_enough():
    from streaming.job.ingest import tick_due

    assert not tick_due(None, None, 15.0)  # no event yet
    assert tick_due(None, T0, 15.0)  # the first one
    assert not tick_due(T0, T0 + 14.9, 15.0)
    assert tick_due(T0, T0 + 15.0, 15.0)
    assert tick_due(T0, T0, 0.0)  # replay: every batch


def test_a_batch_read_in_two_parts_waits_for_its_end():
    """The state query may read half of an ingest batch's rows in one of its batches and the
    rest in the next: nothing is judged before the batch's end, then all of it at once."""
    for seed in (4, 5):
        whole = [*_one_process(seed)]
        b = Bucket(CFG, window_end_clock)
        saved = None
        findings, aggs, late = [], [], 0
        for rows, end in _ticked(_workload(seed)):
            half = len(rows) // 2
            for part in (rows[:half], [*rows[half:], end]):  # restored in between
                b = Bucket.load(saved, CFG, window_end_clock)
                em = b.process(part, latest_only=False)
                saved = b.dump()
                findings += em.findings
                aggs += em.aggregates
                late += em.late
        assert (findings, aggs, late) == tuple(whole), f"seed {seed}"


@pytest.mark.parametrize("size", [0, 1, STATE_PIECE_BYTES, STATE_PIECE_BYTES + 1, 300_000])
def test_a_saved_bucket_goes_in_pieces_small_enough_and_comes_back_whole(size: int) -> None:
    blob = os.urandom(size)
    pieces = state_pieces(blob)
    assert all(0 < len(p) <= STATE_PIECE_BYTES for (p,) in pieces)
    assert len(pieces) == -(-size // STATE_PIECE_BYTES)
    assert joined_state(pieces) == (blob or None)
