"""The event schema: the committed JSON Schema is current, validate() accepts the documented
examples and rejects each hostile shape with its own reason, and the Spark schema lists every
field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streaming.agent import schemadoc
from streaming.schema.events import (
    FIELDS,
    KINDS,
    MAX_EVENT_BYTES,
    MAX_STRING_CHARS,
    REQUIRED_BY_KIND,
    json_schema,
)
from streaming.schema.status import DEADLETTER_REASONS
from streaming.schema.validate import validate

DOCS = Path(__file__).parents[2] / "docs"


def test_committed_json_schema_is_up_to_date() -> None:
    committed = (DOCS / "events.schema.json").read_text()
    assert committed == schemadoc.render(), (
        "docs/events.schema.json is stale: run .venv/bin/python -m streaming.agent.schemadoc"
    )
    assert json.loads(committed) == json_schema()


def _doc_examples() -> list[dict]:
    text = (DOCS / "events.md").read_text()
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)\n```", text, re.S)]


def test_events_md_has_one_valid_example_per_kind() -> None:
    examples = _doc_examples()
    assert sorted({e["kind"] for e in examples}) == sorted(KINDS)
    for e in examples:
        assert validate(e).reason is None, (e["kind"], validate(e))
        unknown = set(e) - {f.name for f in FIELDS}
        assert not unknown, (e["kind"], unknown)
        for name in e:
            f = next(f for f in FIELDS if f.name == name)
            assert e["kind"] in f.kinds, f"{name} is not a field of {e['kind']} events"


def _closed() -> dict:
    return next(e for e in _doc_examples() if e["kind"] == "closed")


def _text(change: dict) -> str:
    return json.dumps({**_closed(), **change})


def _with(field: str, token: str) -> str:
    """The closed example with ``field``'s value replaced by a raw JSON token."""
    return _text({field: "@@"}).replace('"@@"', token)


HOSTILE: list[tuple[str, bytes | str | None, str, str]] = [
    ("a tombstone (no value)", None, "null_value", "Kafka tombstone"),
    ("an empty value", b"", "empty_value", "is empty"),
    ("over the size limit", "{" + " " * MAX_EVENT_BYTES + "}", "too_large", "bytes, over the"),
    (
        "invalid UTF-8 in a string",
        _text({"app": "@@"}).encode().replace(b"@@", b"\xff"),
        "invalid_utf8",
        "invalid UTF-8 at byte",
    ),
    ("lone surrogate escape", _with("app", '"x\\ud800"'), "invalid_utf8", "unpaired surrogate"),
    ("not JSON", "{not json", "malformed_json", "not valid JSON"),
    ("an array", "[1, 2]", "malformed_json", "not a JSON object"),
    ("trailing garbage", _text({}) + " garbage", "malformed_json", "Extra data"),
    ("two objects", _text({}) + _text({}), "malformed_json", "Extra data"),
    ("single quotes", _text({}).replace('"', "'"), "malformed_json", "not valid JSON"),
    ("NaN", _with("idle_s", "NaN"), "malformed_json", "NaN is not a JSON number"),
    ("Infinity", _with("idle_s", "Infinity"), "malformed_json", "Infinity is not a JSON number"),
    ("a BOM", "\ufeff" + _text({}), "malformed_json", "not valid JSON"),
    ("number for a string", _with("host", "12345"), "wrong_type", "host must be a JSON string"),
    (
        "huge number for a string",
        _with("host", "1e309"),
        "wrong_type",
        "host must be a JSON string",
    ),
    ("object for a string", _with("app", '{"a": 1}'), "wrong_type", "app must be a JSON string"),
    ("array for a string", _with("app", "[1]"), "wrong_type", "app must be a JSON string"),
    ("string for an integer", _with("seq", '"5"'), "wrong_type", "seq must be a JSON integer"),
    ("float for an integer", _with("seq", "5.0"), "wrong_type", "seq must be a JSON integer"),
    ("bool for an integer", _with("seq", "true"), "wrong_type", "seq must be a JSON integer"),
    ("string for a number", _with("idle_s", '"1.5"'), "wrong_type", "idle_s must be a JSON number"),
    ("string schema", _with("schema", '"1"'), "wrong_type", "schema must be a JSON integer"),
    ("schema 7", _with("schema", "7"), "unsupported_schema", "schema 7"),
    ("no schema", _with("schema", "null"), "unsupported_schema", "schema missing"),
    ("unknown kind", _with("kind", '"teleport"'), "unknown_kind", "kind 'teleport'"),
    ("no side", _with("side", "null"), "missing_field", "missing required field 'side'"),
    (
        "long app",
        _text({"app": "a" * (MAX_STRING_CHARS + 1)}),
        "field_too_long",
        f"app has {MAX_STRING_CHARS + 1} characters",
    ),
    ("seq of 2^64", _with("seq", str(2**64)), "invalid_value", "seq is out of the 64-bit"),
    ("1e309", _with("idle_s", "1e309"), "invalid_value", "idle_s is not a finite number"),
    ("negative age", _text({"state_age_s": -1.0}), "invalid_value", "state_age_s below 0"),
    ("unknown state", _text({"state": "HALF_OPEN"}), "invalid_value", "state not one of"),
    ("space for T", _text({"event_time": "2026-11-21 04:00:00Z"}), "invalid_value", "ISO 8601"),
    ("no zone", _text({"event_time": "2026-11-21T04:00:00"}), "invalid_value", "ISO 8601"),
    ("bare date", _text({"event_time": "2026-11-21"}), "invalid_value", "ISO 8601"),
    ("30 February", _text({"event_time": "2026-02-30T00:00:00Z"}), "invalid_value", "ISO 8601"),
]


