"""time_wait_pileup: TIME_WAIT sockets toward one broker above a threshold.

TIME_WAIT stays on whichever side closed first, for 60 s on Linux: many of them mean that side
closes connections at a high rate.
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.advice import RAISE_BACKOFF
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding

KIND = "time_wait_pileup"
# Evidence whose doubling or halving is news (docs/findings.md, "When a record is written").
HEADLINE = ("time_wait_count",)


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when ``time_wait_count`` reaches ``time_wait_warning_count``."""
    count = agg.time_wait_count
    if count < cfg.time_wait_warning_count:
        return []
    severity = "critical" if count >= cfg.time_wait_critical_count else "warning"
    if agg.side == "client":
        summary = (
            f"{agg.host} has {count} TIME_WAIT sockets from {agg.app} toward broker "
            f"{agg.broker}: the client closes connections at a high rate."
        )
        advice = (
            "The client side closes first, again and again: look for a producer or consumer "
            "created per request instead of shared, for idle-timeout churn (client "
            "connections.max.idle.ms shorter than its request interval) or a reconnect loop "
            f"({RAISE_BACKOFF}); reuse one client per process."
        )
    else:
        summary = (
            f"Broker {agg.broker} on {agg.host} has {count} TIME_WAIT sockets toward "
            f"{agg.peer_host}: the broker closes that client's connections at a high rate."
        )
        advice = (
            "The broker closes first: check the broker's connections.max.idle.ms against the "
            "client's request interval, failed authentications and quota or "
            "max.connections rejections in the broker log for this client."
        )
    evidence = {
        "time_wait_count": count,
        "closes_local": agg.closes_local,
        "closes_peer": agg.closes_peer,
        "opens": agg.opens,
        "warning_count": cfg.time_wait_warning_count,
    }
    return [Finding.for_series(agg, KIND, severity, summary, advice, evidence)]
