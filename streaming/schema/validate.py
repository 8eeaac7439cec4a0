"""The reference decoder: one raw record -> the event's fields, or the reason it is rejected.

Pure Python, no Spark. It is the definition of what the job accepts (docs/job.md, "Rejected
records"): the job's Spark decoder sends every record its fast checks cannot vouch for through
this very function, and a property test checks the two agree on random input.

Reasons, in the order they are tested (the first that applies wins):

``null_value`` -> ``empty_value`` -> ``too_large`` -> ``invalid_utf8`` -> ``malformed_json`` ->
``wrong_type`` -> ``unsupported_schema`` -> ``unknown_kind`` -> ``missing_field`` ->
``field_too_long`` -> ``invalid_value`` -> ``time_out_of_range``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from streaming.schema import events
from streaming.schema.events import FIELDS, KINDS, MAX_EVENT_BYTES, MAX_STRING_CHARS

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NOW_STEP_S = 60  # processing time for the event-time bounds, in whole minutes
# ISO 8601 with a zone, as the agent writes it (milliseconds optional, up to microseconds).
EVENT_TIME = (
    r"(19[7-9][0-9]|[2-9][0-9]{3})-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})"
)
_EVENT_TIME = re.compile(EVENT_TIME, re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_JSON_TYPE = {
    "string": "string",
    "timestamp": "string",
    "long": "integer",
    "double": "number",
    "boolean": "boolean",
}

NULL_VALUE = "the record has no value (a Kafka tombstone)"
EMPTY_VALUE = "the record's value is empty"
TOO_LARGE = f"%d bytes, over the {MAX_EVENT_BYTES}-byte limit"  # printf-style: Spark shares it
TOO_OLD = "event_time older than the allowed age"
TOO_NEW = "event_time in the future"
BAD_TIME = "event_time is not ISO 8601 with a zone (YYYY-MM-DDThh:mm:ss[.ffffff]Z or +hh:mm)"


@dataclass(frozen=True)
class Verdict:
    """``reason`` is None for an accepted record; ``event`` then holds its known fields (typed
    as the schema says, doubles as float) and ``ts_us`` its event time in epoch microseconds."""

    reason: str | None
    detail: str | None = None
    event: dict[str, Any] | None = None
    ts_us: int | None = None


def time_bounds_us(
    now_s: float, max_age_s: float | None, max_future_s: float | None
) -> tuple[int | None, int | None]:
    """Accepted event times [low, high] in epoch microseconds (None: unbounded). ``now`` is
    rounded down to the minute, so the future bound carries a minute of slack."""
    now_us = math.floor(now_s / NOW_STEP_S) * NOW_STEP_S * 1_000_000
    low = None if max_age_s is None else now_us - round(max_age_s * 1_000_000)
    high = None if max_future_s is None else now_us + round((max_future_s + NOW_STEP_S) * 1e6)
    return low, high


def _reject(reason: str, detail: str) -> Verdict:
    return Verdict(reason, detail)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return False


def _type_ok(ftype: str, value: Any) -> bool:
    if ftype in ("string", "timestamp"):
        return isinstance(value, str)
    if ftype == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if ftype == "long":
        return isinstance(value, int)
    return isinstance(value, int | float)  # double


def parse_event_time(text: str) -> int | None:
    """Epoch microseconds of an ``event_time`` in the accepted form, else None."""
    if not _EVENT_TIME.fullmatch(text):
        return None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (dt - _EPOCH) // timedelta(microseconds=1)


def _invalid(f: events.Field, value: Any) -> str | None:
    if f.type == "double":
        try:
            value = float(value)
        except OverflowError:
            return f"{f.name} is not a finite number"
        if not math.isfinite(value):
            return f"{f.name} is not a finite number"
    if f.type == "long" and not INT64_MIN <= value <= INT64_MAX:
        return f"{f.name} is out of the 64-bit integer range"
    if f.minimum is not None and f.name != "schema" and value < f.minimum:
        return f"{f.name} below {f.minimum:g}"
    if f.enum and f.name != "kind" and value not in f.enum:
        return f"{f.name} not one of {list(f.enum)}"
    if f.type == "timestamp" and parse_event_time(value) is None:
        return BAD_TIME
    return None


def validate(
    record: bytes | str | Mapping[str, Any] | None,
    now_s: float | None = None,
    max_age_s: float | None = None,
    max_future_s: float | None = None,
) -> Verdict:
    """Decode and check one record. ``now_s`` (epoch seconds) enables the event-time bounds.
    A mapping is encoded as the agent encodes events (NaN stays NaN, so it is rejected). None is
    a Kafka record without a value (a tombstone)."""
    if record is None:
        return _reject("null_value", NULL_VALUE)
    if isinstance(record, Mapping):
        record = json.dumps(record, separators=(",", ":"))
    raw = record.encode("utf-8", "surrogatepass") if isinstance(record, str) else record
    if not raw:
        return _reject("empty_value", EMPTY_VALUE)
    if len(raw) > MAX_EVENT_BYTES:
        return _reject("too_large", TOO_LARGE % len(raw))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _reject("invalid_utf8", f"invalid UTF-8 at byte {exc.start}")
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return _reject("malformed_json", f"not valid JSON: {msg}"[:200])
    if not isinstance(obj, dict):
        return _reject("malformed_json", "not a JSON object")
    if _has_surrogate(obj):
        return _reject("invalid_utf8", "a \\u escape is an unpaired surrogate")
    present = {f.name: obj[f.name] for f in FIELDS if obj.get(f.name) is not None}
    for f in FIELDS:
        if f.name in present and not _type_ok(f.type, present[f.name]):
            return _reject("wrong_type", f"{f.name} must be a JSON {_JSON_TYPE[f.type]}")
    schema = present.get("schema")
    if schema != events.SCHEMA_VERSION:
        return _reject("unsupported_schema", f"schema {'missing' if schema is None else schema}")
    kind = present.get("kind")
    if kind not in KINDS:
        return _reject("unknown_kind", "kind missing" if kind is None else f"kind {kind!r}"[:200])
    for name in events.REQUIRED_BY_KIND[kind]:
        if name not in present:
            return _reject("missing_field", f"missing required field {name!r}")
    for f in FIELDS:
        v = present.get(f.name)
        if isinstance(v, str) and len(v) > MAX_STRING_CHARS:
            return _reject(
                "field_too_long",
                f"{f.name} has {len(v)} characters, over the {MAX_STRING_CHARS}-character limit",
            )
    for f in FIELDS:
        if f.name in present:
            problem = _invalid(f, present[f.name])
            if problem is not None:
                return _reject("invalid_value", problem)
    ts_us = parse_event_time(present["event_time"])
    assert ts_us is not None  # checked above
    if now_s is not None:
        low, high = time_bounds_us(now_s, max_age_s, max_future_s)
        if low is not None and ts_us < low:
            return _reject("time_out_of_range", TOO_OLD)
        if high is not None and ts_us > high:
            return _reject("time_out_of_range", TOO_NEW)
    typed = {
        k: float(v) if events.FIELDS_BY_NAME[k].type == "double" else v for k, v in present.items()
    }
    return Verdict(None, event=typed, ts_us=ts_us)
