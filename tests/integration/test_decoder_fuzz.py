"""The job's Spark decoder and the schema's own ``validate()`` agree on every record: random
bytes, random JSON, and valid events with one field broken in every way hypothesis finds."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from streaming.job import parse
from streaming.schema import events
from streaming.schema.validate import validate

NOW = datetime(2026, 11, 21, 4, 10, 30, tzinfo=UTC)
MAX_AGE_S, MAX_FUTURE_S = 3600.0, 300.0

PLAIN = "abcxyz0189.-_:[] /"  # what agents write, mostly
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
tokens = st.sampled_from(
    [
        "NaN",
        "Infinity",
        "-Infinity",
        "1e309",
        "-0",
        "01",
        "1.",
        ".5",
        "+1",
        "1E2",
        "true",
        "'x'",
        '"\\ud800"',
        '"\\udc00x"',
        '"\\ud83d\\ude00"',
        '"a\\u0000b"',
        '"\\\\ud800"',
        str(2**63),
        str(-(2**63) - 1),
        str(2**63 - 1),
        '"2026-11-21T04:10:00.000+01:00"',
        '"2026-11-21T04:10:00Z"',
        '"2026-11-21T04:10:00.1234567Z"',
        '"2026-11-21 04:10:00Z"',
        '"2026-11-21T04:10:00+19:00"',
        '"1969-12-31T23:59:59Z"',
        '"10.0.0.1"',
        '"[::1]:9092"',
        '"[::1]"',
        '"true"',
        '"12"',
        '"1e5"',
        '"NaN"',
        '"}{"',
        '"é😀"',
        # event_time shapes next to the agent's own (the fast path pins that one exactly)
        '"2026-11-21T04:10:00.12 Z"',
        '"2026-11-21T04:10:00.1\\tZ"',
        '"2026-11-21T04:10:00.   Z"',
        '"0026-11-21T04:10:00.000Z"',
        '"+026-11-21T04:10:00.000Z"',
        '"2026-11-21 04:10:00.000Z"',
        # what a JSON number, boolean or array looks like as a string, or does not
        '"0.1.0"',
        '"-5"',
        '"1:2"',
        '"[1]"',
        '"false"',
        '"-Infinity"',
        # an object left open: its last brace closes the inner one
        '{"x":1',
        "{",
    ]
)


def _time(offset_s: float) -> str:
    t = NOW + timedelta(seconds=offset_s)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@st.composite
def valid_events(draw) -> dict:
    kind = draw(st.sampled_from(events.KINDS))
    ev: dict = {
        "schema": 1,
        "kind": kind,
        "event_time": _time(draw(st.floats(-4000, 700))),
        "host": draw(st.sampled_from(["h1", "10.1.2.3", "host-1", "host-é", "12"])),
        "agent_id": "a-1",
        "seq": draw(st.integers(0, 2**63 - 1)),
    }
    for f in events.FIELDS:
        if kind not in f.kinds or f.name in ev or not (f.required or draw(st.booleans())):
            continue
        if f.enum:
            ev[f.name] = draw(st.sampled_from(f.enum))
        elif f.type == "string":
            ev[f.name] = draw(
                st.text(PLAIN, min_size=1, max_size=12)
                | st.text(
                    PLAIN,
                    min_size=events.MAX_STRING_CHARS - 1,
                    max_size=events.MAX_STRING_CHARS + 1,
                )
                | st.text(max_size=8)
                | st.sampled_from(["[::1]:9092", "b:9092"])
            )
        elif f.type == "long":
            ev[f.name] = draw(st.integers(0, 2**40))
        elif f.type == "double":
            ev[f.name] = draw(st.floats(0, 1e9) | st.integers(0, 100))
        elif f.type == "boolean":
            ev[f.name] = draw(st.booleans())
    return ev


def _dump(draw, obj) -> str:
    return json.dumps(
        obj,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, None, 1])),
        separators=draw(st.sampled_from([None, (",", ":")])),
    )


@st.composite
def broken_events(draw) -> bytes:
    ev = draw(valid_events())
    names = [f.name for f in events.FIELDS] + ["extra"]
    how = draw(st.sampled_from(["value", "token", "drop", "trail", "bytes", "none"]))
    if how == "value":
        ev[draw(st.sampled_from(names))] = draw(json_values)
    elif how == "drop":
        ev.pop(draw(st.sampled_from(sorted(ev))))
    text = _dump(draw, ev)
    if how == "token":
        name = draw(st.sampled_from(sorted(ev)))
        marker = '"@@marker@@"'
        text = _dump(draw, {**ev, name: "@@marker@@"}).replace(marker, draw(tokens))
    elif how == "trail":
        text += draw(st.sampled_from([" x", "}", "]", "{}", " \n", "\t", ",", "\x00", text]))
    raw = text.encode("utf-8", "surrogatepass")
    if how == "bytes":
        i = draw(st.integers(0, len(raw)))
        raw = raw[:i] + draw(st.binary(min_size=1, max_size=3)) + raw[i:]
    return raw


records = st.one_of(
    st.none(),  # a tombstone
    st.just(b""),
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    valid_events().map(lambda e: json.dumps(e).encode()),
    broken_events(),
    broken_events(),
)


# Kafka-level shapes around the value, which the decoder must not look at: no key, a huge key,
# headers (by offset: every record gets one of them).
KEYS = [None, b"host-1", b"k" * 100_000]
HEADERS = [None, [], [("trace", b"x" * 100), ("trace", None)]]


def _raw(spark, values: list[bytes | None]):
    """The records as the Kafka source gives them, narrowed as the job narrows them."""
    rows = [
        (KEYS[i % len(KEYS)], v, "t", 0, i, HEADERS[i % len(HEADERS)]) for i, v in enumerate(values)
    ]
    df = spark.createDataFrame(
        rows,
        "key binary, value binary, topic string, partition int, offset long, "
        "headers array<struct<key: string, value: binary>>",
    )
    return df.selectExpr("*", "current_timestamp() AS timestamp").select(*parse.RAW_COLUMNS)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@settings(
    max_examples=12,
    phases=[Phase.generate],  # a failure names its record; shrinking through Spark is slow
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(st.lists(records, min_size=40, max_size=80))
def test_spark_decoder_agrees_with_validate(spark, values: list[bytes | None]) -> None:
    _agree(spark, values)


def _agree(spark, values: list[bytes | None]) -> None:
    """The Spark decoder and ``validate`` give each record the same reason, detail, event
    time and values; and every record gets either a reason or an event time and a host (a
    window and a series)."""
    decoder = parse.Decoder(max_age_s=MAX_AGE_S, max_future_s=MAX_FUTURE_S)
    got = decoder.judge(_raw(spark, values), now=NOW.timestamp()).collect()
    assert len(got) == len(values)
    for row in got:
        raw = values[row.offset]
        want = validate(raw, NOW.timestamp(), MAX_AGE_S, MAX_FUTURE_S)
        assert (row.reason, row.detail) == (want.reason, want.detail), raw
        assert row.reason is not None or (row.ts is not None and row.host is not None), raw
        if want.reason is None:
            assert int(row.ts.timestamp() * 1e6) // 1000 == want.ts_us // 1000, raw
            for f in events.FIELDS:
                assert _same(row[f.name], want.event.get(f.name)), (f.name, raw)


def _edge_records() -> list[bytes | None]:
    """Records at the fast path's edges, each checked on every run (the random ones above may
    miss them): event_time shapes next to the agent's own, strings that look like a number,
    boolean or array, and objects that are left open or followed by more."""
    base = {
        "schema": 1,
        "kind": "heartbeat",
        "event_time": _time(-60),
        "host": "h1",
        "agent_id": "a-1",
        "seq": 1,
        "version": "0.1.0",
    }
    text = json.dumps(base, separators=(",", ":"))
    stamp = _time(-60)
    out = [text.encode()]
    for et in [
        stamp[:-2] + " Z",
        stamp[:-2] + "\tZ",
        stamp[:-4] + "   Z",
        stamp[:-2] + "\u00e9Z",
        stamp[:-1] + " ",
        stamp.replace("T", " "),
        "0026" + stamp[4:],
        "+026" + stamp[4:],
        " 026" + stamp[4:],
        "1969-12-31T23:59:59.999Z",
        stamp[:-5] + "Z",
        stamp[:-1] + "+00:00",
    ]:
        out.append(json.dumps({**base, "event_time": et}).encode())
    for host in ["0.1.0", "-5", "1:2", "[1]", "[1", "false", "true", "-Infinity", "10.0.0.1"]:
        out.append(json.dumps({**base, "host": host}).encode())
    for token in [
        "-5",
        "1e400",
        "[1]",
        '["a:b"]',
        "false",
        '{"a":1}',
        "-0",
        "12345678901234567890",
    ]:
        out.append(text.replace('"h1"', token).encode())
    out += [
        text.replace('"h1"', '{"x":1').encode(),  # open: the last brace closes the inner object
        text.replace('"h1"', "{").encode(),
        (text[:-1] + ',"extra":{"a":[1,{}]}}').encode(),
        (text + "{}").encode(),
        (text + " }").encode(),
        (text[:-1] + "}}").encode(),
        ("{" + text).encode(),
    ]
    return [*out, None, b"", b" ", b"\x00"]


def test_spark_decoder_agrees_with_validate_at_the_edges(spark) -> None:
    _agree(spark, _edge_records())