@pytest.mark.parametrize(
    ("raw", "reason", "detail"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE]
)
def test_validate_rejects_each_hostile_shape_with_its_reason(
    raw: bytes | str | None, reason: str, detail: str
) -> None:
    v = validate(raw)
    assert (v.reason, v.event) == (reason, None)
    assert detail in v.detail, v.detail


def test_every_reason_has_a_hostile_example_and_the_order_is_documented() -> None:
    # The job's own reasons: a record its operator skips, one its code fails on (a bug), a
    # bucket's saved state it cannot read.
    job = {"skipped", "internal_error", "state_unreadable"}
    reasons = {h[2] for h in HOSTILE} | {"time_out_of_range"} | job
    assert reasons == set(DEADLETTER_REASONS)
    job_md = (DOCS / "job.md").read_text()
    for reason in DEADLETTER_REASONS:
        assert f"`{reason}`" in job_md, f"docs/job.md does not document {reason}"


def test_reasons_are_tested_in_their_documented_order() -> None:
    # A record with several problems gets the earliest reason.
    both = _text({"seq": "5", "schema": 7, "app": "a" * 300})
    assert validate(both).reason == "wrong_type"
    assert validate(_text({"schema": 7, "app": "a" * 300})).reason == "unsupported_schema"
    assert validate(_text({"app": "a" * 300, "state": "X"})).reason == "field_too_long"


def test_duplicate_keys_keep_the_last_value() -> None:
    text = _text({}).replace('"seq":', '"seq": "first", "seq":', 1)
    assert validate(text).reason is None


def test_event_time_bounds_use_now_rounded_down_to_the_minute() -> None:
    event = _closed()
    t = validate(event).ts_us / 1e6
    assert validate(event, now_s=t + 100, max_age_s=100.5).reason is None
    assert validate(event, now_s=t + 200, max_age_s=100).reason == "time_out_of_range"
    # now is t - 400 rounded down; the bound is 300 s plus a minute of slack
    assert validate(event, now_s=t - 361, max_future_s=300).detail == "event_time in the future"


def test_accepted_events_are_typed_as_the_schema_says() -> None:
    v = validate(_with("idle_s", "3"))
    assert v.reason is None and v.event["idle_s"] == 3.0 and isinstance(v.event["idle_s"], float)
    assert "unknown_extra" not in validate(_text({"unknown_extra": [1, {"a": None}]})).event


def test_required_fields_per_kind() -> None:
    envelope = ("schema", "kind", "event_time", "host", "agent_id", "seq")
    for kind in KINDS:
        assert REQUIRED_BY_KIND[kind][:6] == envelope
    assert "state" in REQUIRED_BY_KIND["summary"] and "state" not in REQUIRED_BY_KIND["heartbeat"]


def test_spark_schema_has_every_field() -> None:
    from streaming.schema.events import spark_schema

    assert [f.name for f in spark_schema().fields] == [f.name for f in FIELDS]
