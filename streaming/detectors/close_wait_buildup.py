"""close_wait_buildup: sockets stuck in CLOSE_WAIT beyond a grace period.

A healthy client leaves CLOSE_WAIT within milliseconds of the broker's FIN; sockets that stay
mean the application never calls close(): a library leak or a stalled network thread
(docs/kafka-connections.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from streaming.detectors.advice import paused, paused_note
from streaming.detectors.config import DetectorConfig
from streaming.detectors.libraries import library_advice
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding
from streaming.schema.times import epoch

KIND = "close_wait_buildup"
# Evidence whose doubling or halving is news (docs/findings.md, "When a record is written").
HEADLINE = ("close_wait_count", "close_wait_oldest_age_s")
# The identified library's sentence is placed by this detector (its cause comes first).
PLACES_LIBRARY_ADVICE = True

_CLIENT_CAUSE = "The broker closed these connections and the client process never closed its end"
_UNKNOWN_LIBRARY_CAUSE = (
    ": a known leak in Sarama and kafka-rust (upgrade the library), or a classic consumer that "
    "stopped calling poll() so its network thread never runs (check max.poll.interval.ms and "
    "stuck processing)"
)
_CLIENT_REMEDY = (
    "Restarting the process releases the sockets. If the broker closes them for idleness, "
    "keep the client's connections.max.idle.ms below the broker's connections.max.idle.ms "
    "({broker_idle:.0f} ms) so the client closes first."
)
_BROKER_ADVICE = (
    "Clients on {peer} hung up and the broker has not closed its end: check the broker's "
    "network threads (num.network.threads, request queue) and clients that vanish during "
    "group churn; a broker restart releases the sockets."
)


def _per_second(
    agg: Aggregate,
    history: Sequence[Aggregate],
    current: float,
    value: Callable[[Aggregate], float | None],
    span_s: float,
) -> float | None:
    """Least-squares slope over the series' earlier windows of the last ``span_s`` (``value``
    at each window's end; None leaves the window out) and ``current`` at the newest event of
    ``agg``'s window. None below three points or all at one time."""
    end = epoch(agg.window_end)
    points = [
        (epoch(w.window_end), v)
        for w in history
        if (v := value(w)) is not None and end - epoch(w.window_end) < span_s and w.same_series(agg)
    ]
    points.append((epoch(agg.window_start) + agg.covered_s(), current))
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mc = sum(c for _, c in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mt) * (c - mc) for t, c in points) / var


def trend(agg: Aggregate, history: Sequence[Aggregate], span_s: float = 900.0) -> float | None:
    """CLOSE_WAIT sockets per second over the series' windows of the last ``span_s`` (least
    squares over each window's newest count, the current one at its newest event; the in-window
    slope cannot see a leak slower than one window). Only earlier windows with CLOSE_WAIT
    count: the job's history keeps just those, and the result must not depend on how windows
    were split into micro-batches."""
    return _per_second(
        agg,
        history,
        float(agg.close_wait_count),
        lambda w: float(w.close_wait_count) if w.close_wait_count > 0 else None,
        span_s,
    )


def fd_trend(agg: Aggregate, history: Sequence[Aggregate], span_s: float = 900.0) -> float | None:
    """File descriptors per second the series' process opens, over the same windows as
    ``trend``: it sees every descriptor the process leaks (toward other brokers, files), the
    CLOSE_WAIT slope only this series' sockets."""
    if agg.fds_open is None:
        return None
    return _per_second(
        agg,
        history,
        float(agg.fds_open),
        lambda w: None if w.fds_open is None else float(w.fds_open),
        span_s,
    )


def fd_exhaustion_in_s(
    agg: Aggregate, history: Sequence[Aggregate], growth: float | None
) -> float | None:
    """Seconds until the process's open descriptors reach its limit, from its latest summary,
    at the steeper of ``growth`` (the CLOSE_WAIT slope) and ``fd_trend``; 0 at the limit
    already, growing or not; None when either number is unknown or nothing grows."""
    if agg.fds_open is None or not agg.fds_limit:
        return None
    if agg.fds_open >= agg.fds_limit:
        return 0.0
    rate = max((v for v in (growth, fd_trend(agg, history)) if v is not None), default=None)
    if rate is None or rate <= 0:
        return None
    return max(agg.fds_limit - agg.fds_open, 0) / rate


