"""When a firing finding is worth another record: the publication rule of ``connmon.findings``.

A firing finding is published when it fires, and again only when something a reader acts on
changed, or as a heartbeat: its severity, the client library named, the advice, the shape of
its evidence (a storm's cause), a headline number doubling or halving since the last record
(``HEADLINES``: a CLOSE_WAIT count going 1, 2, 4, 8, its oldest age 30 s, 60 s, 120 s; a rate
only against a record whose span it does not share, ``RATE_HEADLINES``), or
``finding_heartbeat_s`` of event time since the last record. Pure: the tracker calls it.
"""

from __future__ import annotations

from typing import Any

from streaming.detectors import HEADLINES, RATE_HEADLINES
from streaming.schema.findings import Finding
from streaming.schema.times import epoch


def doubled_or_halved(last: Any, new: Any) -> bool:
    """``new`` at least twice or at most half ``last`` (from or to zero counts; null counts
    as different from a number)."""
    if last is None or new is None:
        return (last is None) != (new is None)
    if new == last:
        return False
    return new >= 2 * last if new > last else 2 * new <= last


def _spans_apart(last: Finding, new: Finding) -> bool:
    """A rate is taken over the window of event time before its record (up to the window
    before the record's own): ``new``'s span no longer overlaps ``last``'s once ``new`` is two
    windows later. Before that the two rates share their events, and a rate that climbs while
    its span fills with a fault that just began is no news."""
    width = epoch(last.window_end) - epoch(last.window_start)
    return epoch(new.window_start) - epoch(last.window_start) >= 2 * width


def _library(f: Finding) -> tuple[str | None, ...]:
    return (f.client_library, f.client_version, f.client_library_evidence)


def change(last: Finding, new: Finding, heartbeat_s: float) -> str | None:
    """Why ``new`` should be published after ``last`` (the last published record of the same
    key), or None. One of ``CHANGES`` from ``streaming.schema.findings``."""
    if new.severity != last.severity:
        return "severity"
    if _library(new) != _library(last):
        return "library"
    if new.recommendation != last.recommendation:
        return "advice"
    rates = RATE_HEADLINES.get(new.kind, ())
    apart = _spans_apart(last, new)
    if new.evidence.keys() != last.evidence.keys() or any(
        doubled_or_halved(last.evidence.get(k), new.evidence.get(k))
        for k in HEADLINES.get(new.kind, ())
        if apart or k not in rates
    ):
        return "evidence"
    if epoch(new.window_end) - epoch(last.window_end) >= heartbeat_s:
        return "heartbeat"
    return None
