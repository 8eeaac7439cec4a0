"""Job-status records from Spark progress JSON: the ingest query's batch, the state query's
watermark and observed counts."""

from __future__ import annotations

import json

from streaming.job.clocks import HostClocks
from streaming.job.ingest import BatchStats
from streaming.job.status import (
    StateView,
    StatusListener,
    fold_state_progress,
    status_from_progress,
)
from streaming.schema.times import epoch

NOW = epoch("2026-11-21T05:01:02.120Z")


def _progress(batch: int, name: str = "aggregates", **extra) -> dict:
    return {
        "name": name,
        "batchId": batch,
        "timestamp": "2026-11-21T05:01:02.120Z",
        "batchDuration": 1800,
        "numInputRows": 2400,
        "inputRowsPerSecond": 1200.5,
        "processedRowsPerSecond": 2400.1,
        **extra,
    }


def _state(batch: int, fleet: str | None, *stats: dict, newest: str | None = None) -> dict:
    """A state-query progress whose watermark says the fleet's newest event time is ``fleet``
    (None: Spark has no watermark yet)."""
    wm = fleet if fleet else "1970-01-01T00:00:00.000Z"
    event_time = {"watermark": wm} | ({"max": newest} if newest else {})
    observed = {"state": {"stats": [json.dumps(s) for s in stats]}}
    return _progress(batch, "state", eventTime=event_time, observedMetrics=observed)


HOST = {
    "host": "web-7",
    "clock_offset_s": 181.4,
    "skewed_events_total": 5520,
    "late_events_total": 0,
}


def test_status_record_matches_the_contract_example():
    stats = BatchStats(batch_id=42, dead_letter_total=3, input_rows=2400)
    view = StateView(
        watermark_s=epoch("2026-11-21T04:59:00.000Z"),
        max_event_s=epoch("2026-11-21T05:01:01.900Z"),
        late_events_total=0,
    )
    st = status_from_progress(_progress(42), "connmon-job", stats, view, [HOST]).to_dict()
    assert st == {
        "schema": 1,
        "job_id": "connmon-job",
        "query": "aggregates",
        "batch_id": 42,
        "timestamp": "2026-11-21T05:01:02.120Z",
        "batch_duration_s": 1.8,
        "input_rows_per_s": 1200.5,
        "processed_rows_per_s": 2400.1,
        "num_input_rows": 2400,
        "watermark": "2026-11-21T04:59:00.000Z",
        "watermark_delay_s": 122.12,
        "dead_letter_total": 3,
        "late_events_total": 0,
        "last_event_time": "2026-11-21T05:01:01.900Z",
        "hosts": [HOST],
        "internal_errors_total": 0,
    }


def test_status_counts_a_batch_read_twice_once():
    # Spark's progress counts both reads of a batch with dead letters; the batch's own count
    # of 1200 records wins and the rates are scaled by the same factor.
    stats = BatchStats(42, 5, input_rows=1200)
    st = status_from_progress(_progress(42), "j", stats, StateView(), [])
    assert (st.num_input_rows, st.input_rows_per_s, st.processed_rows_per_s) == (
        1200,
        600.25,
        1200.05,
    )
    # stats of an older batch are not this batch's count
    assert status_from_progress(_progress(43), "j", stats, StateView(), []).num_input_rows == 2400


def test_status_before_the_first_batch_has_no_watermark():
    st = status_from_progress(_progress(0), "j", None, StateView(), [])
    assert (st.watermark, st.watermark_delay_s, st.last_event_time) == (None, None, None)
    assert (st.dead_letter_total, st.late_events_total) == (0, 0)


def test_the_state_querys_progress_gives_watermark_newest_event_late_events_and_hosts():
    view, hc = StateView(), HostClocks(10.0)
    fold_state_progress(_state(3, None), view, hc, 120.0, NOW)
    assert view == StateView()  # Spark's watermark before it has one
    late = {"late": 4, "duplicates": 0, "hosts": {"web-2": {"events": 4, "late": 4}}}
    fast = {"late": 0, "duplicates": 1, "hosts": {"web-3": {"events": 9, "offset_s": 90.0}}}
    fold_state_progress(_state(4, "2026-11-21T05:01:00.000Z", late, fast), view, hc, 120.0, NOW)
    assert view.max_event_s == epoch("2026-11-21T05:01:00.000Z")
    assert view.watermark_s == epoch("2026-11-21T04:59:00.000Z")  # 120 s behind it
    assert view.late_events_total == 4
    snap = {h["host"]: h for h in hc.snapshot(NOW)}
    assert snap["web-3"]["clock_offset_s"] == 90.0 and snap["web-3"]["skewed_events_total"] == 9
    assert snap["web-2"]["late_events_total"] == 4 and snap["web-2"]["clock_offset_s"] is None
    # a batch's own newest event time counts when it is ahead of the watermark's
    newest = "2026-11-21T05:01:01.000Z"
    fold_state_progress(_state(5, "2026-11-21T05:01:00.000Z", newest=newest), view, hc, 120, NOW)
    assert view.max_event_s == epoch(newest) and view.late_events_total == 4
    assert view.watermark_s == epoch(newest) - 120


class _Event:
    def __init__(self, progress: dict) -> None:
        self.progress = type("P", (), {"name": progress["name"], "json": json.dumps(progress)})


def test_each_batch_of_either_query_publishes_the_status():
    published = []
    listener = StatusListener(
        "j", published.append, lambda: BatchStats(42, 0, 2400), 120.0, 10.0, lambda: NOW
    )
    late = {"late": 5, "duplicates": 0, "hosts": {}}
    # before any ingest batch: counted, not published
    listener.onQueryProgress(_Event(_state(7, "2026-11-21T05:01:00.000Z", late)))
    assert published == []
    listener.onQueryProgress(_Event(_progress(42)))
    listener.onQueryProgress(_Event(_state(8, "2026-11-21T05:01:00.000Z", late)))
    assert [(s.query, s.batch_id, s.late_events_total) for s in published] == [
        ("aggregates", 42, 5),
        ("aggregates", 42, 10),
    ]
    assert published[0].watermark == "2026-11-21T04:59:00.000Z"
