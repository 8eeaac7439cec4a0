"""Job-status records from Spark progress JSON: one per batch of each query, about that query
(its batch, its view of event time, its input left unread, its counts)."""

from __future__ import annotations

import json

from streaming.job.clocks import HostClocks
from streaming.job.ingest import BatchStats
from streaming.job.status import (
    StateView,
    StatusListener,
    fold_state_progress,
    ingest_status,
    lost_records,
    offsets_behind,
    state_status,
)
from streaming.schema.times import epoch

NOW = epoch("2026-11-21T05:01:02.120Z")


def _progress(batch: int, name: str = "ingest", **extra) -> dict:
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


def _sources(latest: dict, end: dict) -> list[dict]:
    return [{"description": "KafkaV2[Subscribe[t]]", "endOffset": end, "latestOffset": latest}]


def test_status_records_match_the_contract_examples():
    newest = epoch("2026-11-21T05:01:01.900Z")
    stats = BatchStats(42, 3, input_rows=2400, newest_s=newest)
    sources = _sources({"t": {"0": 130, "1": 70}}, {"t": {"0": 100, "1": 70}})
    ingest = ingest_status(_progress(42, sources=sources), "connmon-job", stats, 120.0)
    assert ingest.to_dict() == {
        "schema": 1,
        "job_id": "connmon-job",
        "query": "ingest",
        "batch_id": 42,
        "timestamp": "2026-11-21T05:01:02.120Z",
        "batch_duration_s": 1.8,
        "input_rows_per_s": 1200.5,
        "processed_rows_per_s": 2400.1,
        "num_input_rows": 2400,
        "watermark": "2026-11-21T04:59:01.900Z",
        "watermark_delay_s": 120.22,
        "dead_letter_total": 3,
        "late_events_total": 0,
        "last_event_time": "2026-11-21T05:01:01.900Z",
        "hosts": [],
        "internal_errors_total": 0,
        "offsets_behind": 30,
        "input_lost_total": 0,
    }
    assert ingest.key == "connmon-job:ingest"
    view = StateView(max_event_s=epoch("2026-11-21T05:01:00.000Z"), late_events_total=2)
    state = state_status(_progress(7, "state"), "connmon-job", view, [HOST], 120.0)
    assert (state.query, state.key, state.batch_id) == ("state", "connmon-job:state", 7)
    assert (state.watermark, state.late_events_total, state.hosts) == (
        "2026-11-21T04:59:00.000Z",
        2,
        [HOST],
    )
    assert state.dead_letter_total == 0 and state.offsets_behind is None


def test_offsets_behind_sums_the_partitions_spark_left_unread():
    assert offsets_behind({"sources": _sources({"t": {"0": 5}}, {"t": {"0": 5}})}) == 0
    # as JSON text, a partition the batch has not seen yet, a source without offsets
    text = _sources('{"t": {"0": 9, "1": 4}}', '{"t": {"0": 2}}') + [{"description": "rate"}]
    assert offsets_behind({"sources": text}) == 7
    assert offsets_behind({"sources": [{"description": "rate"}]}) is None


def _ranges(start: dict, end: dict) -> dict:
    return {"sources": [{"startOffset": start, "endOffset": end, "latestOffset": end}]}


def test_lost_records_are_the_planned_offsets_the_batch_did_not_read():
    d = _ranges({"p": {"0": 10, "1": 5}}, {"p": {"0": 40, "1": 15}})
    assert lost_records(d, 40) == (0, [])
    assert lost_records(d, 25) == (15, ["15 of the 40 records planned were deleted first"])
    # a new partition (no start yet) is read from its beginning: nothing to compare
    assert lost_records(_ranges({"p": {"0": 10}}, {"p": {"0": 12, "1": 7}}), 9) == (0, [])


def test_offsets_that_went_back_count_what_the_new_topic_held():
    d = _ranges({"p": {"0": 500, "1": 20}}, {"p": {"0": 30, "1": 25}})
    assert lost_records(d, 5) == (30, ["p-0: offsets went back from 500 to 30"])


def test_the_status_counts_lost_input_per_query_and_says_what_to_do(caplog):
    published = []
    listener = StatusListener("j", published.append, lambda: None, 120.0, 10.0, lambda: NOW)
    ranges = _ranges({"p": {"0": 0}}, {"p": {"0": 100}})
    for batch, rows in ((1, 100), (2, 60), (3, 70)):
        listener.onQueryProgress(_Event(_state(batch, None) | ranges | {"numInputRows": rows}))
    assert [s.input_lost_total for s in published] == [0, 40, 70]
    listener.onQueryProgress(_Event(_progress(4) | ranges | {"numInputRows": 100}))
    assert published[-1].query == "ingest" and published[-1].input_lost_total == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "query state, batch 2: 40 record(s)" in warnings[0]
    assert "retention.ms" in warnings[0]


