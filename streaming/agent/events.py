"""Event envelopes: schema version, kind, event time, host, agent id, per-agent sequence."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from streaming.schema.events import SCHEMA_VERSION, fit
from streaming.schema.times import iso


def make_agent_id(host: str, started: float) -> str:
    return f"{host}-{int(started * 1000)}"


class EventFactory:
    """Wrap field dicts in the envelope; ``seq`` increases by one per event, from 0. String
    values are kept within the schema's length limit (``events.fit``)."""

    def __init__(self, host: str, agent_id: str, clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.agent_id = agent_id
        self.clock = clock
        self.seq = 0

    def make(self, fields: dict[str, Any], at: float | None = None) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "kind": fields["kind"],
            "event_time": iso(self.clock() if at is None else at),
            "host": fit(self.host),
            "agent_id": fit(self.agent_id),
            "seq": self.seq,
        }
        self.seq += 1
        for k, v in fields.items():
            if k != "kind" and v is not None:
                ev[k] = fit(v) if isinstance(v, str) else v
        return ev


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), allow_nan=False).encode()
