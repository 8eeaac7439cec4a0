"""Job-status records from Spark progress JSON."""

from __future__ import annotations

import json

from streaming.job.ingest import BatchStats
from streaming.job.status import StatusListener, status_from_progress
from streaming.schema.times import epoch


def _progress(batch: int, name: str = "aggregates") -> dict:
    return {
        "name": name,
        "batchId": batch,
        "timestamp": "2026-11-21T05:01:02.120Z",
        "batchDuration": 1800,
        "numInputRows": 2400,
        "inputRowsPerSecond": 1200.5,
        "processedRowsPerSecond": 2400.1,
    }


HOST = {
    "host": "web-7",
    "clock_offset_s": 181.4,
    "skewed_events_total": 5520,
    "late_events_total": 0,
}


def test_status_record_matches_the_contract_example():
    stats = BatchStats(
        batch_id=42,
        watermark_s=epoch("2026-11-21T04:59:00.000Z"),
        max_event_s=epoch("2026-11-21T05:01:01.900Z"),
        dead_letter_total=3,
        late_events_total=0,
        input_rows=2400,
        hosts=[HOST],
    )
    st = status_from_progress(_progress(42), "connmon-job", stats).to_dict()
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
        "produce_errors": [],
        "hosts": [HOST],
        "partials_gate_failures_total": 0,
    }


def test_status_counts_a_batch_read_twice_once():
    # Spark's progress counts both reads of a batch with dead letters; the batch's own count
    # of 1200 records wins and the rates are scaled by the same factor.
    stats = BatchStats(42, None, None, 5, 0, input_rows=1200)
    st = status_from_progress(_progress(42), "j", stats)
    assert (st.num_input_rows, st.input_rows_per_s, st.processed_rows_per_s) == (
        1200,
        600.25,
        1200.05,
    )
    # stats of an older batch are not this batch's count
    assert status_from_progress(_progress(43), "j", stats).num_input_rows == 2400


def test_status_before_the_first_batch_has_no_watermark():
    st = status_from_progress(_progress(0), "j", None)
    assert (st.watermark, st.watermark_delay_s, st.last_event_time) == (None, None, None)
    assert (st.dead_letter_total, st.late_events_total) == (0, 0)


class _Event:
    def __init__(self, progress: dict) -> None:
        self.progress = type("P", (), {"name": progress["name"], "json": json.dumps(progress)})


def test_the_state_querys_batches_republish_the_status_with_fresh_counts():
    published = []
    late = {"n": 0}

    def stats():
        return BatchStats(42, None, None, 0, late["n"], input_rows=2400)

    listener = StatusListener("j", published.append, stats)
    listener.onQueryProgress(_Event(_progress(7, name="state")))  # before any ingest batch
    assert published == []
    listener.onQueryProgress(_Event(_progress(42)))
    late["n"] = 5  # the state query found late events
    listener.onQueryProgress(_Event(_progress(8, name="state")))
    assert [(s.query, s.batch_id, s.late_events_total) for s in published] == [
        ("aggregates", 42, 0),
        ("aggregates", 42, 5),
    ]
