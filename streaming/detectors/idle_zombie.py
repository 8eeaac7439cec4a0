"""idle_zombie: ESTABLISHED sockets idle far longer than any idle timeout.

Only possible when idle expiry is disabled on both sides (``connections.max.idle.ms=-1`` on the
broker, -1 or librdkafka's default 0 on the client); SO_KEEPALIVE does not reap idle peers.
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.advice import paused, paused_note
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding

KIND = "idle_zombie"
# Evidence whose doubling or halving is news (docs/findings.md, "When a record is written").
HEADLINE = ("max_idle_s", "established")


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when the idlest ESTABLISHED socket of the series is idle >= ``zombie_idle_s``."""
    idle = agg.max_idle_s
    if idle is None or idle < cfg.zombie_idle_s or agg.sockets.get("ESTABLISHED", 0) < 1:
        return []
    toward = f"broker {agg.broker}" if agg.side == "client" else f"client {agg.peer_host}"
    summary = (
        f"{agg.app} on {agg.host} keeps an ESTABLISHED connection to {toward} that has been "
        f"idle for {idle:.0f} s, longer than any idle timeout."
    )
    summary += paused_note(agg)
    advice = (
        "Idle expiry is off on both sides: set the broker's connections.max.idle.ms back to a "
        f"finite value (default {cfg.broker_idle_expiry_s * 1000:.0f}) or set the client's "
        f"connections.max.idle.ms (Java default {cfg.client_idle_expiry_s * 1000:.0f}; "
        "librdkafka defaults to 0 = never) so idle connections are closed; SO_KEEPALIVE only "
        "detects dead peers, not idle ones."
    )
    if agg.paused_processes:
        advice = f"{paused(agg)} {advice}"
    evidence = {
        "max_idle_s": idle,
        "established": agg.sockets.get("ESTABLISHED", 0),
        "zombie_idle_s": cfg.zombie_idle_s,
        **({"paused_processes": agg.paused_processes} if agg.paused_processes else {}),
    }
    return [Finding.for_series(agg, KIND, "warning", summary, advice, evidence)]
