"""idle_churn: a connection closed after being idle near an idle timeout, then re-opened to the
same broker by the same client, again and again (a ~9-10 minute cadence with Java defaults).

Cycles span many aggregate windows, so this detector reads the series' earlier windows
(``history``), which the job keeps with its checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding
from streaming.schema.times import epoch

KIND = "idle_churn"


def cycles(windows: Sequence[Aggregate]) -> int:
    """Idle closes followed by a re-open, over windows in time order. Within one window a
    close is assumed to come before an open (a reconnect follows its close)."""
    pending = done = 0
    for w in windows:
        pending += w.closes_after_idle
        matched = min(pending, w.opens)
        done += matched
        pending -= matched
    return done


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when ``idle_churn_min_cycles`` cycles fall within ``idle_churn_window_s``
    ending at this window."""
    end = epoch(agg.window_end)
    recent = [
        w
        for w in history
        if end - epoch(w.window_end) < cfg.idle_churn_window_s
        and (w.opens or w.closes_after_idle)
        and w.same_series(agg)
        and w.window_start < agg.window_start
    ]
    windows = sorted(recent, key=lambda w: w.window_start) + [agg]
    n = cycles(windows)
    if n < cfg.idle_churn_min_cycles:
        return []
    by_local = sum(w.closes_after_idle_local for w in windows)
    by_peer = sum(w.closes_after_idle_peer for w in windows)
    idle = max((w.idle_at_close_max_s or 0.0 for w in windows), default=0.0)
    minutes = cfg.idle_churn_window_s / 60
    who = agg.app if agg.side == "client" else f"client {agg.peer_host}"
    summary = (
        f"{who} on {agg.host} had its connection to broker {agg.broker} closed after "
        f"~{idle:.0f} s idle and re-opened {n} times in {minutes:.0f} min."
    )
    # Client-side view: local = the client's timer fired; peer = the broker's (or a load
    # balancer's). The broker-side view is the mirror image.
    client_closed = by_local >= by_peer if agg.side == "client" else by_peer > by_local
    if client_closed:
        advice = (
            "The client's own connections.max.idle.ms closes the connection because it talks "
            "to this broker less often than that: raise the client's connections.max.idle.ms "
            "above its request interval (and keep the broker's connections.max.idle.ms, "
            f"default {cfg.broker_idle_expiry_s * 1000:.0f} ms, above it), or accept a TCP, "
            "TLS and SASL handshake per cycle."
        )
    else:
        advice = (
            "The broker's connections.max.idle.ms (or a load balancer that drops idle flows, "
            "e.g. 4 min on Azure) closes the connection first: raise the broker's "
            "connections.max.idle.ms or the load balancer's idle timeout above the client's "
            "request interval, or lower the client's connections.max.idle.ms below it so the "
            "client closes cleanly."
        )
    evidence = {
        "cycles": n,
        "window_s": cfg.idle_churn_window_s,
        "idle_at_close_max_s": idle,
        "closes_after_idle_local": by_local,
        "closes_after_idle_peer": by_peer,
        "opens": sum(w.opens for w in windows),
    }
    return [Finding.for_series(agg, KIND, "warning", summary, advice, evidence)]
