"""connection_storm: connection attempts or short-lived connections per minute far above normal.

A broken broker, a failed authentication or a closed listener with short reconnect backoffs
makes a client reconnect many times a second: SYN_SENT sockets, short lifetimes, and refused or
timed-out connects that leave no socket at all (the host's TCP AttemptFails counter).
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.advice import RAISE_BACKOFF
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import HOST_SERIES, Aggregate
from streaming.schema.findings import Finding

KIND = "connection_storm"


def rates(agg: Aggregate) -> dict[str, float | None]:
    """Per-minute rates of the window (counts scaled by its length)."""
    per_min = 60.0 / agg.window_s if agg.window_s > 0 else 1.0
    return {
        "opens_per_min": agg.opens * per_min,
        "short_lived_per_min": agg.short_lived * per_min,
        "host_attempt_fails_per_min": agg.host_attempt_fails_per_min,
    }


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when any of opens/min, short-lived/min, SYN_SENT or the host's failed connects
    per minute reaches its threshold; critical at ``storm_critical_factor`` times it."""
    r = rates(agg)
    host_level = agg.app == HOST_SERIES
    if host_level:
        # The host's failed-connect counter belongs to no socket, so it only ever speaks for the
        # host-level series; attached to every client x broker pair it would flag healthy ones.
        checks = {
            "host_attempt_fails_per_min": (
                r["host_attempt_fails_per_min"],
                cfg.storm_host_attempt_fails_per_min,
            )
        }
    else:
        checks = {
            "opens_per_min": (r["opens_per_min"], cfg.storm_opens_per_min),
            "short_lived_per_min": (r["short_lived_per_min"], cfg.storm_short_lived_per_min),
            "syn_sent_count": (float(agg.syn_sent_count), float(cfg.storm_syn_sent_count)),
        }
    hit = {name: v / t for name, (v, t) in checks.items() if v is not None and t > 0 and v >= t}
    if not hit:
        return []
    severity = "critical" if max(hit.values()) >= cfg.storm_critical_factor else "warning"
    if host_level:
        summary = (
            f"Connects from {agg.host} fail {r['host_attempt_fails_per_min']:.0f} times/min "
            "(TCP AttemptFails): a reconnect storm against a stopped or unreachable broker."
        )
        advice = (
            "Refused or timed-out connects leave no socket to attribute: find the client whose "
            "log repeats connection failures (a stopped broker, a wrong listener or "
            f"bootstrap.servers entry), and on that client {RAISE_BACKOFF}."
        )
    elif agg.side == "client":
        summary = (
            f"{agg.app} on {agg.host} opens {r['opens_per_min']:.0f} connections/min to broker "
            f"{agg.broker} ({r['short_lived_per_min']:.0f}/min short-lived, "
            f"{agg.syn_sent_count} in SYN_SENT): a reconnect storm."
        )
        advice = (
            "The client reconnects without backing off: find why connections fail (broker down "
            "or unreachable, wrong listener, SASL/SSL authentication errors in the client log) "
            f"and {RAISE_BACKOFF}; with metadata.recovery.strategy=rebootstrap "
            "(Kafka 4.0 default) check that bootstrap.servers are reachable."
        )
    else:
        summary = (
            f"Broker {agg.broker} on {agg.host} accepts {r['opens_per_min']:.0f} connections/min "
            f"from {agg.peer_host} ({r['short_lived_per_min']:.0f}/min short-lived): a "
            "reconnect storm."
        )
        advice = (
            f"Clients on {agg.peer_host} reconnect in a loop: check the broker log for "
            "authentication failures, max.connections(.per.ip) rejections or a wrong listener, "
            f"and have the clients {RAISE_BACKOFF}."
        )
    evidence = {
        **{k: v for k, v in r.items()},
        "syn_sent_count": agg.syn_sent_count,
        "lifetime_avg_s": agg.lifetime_avg_s,
        # Which thresholds were crossed, as multiples of the threshold (evidence is numbers).
        **{f"{name}_x_threshold": round(ratio, 2) for name, ratio in sorted(hit.items())},
    }
    return [Finding.for_series(agg, KIND, severity, summary, advice, evidence)]
