"""idle_churn: a client's connection to a broker is closed after sitting idle until an idle
timer fires, and the same client re-opens one, again and again (a ~9-10 minute cadence with Java
defaults). Each cycle costs a TCP, TLS and SASL handshake.

What counts as a cycle (the agent pairs closes and re-opens, ``reopen_idle_s``):
- the re-open comes from the same process (broker side: the same peer address) that lost the
  connection: a redeployed application is a new process, not a cycle;
- the close followed at least ``idle_churn_min_idle_s`` of idle, and the broker was not dropping
  busy connections at that moment (``reopen_after_drop``: a restart or failure, counted apart);
- the cycles' idle times agree: one timer fires at one idle time, so the cycles counted are the
  largest set whose idle times fit in one band (``idle_churn_timer_tolerance_s`` plus 5%), which
  leaves out closes at whatever idle a restart or a network fault happened to find.

Cycles span many aggregate windows, so this detector reads the series' earlier windows
(``history``), which the job keeps with its state.
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding
from streaming.schema.times import epoch

KIND = "idle_churn"
# Evidence whose doubling or halving is news (docs/findings.md, "When a record is written").
HEADLINE = ("cycles",)
# Connections one client holds to one broker at most (data, group coordinator, a bootstrap
# leftover): a peer address with more is several clients behind one address.
CLIENT_MAX_CONNECTIONS_PER_BROKER = 3
TIMER_BAND_FRACTION = 0.05


def timer_cycles(
    windows: Sequence[Aggregate], cfg: DetectorConfig
) -> tuple[int, float | None, float | None]:
    """The largest number of re-opens whose idle-at-close ranges fit in one timer band, with
    that band's lowest and highest idle time."""
    spans = [
        (w.reopen_idle_min_s, w.reopen_idle_max_s, w.reopens_after_idle)
        for w in windows
        if w.reopens_after_idle and w.reopen_idle_min_s is not None
    ]
    best: tuple[int, float | None, float | None] = (0, None, None)
    for anchor, _hi, _n in spans:
        top = anchor + cfg.idle_churn_timer_tolerance_s + TIMER_BAND_FRACTION * anchor
        fit = [(lo, hi, n) for lo, hi, n in spans if lo >= anchor and (hi or lo) <= top]
        count = sum(n for _lo, _hi, n in fit)
        if count > best[0]:
            best = (count, anchor, max((hi or lo) for lo, hi, _n in fit))
    return best


def _reopens(w: Aggregate) -> bool:
    """Whether a window of a series holds a re-open after an idle close (a timer cycle)."""
    return bool(w.reopens_after_idle)


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when ``idle_churn_min_cycles`` cycles of one timer fall within
    ``idle_churn_window_s`` ending at this window."""
    if not _reopens(agg) and not any(map(_reopens, history)):
        return []  # no cycle at all (most series): the answer without reading the history
    end = epoch(agg.window_end)
    recent = [
        w
        for w in history
        if end - epoch(w.window_end) < cfg.idle_churn_window_s
        and w.same_series(agg)
        and w.window_start < agg.window_start
    ]
    windows = sorted(recent, key=lambda w: w.window_start) + [agg]
    n, low, high = timer_cycles(windows, cfg)
    if n < cfg.idle_churn_min_cycles or low is None or high is None:
        return []
    by_local = sum(w.closes_after_idle_local for w in windows)
    by_peer = sum(w.closes_after_idle_peer for w in windows)
    drops = sum(w.closes_broker_drop for w in windows)
    minutes = cfg.idle_churn_window_s / 60
    idle = f"~{low:.0f} s" if high - low < 1 else f"{low:.0f}-{high:.0f} s"
    who = agg.app if agg.side == "client" else f"client {agg.peer_host}"
    summary = (
        f"{who} on {agg.host} had its connection to broker {agg.broker} closed after {idle} "
        f"idle and re-opened {n} times in {minutes:.0f} min."
    )
    established = agg.sockets.get("ESTABLISHED", 0)
    shared = agg.side == "broker" and established > CLIENT_MAX_CONNECTIONS_PER_BROKER
    if shared:
        summary += (
            f" That address holds {established} connections to the broker, more than one "
            "client needs: several clients share it (a NAT gateway or a Kubernetes node's "
            "address), so these cycles may belong to different clients."
        )
    if drops:
        summary += f" {drops} close(s) by a restarting or failing broker are not counted."
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
    if shared:
        advice += (
            " Several clients share this address: confirm the cycles with the agent on the "
            "client hosts before changing anything."
        )
    evidence = {
        "cycles": n,
        "window_s": cfg.idle_churn_window_s,
        "idle_at_close_min_s": low,
        "idle_at_close_max_s": high,
        "closes_after_idle_local": by_local,
        "closes_after_idle_peer": by_peer,
        "closes_broker_drop": drops,
        "opens": sum(w.opens for w in windows),
    }
    return [Finding.for_series(agg, KIND, "warning", summary, advice, evidence)]
