"""Checkpointed detector state files and job-status records from Spark progress JSON."""

from __future__ import annotations

import pytest

from streaming.job.batch import BatchStats
from streaming.job.state_files import StateFiles
from streaming.job.status import status_from_progress
from streaming.schema.times import epoch


def test_state_files_load_a_snapshot_and_the_deltas_after_it(tmp_path):
    sf = StateFiles(tmp_path)
    assert sf.load_before(0) is None and sf.wants_snapshot(0)
    sf.save(0, {"batch": 0, "pad": "x" * 100}, snapshot=True)
    for i in (1, 2, 3):
        assert not sf.wants_snapshot(i)  # the deltas so far are smaller than the snapshot
        sf.save(i, {"batch": i}, snapshot=False)
    saved = sf.load_before(3)
    assert (saved.batch_id, saved.snapshot["batch"]) == (2, 0)
    assert [d["batch"] for d in saved.deltas] == [1, 2] and saved.deltas[-1] == {"batch": 2}
    assert sf.load_before(100).deltas[-1] == {"batch": 3}


def test_state_files_snapshot_again_once_the_deltas_outgrow_the_snapshot(tmp_path):
    sf = StateFiles(tmp_path)
    sf.save(0, {"n": 0}, snapshot=True)
    batch = 1
    while not sf.wants_snapshot(batch):
        sf.save(batch, {"n": batch}, snapshot=False)
        batch += 1
    snapshot_bytes = (sf.dir / "0.json").stat().st_size
    delta_bytes = sum(p.stat().st_size for p in sf.dir.glob("*.delta.json"))
    assert delta_bytes >= snapshot_bytes > delta_bytes - (sf.dir / "1.delta.json").stat().st_size
    assert StateFiles(tmp_path, max_deltas=2).wants_snapshot(3)


def test_state_files_keep_what_a_re_run_of_the_newest_batch_needs(tmp_path):
    sf = StateFiles(tmp_path)
    kinds = [True, False, False, True, False, True]  # snapshots at 0, 3 and 5
    for i, snap in enumerate(kinds):
        sf.save(i, {"batch": i}, snapshot=snap)
    # batch 5 may still be re-run: it needs snapshot 3 and delta 4; 0-2 are gone
    assert sorted(p.name for p in sf.dir.iterdir()) == ["3.json", "4.delta.json", "5.json"]
    assert sf.load_before(5).deltas[-1] == {"batch": 4}
    sf.save(5, {"batch": "5 again"}, snapshot=False)  # the re-run writes a delta this time
    assert sorted(p.name for p in sf.dir.iterdir()) == ["3.json", "4.delta.json", "5.delta.json"]
    assert sf.load_before(6).deltas[-1] == {"batch": "5 again"}


def test_state_files_refuse_a_chain_with_a_hole(tmp_path):
    sf = StateFiles(tmp_path)
    sf.save(0, {}, snapshot=True)
    sf.save(1, {}, snapshot=False)
    sf.save(2, {}, snapshot=False)
    (sf.dir / "1.delta.json").unlink()
    with pytest.raises(ValueError, match="misses the state of batch 1"):
        sf.load_before(3)


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
        input_rows=2400,
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
