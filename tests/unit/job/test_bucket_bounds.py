"""A state bucket's bound (no Spark): at ``state_max_series_per_bucket`` the healthy series seen
longest ago are forgotten, a series with a firing finding is kept, and the driver's status
reports every bucket's size and what was forgotten."""

from __future__ import annotations

import json

from streaming.detectors.config import DetectorConfig
from streaming.job.buckets import Bucket, Emitted, Record, window_end_clock
from streaming.job.clocks import HostClocks
from streaming.job.open_windows import flat_col
from streaming.job.status import STATE_METRICS, StateView, fold_state_progress, state_status

CFG = DetectorConfig()
T0 = 1_795_000_020.0  # a window start


def _row(host: str, t: float, leak: bool = False) -> dict:
    series = {"side": "client", "host": host, "app": "orders", "cluster": "prod", "broker": "1"}
    row = {**series, "window_start_s": t - t % 60, "events": 1, "last_event_s": t}
    row |= {"summary_last_t": t, "summary_interval_s": 10.0}
    if leak:
        row |= {
            flat_col("CLOSE_WAIT", "t"): t,
            flat_col("CLOSE_WAIT", "count"): 3,
            flat_col("CLOSE_WAIT", "oldest_state_age_s"): 300.0,
        }
    return row


def _record(batch: int, rows: list[dict]) -> Record:
    return Record(batch, 0, None, None, "\n".join(json.dumps(r) for r in rows))


def _heartbeat(host: str, t: float) -> dict:
    """A host's heartbeat counters: a row of no series (side, app and broker null)."""
    return {"host": host, "window_start_s": t - t % 60, "events": 1, "last_event_s": t} | {
        "hb_fails_first": 3,
        "hb_t_first": t,
        "hb_fails_last": 3,
        "hb_t_last": t,
    }


def _bucket() -> Bucket:
    """Six series seen a minute apart (web-0 first), web-1 leaking; every host heartbeats."""
    b = Bucket(CFG, window_end_clock)
    for i in range(6):
        t = T0 + 60 * i + 5
        rows = [_row(f"web-{i}", t, leak=i == 1), _heartbeat(f"web-{i}", t)]
        b.process([_record(i, rows)], None)
    return b


def _hosts(b: Bucket) -> list[str]:
    """Hosts of the bucket's series (a host's heartbeat series have app ``*``)."""
    return sorted(s.split("|")[1] for s in b.tracker.history if s.split("|")[2] != "*")


def test_the_healthy_series_seen_longest_ago_go_first_and_firing_ones_stay():
    b = _bucket()
    assert b.series() == 6 and b.tracker.findings
    assert b.shed(None) == 0 and b.shed(6) == 0
    assert b.shed(3) == 3
    # web-1 (firing) stays though it is older; web-0, web-2 and web-3 go.
    assert _hosts(b) == ["web-1", "web-4", "web-5"]
    assert not any(w[1] in ("web-0", "web-2", "web-3") for w in b.windows.open.values())
    # Only firing ones left beyond the limit: they stay, so their findings still resolve.
    assert b.shed(0) == 2 and _hosts(b) == ["web-1"]


def test_a_forgotten_series_that_comes_back_starts_anew_and_saves_and_loads():
    b = _bucket()
    b.shed(4)
    restored = Bucket.load(b.dump(), CFG, window_end_clock)
    assert restored.series() == 4
    em = restored.process([_record(9, [_row("web-0", T0 + 400)])], None)
    assert [a["host"] for _k, a in em.aggregates] == ["web-0"]
    assert restored.series() == 5


def test_the_status_reports_each_buckets_last_size_and_what_was_shed():
    def progress(batch: int, *stats: Emitted) -> dict:
        lines = [json.dumps(e.stats()) for e in stats]
        return {
            "batchId": batch,
            "name": "state",
            "timestamp": "2026-11-21T05:01:02.120Z",
            "observedMetrics": {STATE_METRICS: {"stats": lines}},
        }

    view, clocks = StateView(), HostClocks(CFG.clock_skew_tolerance_s)
    fold_state_progress(
        progress(1, Emitted(size=(0, 100, 5000), shed=2), Emitted(size=(1, 40, 900))),
        view,
        clocks,
        T0,
    )
    # Bucket 0 called again: its newest size replaces the older one.
    fold_state_progress(progress(2, Emitted(size=(0, 90, 4000), shed=1)), view, clocks, T0)
    st = state_status(progress(2), "connmon-job", view, [], 120.0)
    assert (st.state_series, st.state_bytes) == (130, 4900)
    assert (st.state_bucket_series_max, st.state_bucket_bytes_max) == (90, 4000)
    assert st.state_series_shed_total == 3
    assert "state_series" in st.to_dict()
    # A call with nothing else to say still reports the size.
    assert Emitted(size=(3, 0, 0)).stats()["bucket"] == 3
    assert Emitted().stats() is None
