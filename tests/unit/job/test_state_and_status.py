"""Checkpointed detector state files and job-status records from Spark progress JSON."""

from __future__ import annotations

from streaming.job.batch import BatchStats
from streaming.job.state_files import StateFiles
from streaming.job.status import status_from_progress
from streaming.job.times import epoch


def test_state_files_load_the_newest_before_a_batch(tmp_path):
    sf = StateFiles(tmp_path, keep=3)
    assert sf.load_before(0) is None
    for i in range(6):
        sf.save(i, {"batch": i})
    assert sf.load_before(4) == (3, {"batch": 3})
    assert sf.load_before(100) == (5, {"batch": 5})
    assert sorted(p.name for p in sf.dir.iterdir()) == ["3.json", "4.json", "5.json"]


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


def test_status_record_matches_the_contract_example():
    stats = BatchStats(
        batch_id=42,
        watermark_s=epoch("2026-11-21T04:59:00.000Z"),
        max_event_s=epoch("2026-11-21T05:01:01.900Z"),
        dead_letter_total=3,
        late_events_total=0,
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
    }


def test_status_before_the_first_batch_has_no_watermark():
    st = status_from_progress(_progress(0), "j", None)
    assert (st.watermark, st.watermark_delay_s, st.last_event_time) == (None, None, None)
    assert (st.dead_letter_total, st.late_events_total) == (0, 0)
