"""Times as the contracts write them: ISO 8601 UTC with milliseconds and a ``Z`` suffix
(``2026-11-21T04:00:00.000Z``), and back to seconds since the epoch.

The one definition for the agent (event times), the job (window bounds), the detectors (window
ends) and the exporter's example messages.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import overload


@overload
def iso(value: None) -> None: ...
@overload
def iso(value: datetime | float) -> str: ...
def iso(value: datetime | float | None) -> str | None:
    """ISO 8601 UTC with milliseconds and a Z suffix (naive datetimes are UTC)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return _iso_epoch(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return _format(value.astimezone(UTC))


def _format(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


@lru_cache(maxsize=65536)
def _iso_epoch(value: float) -> str:
    """Window bounds repeat across a batch's thousands of series: cached."""
    return _format(datetime.fromtimestamp(value, UTC))


_now: tuple[int, str] = (-1, "")


def iso_now() -> str:
    """The current time as ``iso`` writes it. Formatted at most once per millisecond (the job
    stamps every aggregate it publishes), and not through ``iso``'s cache, which is there for
    window bounds and would fill with times used once."""
    global _now
    ms = time.time_ns() // 1_000_000
    if ms != _now[0]:
        _now = (ms, _format(datetime.fromtimestamp(ms / 1000, UTC)))
    return _now[1]


@lru_cache(maxsize=65536)
def epoch(text: str) -> float:
    """Seconds since the epoch of an ISO 8601 time (``Z`` or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
