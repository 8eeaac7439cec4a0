"""Detectors: one pure module per finding kind.

Each module exposes ``KIND`` and ``detect(agg, cfg, history) -> list[Finding]``: ``agg`` is the
series' newest window, ``history`` its earlier windows (oldest first, same series), ``cfg`` the
thresholds. No Spark, no I/O: the job calls them on small, already aggregated records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from streaming.detectors import (
    close_wait_buildup,
    connection_storm,
    duplicate_connections,
    idle_churn,
    idle_zombie,
    time_wait_pileup,
)
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding

Detector = Callable[[Aggregate, DetectorConfig, Sequence[Aggregate]], list[Finding]]

DETECTORS: dict[str, Detector] = {
    m.KIND: m.detect
    for m in (
        close_wait_buildup,
        idle_churn,
        duplicate_connections,
        idle_zombie,
        connection_storm,
        time_wait_pileup,
    )
}


def detect_all(
    agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()
) -> list[Finding]:
    """Every finding for one window of one series, in a fixed kind order."""
    found: list[Finding] = []
    for detect in DETECTORS.values():
        found.extend(detect(agg, cfg, history))
    return found