def test_status_counts_a_batch_read_twice_once():
    # Spark's progress counts both reads of a batch with dead letters; the batch's own count
    # of 1200 records wins and the rates are scaled by the same factor.
    stats = BatchStats(42, 5, input_rows=1200)
    st = ingest_status(_progress(42), "j", stats, 120.0)
    assert (st.num_input_rows, st.input_rows_per_s, st.processed_rows_per_s) == (
        1200,
        600.25,
        1200.05,
    )
    # stats of an older batch are not this batch's count
    assert ingest_status(_progress(43), "j", stats, 120.0).num_input_rows == 2400


def test_status_before_the_first_batch_has_no_watermark():
    st = ingest_status(_progress(0), "j", None, 120.0)
    assert (st.watermark, st.watermark_delay_s, st.last_event_time) == (None, None, None)
    assert (st.dead_letter_total, st.late_events_total) == (0, 0)
    st = state_status(_state(0, None), "j", StateView(), [], 120.0)
    assert (st.watermark, st.last_event_time) == (None, None)


def test_the_state_querys_progress_gives_watermark_newest_event_late_events_and_hosts():
    view, hc = StateView(), HostClocks(10.0)
    fold_state_progress(_state(3, None), view, hc, NOW)
    assert view == StateView()  # Spark's watermark before it has one
    late = {"late": 4, "duplicates": 0, "hosts": {"web-2": {"events": 4, "late": 4}}}
    fast = {"late": 0, "duplicates": 1, "hosts": {"web-3": {"events": 9, "offset_s": 90.0}}}
    fold_state_progress(_state(4, "2026-11-21T05:01:00.000Z", late, fast), view, hc, NOW)
    assert view.max_event_s == epoch("2026-11-21T05:01:00.000Z")
    st = state_status(_state(4, None), "j", view, [], 120.0)
    assert epoch(st.watermark) == epoch("2026-11-21T04:59:00.000Z")  # 120 s behind it
    assert view.late_events_total == 4
    snap = {h["host"]: h for h in hc.snapshot(NOW)}
    assert snap["web-3"]["clock_offset_s"] == 90.0 and snap["web-3"]["skewed_events_total"] == 9
    assert snap["web-2"]["late_events_total"] == 4 and snap["web-2"]["clock_offset_s"] is None
    # a batch's own newest event time counts when it is ahead of the watermark's
    newest = "2026-11-21T05:01:01.000Z"
    fold_state_progress(_state(5, "2026-11-21T05:01:00.000Z", newest=newest), view, hc, NOW)
    assert view.max_event_s == epoch(newest) and view.late_events_total == 4
    assert (
        epoch(state_status(_state(5, None), "j", view, [], 120.0).watermark) == epoch(newest) - 120
    )


class _Event:
    def __init__(self, progress: dict) -> None:
        self.progress = type("P", (), {"name": progress["name"], "json": json.dumps(progress)})


def test_each_batch_of_each_query_publishes_a_status_about_that_query():
    published = []
    stats = BatchStats(42, 0, 2400, newest_s=epoch("2026-11-21T05:01:02.000Z"))
    listener = StatusListener("j", published.append, lambda: stats, 120.0, 10.0, lambda: NOW)
    late = {"late": 5, "duplicates": 0, "hosts": {}}
    listener.onQueryProgress(_Event(_state(7, "2026-11-21T05:01:00.000Z", late)))
    listener.onQueryProgress(_Event(_progress(42)))
    listener.onQueryProgress(_Event(_state(8, "2026-11-21T05:01:00.000Z", late)))
    listener.onQueryProgress(_Event(_progress(9, "someone else's query")))
    assert [(s.query, s.batch_id, s.late_events_total) for s in published] == [
        ("state", 7, 5),
        ("ingest", 42, 0),
        ("state", 8, 10),
    ]
    # each as far as it got: the ingest query has read events two seconds newer
    assert [s.watermark for s in published] == [
        "2026-11-21T04:59:00.000Z",
        "2026-11-21T04:59:02.000Z",
        "2026-11-21T04:59:00.000Z",
    ]