def within(seconds: float) -> str:
    """A deadline in words, rounded up to 1, 2, 4, 8, 15 or 30 minutes, or whole hours: the
    sentence changes only when the time left halves, not at every evaluation."""
    minutes = seconds / 60.0
    for step in (1, 2, 4, 8, 15, 30):
        if minutes <= step:
            return "within a minute" if step == 1 else f"within {step} minutes"
    hours = math.ceil(minutes / 60.0)
    return "within an hour" if hours == 1 else f"within {hours} hours"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def slope(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate]) -> float | None:
    """How fast CLOSE_WAIT grows: the larger of the slope within the window and the ``trend``.
    The window's own slope counts once its summaries span the time in which the critical slope
    adds two sockets: over a shorter span one socket more or less is a slope above it."""
    own = agg.close_wait_slope_per_s
    trusted = (
        2.0 / cfg.close_wait_critical_slope_per_s if cfg.close_wait_critical_slope_per_s else 0
    )
    if own is not None and min(agg.covered_s(), agg.close_wait_oldest_age_s or 0.0) < trusted:
        own = None
    return max((v for v in (own, trend(agg, history)) if v is not None), default=None)


def _client_advice(agg: Aggregate, cfg: DetectorConfig) -> str:
    """The cause first: a paused process, else the identified library's own (its leak, its
    threads), else the usual suspects of any library; then what releases the sockets."""
    pause = paused(agg)
    if pause:
        return pause
    remedy = _CLIENT_REMEDY.format(broker_idle=cfg.broker_idle_expiry_s * 1000)
    own = library_advice(
        KIND, agg.side, agg.client_library, agg.client_version, agg.client_library_evidence
    )
    if own:
        return f"{_CLIENT_CAUSE}. {own} {remedy}"
    return f"{_CLIENT_CAUSE}{_UNKNOWN_LIBRARY_CAUSE}. {remedy}"


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when at least ``close_wait_warning_count`` sockets are in CLOSE_WAIT and the
    oldest has been there longer than ``close_wait_grace_s``."""
    count = agg.close_wait_count
    oldest = agg.close_wait_oldest_age_s or 0.0
    if count < cfg.close_wait_warning_count or oldest < cfg.close_wait_grace_s:
        return []
    growth = slope(agg, cfg, history)
    rising = growth is not None and growth >= cfg.close_wait_critical_slope_per_s
    left = fd_exhaustion_in_s(agg, history, growth)
    exhausting = left is not None and left < cfg.fd_exhaustion_critical_s
    critical = count >= cfg.close_wait_critical_count or rising or exhausting
    if agg.side == "client":
        who = f"{agg.app} on {agg.host}"
    else:
        who = f"broker {agg.broker} ({agg.host})"
    toward = f"broker {agg.broker}" if agg.side == "client" else f"client {agg.peer_host}"
    summary = (
        f"{who} holds {count} socket(s) in CLOSE_WAIT toward {toward}, the oldest for "
        f"{oldest:.0f} s" + (", and the count is rising." if rising else ".")
    )
    if agg.fds_open is not None and agg.fds_limit:
        summary += f" It has {agg.fds_open} of {agg.fds_limit} file descriptors open"
        if left == 0:
            summary += ": none left."
        elif left is not None:
            summary += f" and runs out in about {_duration(left)} at this rate."
        else:
            summary += "."
    if agg.side == "client":
        advice = _client_advice(agg, cfg)
    else:
        advice = paused(agg) or _BROKER_ADVICE.format(peer=agg.peer_host)
    if exhausting:
        assert left is not None
        process = agg.app if agg.side == "client" else f"broker {agg.broker}"
        if left == 0:
            lead = (
                f"Act now: {process} on {agg.host} has no file descriptor left (limit "
                f"{agg.fds_limit}) and fails every new connection and file with EMFILE. "
            )
        else:
            lead = (
                f"Act {within(left)}: {process} on {agg.host} runs out of file descriptors (limit "
                f"{agg.fds_limit}) and then fails every new connection and file with EMFILE. "
            )
        advice = lead + advice
    summary += paused_note(agg)
    evidence = {
        "close_wait_count": count,
        "close_wait_oldest_age_s": oldest,
        "close_wait_slope_per_s": growth,
        "grace_s": cfg.close_wait_grace_s,
        "closes_peer": agg.closes_peer,
        **({"paused_processes": agg.paused_processes} if agg.paused_processes else {}),
    }
    if agg.fds_open is not None and agg.fds_limit:
        evidence["fds_open"] = agg.fds_open
        evidence["fds_limit"] = agg.fds_limit
        evidence["fd_exhaustion_in_s"] = None if left is None else round(left, 1)
    return [
        Finding.for_series(
            agg, KIND, "critical" if critical else "warning", summary, advice, evidence
        )
    ]
