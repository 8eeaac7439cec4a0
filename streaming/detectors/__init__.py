"""Detectors: one pure module per finding kind.

Each module exposes ``KIND`` and ``detect(agg, cfg, history) -> list[Finding]``: ``agg`` is the
series' newest window, ``history`` its earlier windows (oldest first, same series), ``cfg`` the
thresholds. No Spark, no I/O: the job calls them on small, already aggregated records.
"""

from __future__ import annotations

import math
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
from streaming.detectors.libraries import known_issue_advice, library_advice
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding

Detector = Callable[[Aggregate, DetectorConfig, Sequence[Aggregate]], list[Finding]]

_MODULES = (
    close_wait_buildup,
    idle_churn,
    duplicate_connections,
    idle_zombie,
    connection_storm,
    time_wait_pileup,
)
DETECTORS: dict[str, Detector] = {m.KIND: m.detect for m in _MODULES}
# Per kind, the evidence whose doubling or halving is worth a new record (``changes``).
HEADLINES: dict[str, tuple[str, ...]] = {m.KIND: m.HEADLINE for m in _MODULES}
# Of those, the rates over the series' last window of event time (``changes``).
RATE_HEADLINES: dict[str, tuple[str, ...]] = {m.KIND: getattr(m, "RATES", ()) for m in _MODULES}
# Kinds whose detector words the library's advice into its recommendation itself.
_OWN_LIBRARY_ADVICE = frozenset(
    m.KIND for m in _MODULES if getattr(m, "PLACES_LIBRARY_ADVICE", False)
)

# Kinds whose findings wait longer than ``resolve_after_windows`` before resolving: seconds.
RESOLVE_AFTER_S: dict[str, Callable[[DetectorConfig], float]] = {
    duplicate_connections.KIND: lambda cfg: cfg.duplicate_resolve_after_s,
}


def resolve_windows(kind: str, cfg: DetectorConfig) -> int:
    """Consecutive windows without holding after which a finding of ``kind`` resolves."""
    n = cfg.resolve_after_windows
    extra = RESOLVE_AFTER_S.get(kind)
    if extra is not None:
        n = max(n, math.ceil(extra(cfg) / cfg.window_s))
    return n


def hysteresis_windows(cfg: DetectorConfig) -> int:
    """How many windows back hysteresis looks, for any kind."""
    return max(cfg.fire_after_windows, *(resolve_windows(k, cfg) for k in DETECTORS))


def fold(found: dict[str, Finding], firing: Callable[[str], bool]) -> dict[str, Finding]:
    """One cause, one finding: an idle_churn that holds while duplicate_connections holds or
    is firing (``firing(kind)``) for the same series is the extra client's churn, folded into
    the duplicate_connections finding (or dropped while that one is quiet but still firing)."""
    churn = found.get(idle_churn.KIND)
    dup = duplicate_connections.KIND
    if churn is None or (dup not in found and not firing(dup)):
        return found
    del found[idle_churn.KIND]
    if dup in found:
        duplicate_connections.take_churn(found[dup], churn)
    return found


def detect_all(
    agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()
) -> dict[str, Finding]:
    """What holds for one window of one series: kind -> finding, in ``DETECTORS`` order. A
    detector returning several findings for one window keeps its last. ``history`` is the
    series' windows before this one (the job keeps them with its checkpoint). A finding about
    a client whose library the agent identified carries that library's advice: where its
    detector placed it, else at the end, after a known bug of its release, which leads."""
    found: dict[str, Finding] = {}
    for kind, detect in DETECTORS.items():
        for f in detect(agg, cfg, history):
            if kind not in _OWN_LIBRARY_ADVICE:
                # A known bug of the client's release may show as one kind of storm only.
                why = (
                    connection_storm.cause(agg, cfg, history)
                    if kind == connection_storm.KIND
                    else None
                )
                extra = library_advice(
                    kind,
                    f.side,
                    f.client_library,
                    f.client_version,
                    f.client_library_evidence,
                    known=False,
                )
                # A known bug of the proven release is the likeliest cause and has a fix: first.
                bugs = (
                    known_issue_advice(
                        kind,
                        f.client_library,
                        f.client_version,
                        f.client_library_evidence,
                        storm_cause=why,
                    )
                    if f.side == "client"
                    else ""
                )
                f.recommendation = " ".join(t for t in (bugs, f.recommendation, extra) if t)
            found[kind] = f
    return found
