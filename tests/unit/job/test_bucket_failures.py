"""A bucket that fails (no Spark): faults injected into the time step (windows closing,
findings resolving) and saved states that cannot be read. Each failure is one dead letter,
the records that were fine are kept, and the bucket moves on instead of failing again."""

from __future__ import annotations

import base64
import json

import orjson
import pytest

from streaming.detectors.config import DetectorConfig
from streaming.job import buckets
from streaming.job.buckets import Bucket, Record, compress, process_or_set_aside, window_end_clock
from streaming.job.open_windows import OpenWindows
from streaming.job.tracker import Tracker
from streaming.schema.times import iso

CFG = DetectorConfig()
T0 = 1_795_000_020.0  # a window start (a multiple of 60)
WHERE = "bucket 3"


def _row(t: float, host: str) -> dict:
    series = {"side": "client", "host": host, "app": "orders", "cluster": "prod", "broker": "1"}
    return {**series, "window_start_s": t - t % 60, "events": 2, "last_event_s": t}


def _record(batch: int, t: float, fleet: float | None, hosts: int = 3) -> Record:
    rows = [_row(t, f"web-{h}") for h in range(hosts)]
    return Record(batch, 0, None, fleet, "\n".join(json.dumps(r) for r in rows))


def _run(saved: bytes | None, records: list[Record], fleet: float | None):
    bucket, em = process_or_set_aside(saved, records, fleet, CFG, window_end_clock, True, WHERE)
    bucket.timer_ms = bucket.next_timer_ms()  # as the processor does
    return bucket, em


def _saved_after_first_batch() -> bytes:
    b = Bucket(CFG, window_end_clock)
    b.process([_record(0, T0 + 5, None)], None)
    return b.dump()


