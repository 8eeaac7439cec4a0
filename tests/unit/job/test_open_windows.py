"""Merging per-batch partial window rows: statistics, watermark, late counts (no Spark: partial
rows are written by hand)."""

from __future__ import annotations

import copy
import json
import random

import pytest

from streaming.job.open_windows import (
    HB_BY_TIME,
    MAX_FIELDS,
    MIN_FIELDS,
    SERIES,
    SUM_FIELDS,
    SUMMARY_STATES,
    WINDOW_FIELDS,
    OpenWindows,
    empty_window,
    flat_col,
    merge,
    new_window,
    state_fields,
)
from streaming.job.records import to_aggregate
from streaming.schema.clients import IDENTITY_FIELDS
from streaming.schema.times import iso

T0 = 1_795_000_000.0  # a window start (a multiple of 60)


def part(start: float = T0, host: str = "app-1", **fields) -> dict:
    row = {
        "window_start_s": start,
        "side": "client",
        "host": host,
        "app": "orders",
        "broker": "1",
        "peer_host": None,
        "reason": None,
        "events": 1,
        "last_event_s": start + 1,
    }
    row.update(fields)
    return row


def cw(t: float, count: int, age: float, fds: tuple[int, int] | None = None) -> dict:
    return {
        flat_col("CLOSE_WAIT", "t"): t,
        flat_col("CLOSE_WAIT", "count"): count,
        flat_col("CLOSE_WAIT", "oldest_state_age_s"): age,
        flat_col("CLOSE_WAIT", "fds_open"): fds[0] if fds else None,
        flat_col("CLOSE_WAIT", "fds_limit"): fds[1] if fds else None,
        "summary_last_t": t,
        "summary_interval_s": 10.0,
    }


def test_merge_adds_counts_and_keeps_extremes_and_the_newest_summary():
    ws = OpenWindows(60.0, 120.0)
    a = part(events=5, opens=2, lifetime_sum_s=10.0, lifetime_n=2, lifetime_max_s=7.0,
             hb_t_first=T0 + 5, hb_fails_first=10, hb_t_last=T0 + 5, hb_fails_last=10,
             **cw(T0 + 30, 3, 100.0, (40, 1024)))  # fmt: skip
    b = part(events=4, opens=1, lifetime_sum_s=2.0, lifetime_n=2, lifetime_max_s=1.5,
             hb_t_first=T0 + 2, hb_fails_first=8, hb_t_last=T0 + 50, hb_fails_last=20,
             last_event_s=T0 + 55, **cw(T0 + 20, 9, 500.0, (900, 4096)))  # fmt: skip
    (window,) = ws.apply([a, b]).windows
    row = dict(zip(WINDOW_FIELDS, window, strict=True))
    assert (row["events"], row["opens"], row["lifetime_max_s"]) == (9, 3, 7.0)
    agg = to_aggregate(window, 60.0)
    assert agg.lifetime_avg_s == 3.0  # (10 + 2) / 4
    # The newest summary whole: its fd pair too, though the older one has more open.
    assert row[flat_col("CLOSE_WAIT", "t")] == T0 + 30
    assert (agg.close_wait_count, agg.close_wait_oldest_age_s) == (3, 100.0)
    assert (agg.fds_open, agg.fds_limit) == (40, 1024)
    assert (row["hb_fails_first"], row["hb_fails_last"]) == (8, 20)
    assert (agg.window_end, agg.last_event_time) == (iso(T0 + 60), iso(T0 + 55))


def test_the_duplicate_connection_comes_from_the_newest_established_summary():
    ws = OpenWindows(60.0, 120.0)
    est = lambda t, conn: {  # noqa: E731
        flat_col("ESTABLISHED", "t"): t,
        flat_col("ESTABLISHED", "count"): 2,
        flat_col("ESTABLISHED", "dup_conn"): conn,
    }
    dup_conn = WINDOW_FIELDS.index(flat_col("ESTABLISHED", "dup_conn"))
    (window,) = ws.apply([part(**est(T0 + 40, "a->b")), part(**est(T0 + 10, None))]).windows
    assert window[dup_conn] == "a->b"
    (window,) = ws.apply([part(**est(T0 + 50, None))]).windows
    assert window[dup_conn] is None


def test_the_aggregate_takes_the_fds_of_the_process_nearest_its_limit():
    """ESTABLISHED and CLOSE_WAIT summaries of one tick may name different processes of the
    series: the aggregate carries the pair with the higher share in use, never a mix."""
    est = {
        flat_col("ESTABLISHED", "t"): T0 + 30,
        flat_col("ESTABLISHED", "count"): 2,
        flat_col("ESTABLISHED", "fds_open"): 900,
        flat_col("ESTABLISHED", "fds_limit"): 65536,
    }
    (row,) = (
        OpenWindows(60.0, 120.0).apply([part(**est, **cw(T0 + 30, 3, 90.0, (200, 256)))]).windows
    )
    a = to_aggregate(row, 60.0)
    assert (a.fds_open, a.fds_limit) == (200, 256)
    (row,) = OpenWindows(60.0, 120.0).apply([part(**est, **cw(T0 + 30, 3, 90.0))]).windows
    a = to_aggregate(row, 60.0)
    assert (a.fds_open, a.fds_limit) == (900, 65536)
    # A CLOSE_WAIT summary of an older tick is not current: its pair is not used.
    stale = {**cw(T0 + 5, 3, 90.0, (250, 256)), "summary_last_t": T0 + 30}
    (row,) = OpenWindows(60.0, 120.0).apply([part(**stale, **est)]).windows
    a = to_aggregate(row, 60.0)
    assert (a.fds_open, a.fds_limit, a.close_wait_count) == (900, 65536, 0)


