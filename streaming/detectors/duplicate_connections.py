"""duplicate_connections: one client process holds more ESTABLISHED sockets to one broker than it
needs, and the extra one is idle.

Expected, not findings (docs/kafka-connections.md): a consumer's separate group-coordinator
connection (it heartbeats every few seconds, so it is never idle for long). Not expected: a Java
client's leftover bootstrap connection, kept until the client's idle expiry closes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding

KIND = "duplicate_connections"


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when a process has an extra ESTABLISHED socket idle >= ``duplicate_idle_s``.
    Broker-side sockets all belong to the broker process, so only the client side applies."""
    idle = agg.dup_max_idle_s
    if agg.side != "client" or agg.dup_processes < 1 or idle is None:
        return []
    if idle < cfg.duplicate_idle_s:
        return []
    # Below the client's own idle expiry this is the bootstrap leftover that expiry will reap;
    # beyond it, nothing is reaping the extra socket.
    reaped = idle < cfg.client_idle_expiry_s
    conn = f" ({agg.dup_conn})" if agg.dup_conn else ""
    summary = (
        f"{agg.dup_processes} process(es) of {agg.app} on {agg.host} hold an extra ESTABLISHED "
        f"connection to broker {agg.broker}{conn}, idle for {idle:.0f} s."
    )
    if reaped:
        advice = (
            "Most likely the Java client's bootstrap connection (pseudo node id -1), opened "
            "before metadata and not reused: the client's connections.max.idle.ms "
            f"({cfg.client_idle_expiry_s * 1000:.0f} ms by default) closes it; lower it if "
            "many short-lived clients make these pile up, or use a client that closes "
            "bootstrap connections (librdkafka >= 2.10)."
        )
    else:
        advice = (
            "The extra connection outlives the client's idle expiry: the application creates "
            "more than one client (producer/consumer/admin) per process toward this broker, or "
            "idle expiry is disabled (connections.max.idle.ms=-1); share one client per process "
            "and keep connections.max.idle.ms finite."
        )
    evidence = {
        "dup_processes": agg.dup_processes,
        "dup_max_idle_s": idle,
        "established": agg.sockets.get("ESTABLISHED", 0),
        "duplicate_idle_s": cfg.duplicate_idle_s,
    }
    severity = "info" if reaped else "warning"
    return [Finding.for_series(agg, KIND, severity, summary, advice, evidence)]
