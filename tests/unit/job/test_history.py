"""The detectors' history as the state store keeps it: series a batch does not read stay the
rows they were saved as."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streaming.detectors.config import DetectorConfig
from streaming.job import history
from streaming.job.tracker import Tracker
from streaming.schema.aggregates import Aggregate

CFG = DetectorConfig()


def agg(host: str, minute: int, **fields: Any) -> Aggregate:
    return Aggregate(
        side="client",
        host=host,
        app="orders",
        broker="2",
        window_start=f"2026-11-21T05:{minute:02d}:00.000Z",
        window_end=f"2026-11-21T05:{minute + 1:02d}:00.000Z",
        sockets={"ESTABLISHED": 1},
        **fields,
    )


def restored(t: Tracker) -> Tracker:
    again = Tracker(CFG, clock=lambda a: a.window_end)
    again.load_state(json.loads(json.dumps(t.to_state())))
    return again


def test_a_batch_turns_only_the_series_it_reads_into_aggregates(monkeypatch):
    t = Tracker(CFG, clock=lambda a: a.window_end)
    hosts = [f"web-{i}" for i in range(50)]
    for minute in (0, 1):
        t.process([agg(h, minute, opens=1) for h in hosts], {})
    t = restored(t)
    made: list[str] = []
    real = Aggregate.from_fields.__func__

    def counted(cls, names, values):
        a = real(cls, names, values)
        made.append(a.host)
        return a

    monkeypatch.setattr(Aggregate, "from_fields", classmethod(counted))
    t.process([agg("web-7", 2, opens=1)], {})
    assert set(made) == {"web-7"}
    # The others are saved as they were restored, and read the same when a batch needs them.
    monkeypatch.undo()
    again = restored(t)
    assert again.to_state() == t.to_state()
    assert len(again.history) == 50
    assert [w.opens for w in again.history["client|web-3|orders||2"]] == [1, 1]


def test_a_series_restored_under_another_field_list_is_read_by_name():
    t = Tracker(CFG, clock=lambda a: a.window_end)
    t.process([agg("web-1", 0, opens=3)], {})
    state = json.loads(json.dumps(t.to_state()))
    names = [*state["history_fields"], "gone"]
    rows = {s: [[*r, None] for r in ws] for s, ws in state["history"].items()}
    again = Tracker(CFG, clock=lambda a: a.window_end)
    again.load_state(state | {"history_fields": names, "history": rows})
    (w,) = again.history["client|web-1|orders||2"]
    assert (w.opens, w.window_end) == (3, "2026-11-21T05:01:00.000Z")
    assert again.to_state()["history"] == state["history"]


def test_reading_a_series_that_is_not_there_is_a_key_error():
    h = history.History()
    with pytest.raises(KeyError):
        h["client|web-1|orders||2"]
    assert h.get("client|web-1|orders||2") is None and len(h) == 0
