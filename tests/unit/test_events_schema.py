"""The event schema: the committed JSON Schema is current, validate() accepts the documented
examples and rejects broken events, and the Spark schema lists every field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streaming.agent import schemadoc
from streaming.schema.events import FIELDS, KINDS, REQUIRED_BY_KIND, json_schema, validate

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
        assert validate(e) == [], (e["kind"], validate(e))
        unknown = set(e) - {f.name for f in FIELDS}
        assert not unknown, (e["kind"], unknown)
        for name in e:
            f = next(f for f in FIELDS if f.name == name)
            assert e["kind"] in f.kinds, f"{name} is not a field of {e['kind']} events"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"schema": 2}, "unsupported schema version 2"),
        ({"kind": "exploded"}, "unknown kind 'exploded'"),
        ({"state": "HALF_OPEN"}, "state='HALF_OPEN' not one of"),
        ({"state_age_s": -1.0}, "state_age_s=-1.0 below 0"),
        ({"side": None}, "missing required field 'side'"),
        ({"closed_by": "nobody"}, "closed_by='nobody' not one of"),
    ],
)
def test_validate_rejects(change: dict, problem: str) -> None:
    base = next(e for e in _doc_examples() if e["kind"] == "closed")
    event = {**base, **change}
    problems = validate(event)
    assert any(p.startswith(problem) for p in problems), problems


def test_required_fields_per_kind() -> None:
    envelope = ("schema", "kind", "event_time", "host", "agent_id", "seq")
    for kind in KINDS:
        assert REQUIRED_BY_KIND[kind][:6] == envelope
    assert "state" in REQUIRED_BY_KIND["summary"] and "state" not in REQUIRED_BY_KIND["heartbeat"]


def test_spark_schema_has_every_field() -> None:
    from streaming.schema.events import spark_schema

    assert [f.name for f in spark_schema().fields] == [f.name for f in FIELDS]
