"""The publication rule of firing findings (``streaming.detectors.changes``), per kind."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from streaming.detectors import DETECTORS, HEADLINES, RATE_HEADLINES
from streaming.detectors.changes import change, doubled_or_halved
from streaming.schema.findings import Finding

HEARTBEAT_S = 300.0


def finding(kind: str = "close_wait_buildup", minute: int = 0, **evidence: Any) -> Finding:
    return Finding(
        kind=kind,
        severity="warning",
        side="client",
        host="web-1",
        app="orders",
        broker="2",
        window_start=f"2026-11-21T05:{minute:02d}:00.000Z",
        window_end=f"2026-11-21T05:{minute + 1:02d}:00.000Z",
        summary="s",
        recommendation="r",
        evidence=evidence or {"close_wait_count": 4, "close_wait_oldest_age_s": 100.0},
    )


@pytest.mark.parametrize(
    ("last", "new", "news"),
    [
        (4, 4, False),
        (4, 7, False),
        (4, 8, True),
        (4, 3, False),
        (4, 2, True),
        (0, 1, True),
        (1, 0, True),
        (0, 0, False),
        (0.5, 0.9, False),
        (None, 1, True),
        (1, None, True),
        (None, None, False),
    ],
)
def test_doubling_or_halving_is_news(last, new, news) -> None:
    assert doubled_or_halved(last, new) is news


def test_every_kind_names_headline_evidence() -> None:
    assert set(HEADLINES) == set(DETECTORS)
    assert all(HEADLINES[k] for k in DETECTORS)


@pytest.mark.parametrize("kind", sorted(DETECTORS))
def test_each_kinds_headline_doubling_is_published(kind: str) -> None:
    evidence = {name: 10 for name in HEADLINES[kind]} | {"other": 1}
    last = finding(kind, **evidence)
    for name in HEADLINES[kind]:
        # A rate is compared once its span no longer shares events with the record's.
        minute = 2 if name in RATE_HEADLINES[kind] else 0
        new = finding(kind, minute, **(evidence | {name: 20}))
        assert change(last, new, HEARTBEAT_S) == "evidence", name
        assert change(last, finding(kind, minute, **(evidence | {name: 19})), HEARTBEAT_S) is None
    # Evidence outside the headline moves freely.
    assert change(last, finding(kind, **(evidence | {"other": 1000})), HEARTBEAT_S) is None


def test_a_rate_is_compared_only_with_a_record_whose_span_it_does_not_share() -> None:
    """A storm's rate covers the window of event time before the record: one and two minutes
    after the last record its span still holds some of the same connections."""
    assert RATE_HEADLINES["connection_storm"]
    assert "syn_sent_count" not in RATE_HEADLINES["connection_storm"]  # a count of the moment
    last = finding("connection_storm", 0, opens_per_min=40.0, syn_sent_count=0)
    climbed = {"opens_per_min": 150.0, "syn_sent_count": 0}
    assert change(last, finding("connection_storm", 0, **climbed), HEARTBEAT_S) is None
    assert change(last, finding("connection_storm", 1, **climbed), HEARTBEAT_S) is None
    assert change(last, finding("connection_storm", 2, **climbed), HEARTBEAT_S) == "evidence"
    # Severity is news at once, whatever the spans.
    worse = finding("connection_storm", 0, **climbed)
    worse.severity = "critical"
    assert change(last, worse, HEARTBEAT_S) == "severity"
    # A count of the moment is compared at once.
    syn = finding("connection_storm", 0, opens_per_min=40.0, syn_sent_count=12)
    assert change(last, syn, HEARTBEAT_S) == "evidence"
    # Kinds without rates compare every headline at once.
    assert RATE_HEADLINES["close_wait_buildup"] == ()


def test_what_a_reader_acts_on_is_published_in_order() -> None:
    last = finding()
    new = copy.copy(last)
    assert change(last, new, HEARTBEAT_S) is None
    new.severity = "critical"
    new.client_library = "java"
    assert change(last, new, HEARTBEAT_S) == "severity"
    new.severity = last.severity
    assert change(last, new, HEARTBEAT_S) == "library"
    new.client_library = None
    new.recommendation = "another cause"
    assert change(last, new, HEARTBEAT_S) == "advice"
    new.recommendation = last.recommendation
    new.evidence = {**last.evidence, "x_threshold": 2.0}  # another cause of a storm
    assert change(last, new, HEARTBEAT_S) == "evidence"


def test_a_heartbeat_follows_after_the_interval_of_event_time() -> None:
    last = finding(minute=0)
    assert change(last, finding(minute=4), HEARTBEAT_S) is None
    assert change(last, finding(minute=5), HEARTBEAT_S) == "heartbeat"