class Fault:
    """Makes the time step fail: a call with no rows, the one that closes windows
    (``OpenWindows.apply``) or resolves findings (``Tracker.process``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, target: str, times: int | None) -> None:
        self.left = times  # None: always
        self.calls = 0
        cls, name, empty = {
            "windows": (OpenWindows, "apply", lambda a, kw: not list(a[0])),
            "tracker": (Tracker, "process", lambda a, kw: not list(a[0])),
        }[target]
        original = getattr(cls, name)

        def faulty(obj, *args, **kwargs):
            args = tuple(list(a) if i == 0 else a for i, a in enumerate(args))
            if empty(args, kwargs) and (self.left is None or self.left > 0):
                self.calls += 1
                if self.left is not None:
                    self.left -= 1
                raise RuntimeError(f"injected fault in {name}")
            return original(obj, *args, **kwargs)

        monkeypatch.setattr(cls, name, faulty)
        self.undo = lambda: monkeypatch.setattr(cls, name, original)


def _letters(em) -> list[tuple[str, str]]:
    return [(k, v["reason"]) for k, v in em.dead_letters]


@pytest.mark.parametrize("target", ["windows", "tracker"])
def test_a_failed_time_step_is_one_dead_letter_and_is_not_tried_again(monkeypatch, target):
    saved = _saved_after_first_batch()
    fault = Fault(monkeypatch, target, times=None)
    bucket, em = _run(saved, [], T0 + 70)  # a timer: the fleet is in the next window
    assert _letters(em) == [(f"{WHERE}:time:{iso(T0 + 120)}", "internal_error")]
    assert em.dead_letters[0][1]["detail"].startswith("RuntimeError: injected fault")
    assert em.stats()["internal_errors"] == 1
    # the bucket's timer is not one that has passed already (it would fire at once)
    assert bucket.timer_ms is not None and bucket.timer_ms > (T0 + 70) * 1000
    # later calls in the same window: the failed step counts as judged, nothing more
    for fleet in (T0 + 80, T0 + 110):
        calls = fault.calls
        bucket, em = _run(bucket.dump(), [], fleet)
        assert em.dead_letters == [] and em.stats() is None
        assert fault.calls == calls  # not even tried
        assert bucket.timer_ms > fleet * 1000
    # the fault gone, the next window boundary is judged as usual
    fault.undo()
    bucket, em = _run(bucket.dump(), [], T0 + 125)
    assert em.dead_letters == []
    assert bucket.tracker.max_window_end == iso(T0 + 180)
    assert bucket.timer_ms == (T0 + 180) * 1000


def test_a_time_step_that_fails_for_a_while_is_one_dead_letter(monkeypatch):
    saved = _saved_after_first_batch()
    Fault(monkeypatch, "windows", times=2)  # the call and its retry alone
    bucket, em = _run(saved, [], T0 + 70)
    assert _letters(em) == [(f"{WHERE}:time:{iso(T0 + 120)}", "internal_error")]
    bucket, em = _run(bucket.dump(), [], T0 + 90)
    assert em.dead_letters == []
    bucket, em = _run(bucket.dump(), [], T0 + 130)
    assert em.dead_letters == [] and bucket.tracker.max_window_end == iso(T0 + 180)


def test_the_records_of_a_batch_whose_time_step_fails_are_kept(monkeypatch):
    saved = _saved_after_first_batch()
    clean, clean_em = _run(saved, [_record(1, T0 + 65, T0 + 5)], None)
    Fault(monkeypatch, "tracker", times=None)
    bucket, em = _run(saved, [_record(1, T0 + 65, T0 + 5)], T0 + 125)
    assert _letters(em) == [(f"{WHERE}:time:{iso(T0 + 180)}", "internal_error")]
    assert bucket.applied.batch == 1
    assert em.aggregates == clean_em.aggregates and len(em.aggregates) == 3
    assert bucket.windows.open == clean.windows.open
    bucket, em = _run(bucket.dump(), [], T0 + 150)
    assert em.dead_letters == []


def test_a_time_step_between_two_ingest_batches_that_fails_does_not_lose_the_record(
    monkeypatch,
):
    saved = _saved_after_first_batch()
    Fault(monkeypatch, "windows", times=None)
    # the fleet moved into a later window before batch 1: its time step comes first
    bucket, em = _run(saved, [_record(1, T0 + 130, T0 + 125)], None)
    assert _letters(em) == [(f"{WHERE}:time:{iso(T0 + 180)}", "internal_error")]
    assert bucket.applied.batch == 1 and len(em.aggregates) == 3
    bucket, em = _run(bucket.dump(), [], T0 + 170)
    assert em.dead_letters == []


def test_the_normal_path_saves_nothing_extra(monkeypatch):
    saved = _saved_after_first_batch()
    dumps = []
    original = Bucket.dump
    monkeypatch.setattr(Bucket, "dump", lambda self: dumps.append(1) or original(self))
    process_or_set_aside(
        saved, [_record(1, T0 + 65, T0 + 5)], T0 + 125, CFG, window_end_clock, True, WHERE
    )
    process_or_set_aside(saved, [], T0 + 200, CFG, window_end_clock, True, WHERE)
    assert dumps == []


def _missing_key() -> bytes:
    doc = orjson.loads(buckets.decompress(_saved_after_first_batch()))
    del doc["tracker"]["history_fields"]
    return compress(orjson.dumps(doc))


@pytest.mark.parametrize(
    "blob",
    [b"not a saved bucket", compress(b'{"windows": '), _missing_key()],
    ids=["corrupt", "truncated-json", "missing-key"],
)
def test_a_state_that_cannot_be_read_is_set_aside_and_the_bucket_starts_empty(blob):
    bucket, em = _run(blob, [_record(4, T0 + 5, None)], None)
    ((key, letter),) = em.dead_letters
    assert (key, letter["reason"]) == (f"{WHERE}:state", "state_unreadable")
    assert base64.b64decode(letter["raw"]) == blob and letter["raw_bytes"] == len(blob)
    assert letter["detail"]
    assert em.stats()["internal_errors"] == 1
    # the empty bucket took the batch's records as a new bucket does
    fresh = Bucket(CFG, window_end_clock)
    fresh_em = fresh.process([_record(4, T0 + 5, None)], None)
    assert em.aggregates == fresh_em.aggregates and len(em.aggregates) == 3
    assert bucket.applied.batch == 4 and bucket.windows.open == fresh.windows.open
    # and goes on from its new state
    bucket, em = _run(bucket.dump(), [_record(5, T0 + 65, T0 + 5)], T0 + 70)
    assert em.dead_letters == [] and len(em.aggregates) == 3


def test_a_state_that_cannot_be_read_is_set_aside_on_a_timer_too():
    bucket, em = _run(b"\x00" * 20, [], T0 + 70)
    assert _letters(em) == [(f"{WHERE}:state", "state_unreadable")]
    assert bucket.empty() and bucket.timer_ms is None