def test_events_of_a_closed_window_are_late_and_counted():
    ws = OpenWindows(60.0, 120.0)
    first = ws.apply([part(T0 + 600, last_event_s=T0 + 650)])
    assert first.watermark_s is None and first.late == 0
    second = ws.apply(
        [
            part(T0 + 420, events=7),  # ends at T0 + 480 <= watermark T0 + 530: late
            part(T0 + 480, events=2),  # ends at T0 + 540: still open
        ]
    )
    assert second.watermark_s == T0 + 530
    assert second.late == 7
    assert [w[WINDOW_FIELDS.index("window_start_s")] for w in second.windows] == [T0 + 480]


def test_windows_closed_by_the_new_watermark_are_evicted():
    ws = OpenWindows(60.0, 120.0)
    ws.apply([part(T0), part(T0 + 60)])
    assert len(ws.open) == 2
    ws.apply([part(T0 + 240, last_event_s=T0 + 250)])  # watermark T0 + 130
    start = WINDOW_FIELDS.index("window_start_s")
    assert sorted(w[start] for w in ws.open.values()) == [T0 + 240]


def test_state_round_trips_through_json():
    ws = OpenWindows(60.0, 120.0)
    ws.apply([part(**cw(T0 + 5, 1, 5.0)), part(host="app-2")])
    again = OpenWindows(60.0, 120.0)
    again.load_state(json.loads(json.dumps(ws.to_state())))
    more = [part(**cw(T0 + 15, 2, 15.0))]
    assert again.apply(more).windows == ws.apply(more).windows


def _batches() -> list[list[dict]]:
    """Ten hosts report every 20 s for 8 minutes, one batch per 20 s; host 9 only at first."""
    out = []
    for b in range(24):
        t = T0 + 20 * b
        start = t - t % 60
        hosts = range(10) if b < 3 else range(9)
        rows = [part(start, host=f"app-{h}", last_event_s=t + 1, **cw(t + 1, b % 4, 20.0 * b))
                for h in hosts]  # fmt: skip
        if b % 5 == 4:
            rows.append(part(start - 240, events=3))  # late by then
        out.append(rows)
    return out


def test_restored_before_every_batch_the_windows_behave_as_if_never_stopped():
    steady = OpenWindows(60.0, 120.0)
    expected, opened = [], [{}]
    for b in _batches():
        expected.append(steady.apply(b))
        opened.append(copy.deepcopy(steady.open))
    assert sum(r.late for r in expected) > 0
    state = None
    for i, b in enumerate(_batches()):
        ws = OpenWindows(60.0, 120.0)  # a restart before every batch
        if state is not None:
            ws.load_state(state)
        assert ws.open == opened[i], f"restored before batch {i}"
        assert ws.apply(b) == expected[i], f"batch {i}"
        state = json.loads(json.dumps(ws.to_state()))
    assert ws.max_event_s == steady.max_event_s and ws.open == steady.open


def test_the_fleets_event_time_closes_windows_of_quiet_series():
    ws = OpenWindows(60.0, 120.0)
    ws.apply([part(T0)])
    ws.advance(T0 + 200)  # another series' events, seen through the fleet's watermark
    ws.evict()
    assert ws.open == {} and ws.watermark() == T0 + 80
    assert ws.apply([part(T0, events=4)]).late == 4


def test_a_checkpoint_with_other_windows_is_refused_by_setting_name():
    state = OpenWindows(60.0, 120.0).to_state()
    with pytest.raises(ValueError, match="detectors.window_s"):
        OpenWindows(30.0, 120.0).load_state(state)


def test_a_new_window_is_the_generic_merge_into_an_empty_window():
    full = part(events=5, opens=2, lifetime_sum_s=0.0, lifetime_n=0, cw_n=1, cw_st=3.0,
                hb_t_first=T0 + 5, hb_fails_first=10, hb_t_last=T0 + 7, hb_fails_last=12,
                **cw(T0 + 30, 3, 100.0))  # fmt: skip
    for p in (full, part(), part(events=None)):
        empty = empty_window()
        for k in ("window_start_s", *SERIES):
            empty[WINDOW_FIELDS.index(k)] = p.get(k)
        merge(empty, p)
        made = new_window(p)
        assert made == empty
        assert [type(v) for v in made] == [type(v) for v in empty]  # 0 vs 0.0


