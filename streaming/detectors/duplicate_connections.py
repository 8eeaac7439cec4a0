"""duplicate_connections: a client process holds an extra ESTABLISHED connection to one broker
that it uses only now and then: it runs more than one Kafka client toward that broker.

What an extra connection can be, and what connmon makes of it:

- a consumer's group-coordinator connection next to its fetch connection: heartbeats keep it
  busy, so it is never idle for ``duplicate_idle_s``: no finding;
- a Java client's bootstrap connection (opened before the first metadata, never used again,
  closed by the client's idle expiry): unused since its first seconds. Expected behaviour,
  counted as ``dup_unused_processes`` (a metric and a dashboard panel), no finding;
- a second client in the process (a producer and a consumer, one client per component, a client
  per request that is kept): used after opening, then idle while the process's busiest
  connection to the broker is active: the finding;
- a library that splits one client's requests over several connections per broker (franz-go
  up to five, KafkaJS two, see ``libraries.connections_per_client``): a process holding no
  more than that is one client, whatever their idle times: no finding;
- one of Kafka's own processes (``process_role``): a broker's replica fetchers
  (``num.replica.fetchers`` per broker pair) next to its transaction-marker and
  partition-verification channels, a Connect worker's group, config, offset and status clients
  and a client or two per task, MirrorMaker's per flow, a Streams thread's consumer, producer,
  restore consumer and admin client: several clients per process by design: no finding;
- every connection of the process to the broker idle (the process stalled, or its connections
  leak): nothing here tells extras apart; close_wait_buildup and idle_zombie speak for it, and
  CLOSE_WAIT toward the broker defers to close_wait_buildup.

A rarely used client's connection is idle below the threshold just after each use, and its
idle expiry reaps it between uses: the finding resolves only after
``duplicate_resolve_after_s`` without holding, so it does not flap.

That reaping and re-opening is idle churn (idle_churn) with the same cause. While this finding
holds or fires, a churn of its series is that extra client's (the busy connection is never
idle long enough to be reaped), so it is reported once, here (``take_churn``).
"""

from __future__ import annotations

from collections.abc import Sequence

from streaming.detectors.config import DetectorConfig
from streaming.detectors.libraries import connections_per_client
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding

KIND = "duplicate_connections"
# Evidence whose doubling or halving is news (docs/findings.md, "When a record is written").
HEADLINE = ("dup_processes", "dup_unused_processes")


def detect(agg: Aggregate, cfg: DetectorConfig, history: Sequence[Aggregate] = ()) -> list[Finding]:
    """A finding when a process's used extra connection is idle >= ``duplicate_idle_s`` while
    its busiest connection to the broker is not. Broker-side sockets all belong to the broker
    process, so only the client side applies."""
    idle, active = agg.dup_used_max_idle_s, agg.dup_used_active_idle_s
    if agg.side != "client" or idle is None or idle < cfg.duplicate_idle_s:
        return []
    if active is None or active >= cfg.duplicate_idle_s:
        return []  # the whole process is quiet toward this broker: stalled or leaking
    if agg.close_wait_count > 0:
        return []  # connections the application does not close: close_wait_buildup
    if agg.process_role is not None:
        return []  # Kafka's own process: several clients by design
    per_client = connections_per_client(agg.client_library, agg.client_version)
    if per_client > 1 and (agg.established_max_per_process or 0) <= per_client:
        return []  # one client of this library splits its requests over that many sockets
    conn = f" ({agg.dup_conn})" if agg.dup_conn and agg.dup_max_idle_s == idle else ""
    summary = (
        f"A process of {agg.app} on {agg.host} runs more than one Kafka client toward broker "
        f"{agg.broker}: besides its busy connection it holds one{conn} that carried data and "
        f"is now idle for {idle:.0f} s."
    )
    advice = (
        "Each client (producer, consumer, admin) opens its own connections, so a process with "
        "several clients holds several connections to a broker, and a rarely used client's "
        "connection is reaped by idle expiry and re-created at its next use (a TCP, TLS and "
        "SASL handshake each time). Share one producer per process (it is thread-safe in the "
        "Java client and librdkafka), close clients the application no longer needs, and "
        "keep clients that are created per request or per task out of hot paths."
    )
    evidence = {
        "dup_processes": agg.dup_processes,
        "dup_used_max_idle_s": idle,
        "dup_used_active_idle_s": active,
        "dup_unused_processes": agg.dup_unused_processes,
        "established": agg.sockets.get("ESTABLISHED", 0),
        "duplicate_idle_s": cfg.duplicate_idle_s,
    }
    return [Finding.for_series(agg, KIND, "info", summary, advice, evidence)]


def take_churn(dup: Finding, churn: Finding) -> None:
    """Fold an idle_churn finding of the same series into ``dup``: the extra client's idle
    connection is what the timer closes and the client re-opens."""
    cycles = churn.evidence.get("cycles")
    dup.evidence["idle_churn_cycles"] = cycles
    dup.summary += (
        f" That client's connection is closed when idle and re-opened ({cycles} times in "
        f"{churn.evidence.get('window_s', 0) / 60:.0f} min)."
    )
    dup.recommendation += f" While the extra client stays: {churn.recommendation}"
