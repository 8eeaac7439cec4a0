"""``Aggregate``'s fast paths give what the dataclass's own constructor and fields give."""

from __future__ import annotations

import dataclasses

from streaming.job.tracker import HISTORY_FIELDS
from streaming.schema.aggregates import SCHEMA_VERSION, Aggregate


def _sample() -> Aggregate:
    return Aggregate(
        side="client",
        host="h1",
        app="orders",
        broker="2",
        cluster="eu",
        window_start="2026-11-26T00:00:00Z",
        window_end="2026-11-26T00:01:00Z",
        sockets={"ESTABLISHED": 2, "CLOSE_WAIT": 1},
        close_wait_count=1,
        opens=3,
        reopen_idle_min_s=540.0,
    )


def test_from_fields_is_the_constructor_with_those_fields():
    a = _sample()
    row = [getattr(a, f) for f in HISTORY_FIELDS]
    fast = Aggregate.from_fields(HISTORY_FIELDS, row)
    slow = Aggregate(**dict(zip(HISTORY_FIELDS, row, strict=True)))
    assert fast == slow
    assert fast.series == slow.series and fast.client == slow.client
    assert fast.time_wait_count == 0 and fast.lifetime_avg_s is None  # not given: defaults
    assert fast.to_dict() == slow.to_dict() and dataclasses.replace(fast) == slow
    fast.opens += 1  # set on this aggregate alone
    assert Aggregate.from_fields(HISTORY_FIELDS, row).opens == slow.opens


def test_from_fields_gives_every_aggregate_its_own_sockets():
    a = Aggregate.from_fields(HISTORY_FIELDS, [getattr(_sample(), f) for f in HISTORY_FIELDS])
    b = Aggregate.from_fields(HISTORY_FIELDS, [getattr(_sample(), f) for f in HISTORY_FIELDS])
    a.sockets["ESTABLISHED"] = 5
    assert b.sockets == {}


def test_adopt_is_the_constructor_with_those_fields():
    a = _sample()
    given = {f: getattr(a, f) for f in HISTORY_FIELDS}
    adopted = Aggregate.adopt(dict(given))
    assert adopted == Aggregate(**given) and adopted.to_dict() == Aggregate(**given).to_dict()
    assert adopted.sockets == {} and adopted.lifetime_avg_s is None  # not given: defaults
    assert Aggregate.adopt({**given, "sockets": {"ESTABLISHED": 2}}).sockets == {"ESTABLISHED": 2}


def test_to_dict_is_every_field_in_order_after_schema_and_series():
    a = _sample()
    d = a.to_dict()
    expected = {"schema": SCHEMA_VERSION, "series": a.series, **dataclasses.asdict(a)}
    assert list(d.items()) == list(expected.items())
    d["sockets"]["ESTABLISHED"] = 9  # a copy
    assert a.sockets["ESTABLISHED"] == 2
    assert Aggregate.from_dict(d).sockets["ESTABLISHED"] == 9