def test_a_window_is_named_by_the_library_its_identified_events_carry():
    from streaming.job.records import to_aggregate

    ow = OpenWindows(window_s=60, watermark_s=30)
    rows = ow.apply(
        [
            part(events=3),  # unattributed sockets (TIME_WAIT) carry no library
            part(
                events=2,
                client_library="sarama",
                client_version="1.43.2",
                client_library_evidence="loaded",
            ),
        ]
    ).windows
    agg = to_aggregate(rows[0], 60.0)
    assert (agg.client_library, agg.client_version) == ("sarama", "1.43.2")
    assert agg.client_library_evidence == "loaded"
    assert agg.to_dict()["client_library"] == "sarama"
    restored = OpenWindows(window_s=60, watermark_s=30)
    restored.load_state(json.loads(json.dumps(ow.to_state())))
    again = restored.apply([part(events=1, last_event_s=T0 + 2)]).windows
    assert to_aggregate(again[0], 60.0).client_library == "sarama"


def test_windows_saved_under_another_field_list_are_restored_by_name():
    ws = OpenWindows(60.0, 120.0)
    for b in _batches()[:6]:
        ws.apply(b)
    state = ws.to_state()
    # Another version's list: other order, fields it did not have (a minimum, a counter), one
    # this version lacks.
    new = ("hb_t_first", "closes_peer")
    fields = sorted(f for f in WINDOW_FIELDS if f not in new) + ["gone"]
    at = {f: i for i, f in enumerate(WINDOW_FIELDS)}
    rows = [[None if f == "gone" else row[at[f]] for f in fields] for row in state["open_rows"]]
    old = json.loads(json.dumps(state | {"open_fields": fields, "open_rows": rows}))
    restored = OpenWindows(60.0, 120.0)
    restored.load_state(old)
    lost, uncounted = WINDOW_FIELDS.index("hb_t_first"), WINDOW_FIELDS.index("closes_peer")
    expected = {
        k: [None if i == lost else 0 if i == uncounted else v for i, v in enumerate(w)]
        for k, w in ws.open.items()
    }
    assert restored.open == expected and len(expected) > 5
    # The counter it did not keep counts on from 0.
    key, window = next(iter(restored.open.items()))
    start, host = window[WINDOW_FIELDS.index("window_start_s")], window[WINDOW_FIELDS.index("host")]
    (merged,) = restored.apply([part(start, host, closes_peer=2, last_event_s=start + 2)]).windows
    assert merged[uncounted] == 2


def _random_part(rng: random.Random) -> dict:
    """A partial row of one (window, series) with a random subset of every kind of field:
    sums, maxima, minima, states' summaries (often at equal times), heartbeat counters (often
    at equal times), text fields. Numbers are multiples of 1/4, so sums are exact in any order."""
    quarter = lambda hi: rng.randrange(4 * hi) / 4  # noqa: E731
    row = part(T0, events=rng.randint(1, 5), last_event_s=T0 + quarter(60))
    for f in SUM_FIELDS:
        if rng.random() < 0.4:
            row[f] = quarter(50) if f.endswith("_s") or f.startswith("cw_s") else rng.randint(0, 5)
    for f in (*MAX_FIELDS, *MIN_FIELDS):
        if f in IDENTITY_FIELDS or rng.random() < 0.5:
            continue
        if f == "broker_endpoint":
            row[f] = rng.choice(["b1:9092", "b2:9092"])
        elif f == "paused_how":
            row[f] = rng.choice(["stopped", "frozen"])
        else:
            row[f] = T0 + quarter(60) if f.endswith("_t") or "_t_" in f else quarter(300)
    for state in SUMMARY_STATES:
        if rng.random() < 0.4:
            for name in state_fields(state):
                if name == "t":
                    row[flat_col(state, name)] = T0 + rng.choice((10, 30, 30, 50))
                elif name == "dup_conn":
                    row[flat_col(state, name)] = rng.choice([None, "a", "b"])
                elif rng.random() < 0.8:
                    row[flat_col(state, name)] = rng.randint(0, 9)
    for f, t, _newest in HB_BY_TIME:
        if rng.random() < 0.5:
            row[f], row[t] = rng.randint(0, 20), T0 + rng.choice((5, 25, 25, 55))
    return row


@pytest.mark.parametrize("seed", range(30))
def test_a_window_is_the_same_whatever_the_order_and_batching_of_its_rows(seed):
    """Merging is order-independent: every rule (sums, extremes, the newest summary and counter
    with their tie rules) gives the same window for any arrival order of the rows, in one batch
    or several with the state saved and restored between them."""
    rng = random.Random(seed)
    rows = [_random_part(rng) for _ in range(rng.randint(2, 6))]
    seen = set()
    for _ in range(6):
        order = rng.sample(rows, len(rows))
        cut = rng.randint(1, len(rows))
        ws = OpenWindows(60.0, 1e9)
        ws.apply(order[:cut])
        again = OpenWindows(60.0, 1e9)
        again.load_state(json.loads(json.dumps(ws.to_state())))
        (window,) = again.apply(order[cut:]).windows if cut < len(rows) else again.open.values()
        seen.add(json.dumps(window))
    assert len(seen) == 1
