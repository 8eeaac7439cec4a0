"""Checkpointed detector state files and job-status records from Spark progress JSON."""

from __future__ import annotations

from streaming.job.state_files import StateFiles
from streaming.job.status import Totals, status_from_progress


def test_state_files_load_the_newest_before_a_batch(tmp_path):
    sf = StateFiles(tmp_path, keep=3)
    assert sf.load_before(0) is None
    for i in range(6):
        sf.save(i, {"batch": i})
    assert sf.load_before(4) == (3, {"batch": 3})
    assert sf.load_before(100) == (5, {"batch": 5})
    assert sorted(p.name for p in sf.dir.iterdir()) == ["3.json", "4.json", "5.json"]


def _progress(batch: int, name: str = "aggregates", dropped: int = 0, dead: int | None = None):
    p = {
        "name": name,
        "batchId": batch,
        "timestamp": "2026-11-21T05:01:02.120Z",
        "batchDuration": 1800,
        "numInputRows": 2400,
        "inputRowsPerSecond": 1200.5,
        "processedRowsPerSecond": 2400.1,
        "eventTime": {"watermark": "2026-11-21T04:59:00.000Z", "max": "2026-11-21T05:01:01.900Z"},
        "stateOperators": [{"numRowsDroppedByWatermark": dropped}],
    }
    if dead is not None:
        p["observedMetrics"] = {"deadletter": {"rows": dead}}
        p.pop("eventTime")
        p["stateOperators"] = []
    return p


def test_status_record_matches_the_contract_example(tmp_path):
    totals = Totals(tmp_path / "totals.json")
    st = status_from_progress(_progress(42, dropped=0), "connmon-job", totals, None).to_dict()
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
        "dead_letter_total": 0,
        "late_events_total": 0,
        "last_event_time": "2026-11-21T05:01:01.900Z",
    }


def test_totals_are_cumulative_counted_once_per_batch_and_survive_restart(tmp_path):
    path = tmp_path / "totals.json"
    totals = Totals(path)
    status_from_progress(_progress(1, dropped=2), "j", totals, None)
    status_from_progress(_progress(1, "deadletter", dead=3), "j", totals, None)
    status_from_progress(_progress(1, dropped=2), "j", totals, None)  # re-run after restart
    again = Totals(path)
    st = status_from_progress(_progress(2, dropped=1), "j", again, "x")
    assert (st.dead_letter_total, st.late_events_total) == (3, 3)
