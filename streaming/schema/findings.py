"""``connmon.findings`` value, schema 1 (docs/topics.md, examples in docs/findings.md).

Keyed ``kind|client|cluster|broker`` so a retry after a restart overwrites instead of
duplicating.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from streaming.schema.aggregates import Aggregate, client_id, key_part

SCHEMA_VERSION = 1
KINDS = (
    "close_wait_buildup",
    "idle_churn",
    "duplicate_connections",
    "idle_zombie",
    "connection_storm",
    "time_wait_pileup",
)
SEVERITIES = ("info", "warning", "critical")
STATUSES = ("firing", "resolved")
# Why a record was published (docs/findings.md, "When a record is written").
CHANGES = ("fired", "severity", "library", "advice", "evidence", "heartbeat", "resolved")


def finding_key(kind: str, client: str, cluster: str | None, broker: str) -> str:
    """``kind|client|cluster|broker``; ``client`` is already a ``client_id`` (escaped)."""
    return kind + finding_key_tail(client, cluster, broker)


def finding_key_tail(client: str, cluster: str | None, broker: str) -> str:
    """What follows the kind in a series' finding keys (one per kind, made once per window)."""
    return f"|{client}|{key_part(cluster or '')}|{key_part(broker)}"


def series_of_finding_key(key: str) -> str | None:
    """The ``series_key`` of the series a finding key is about, from the key alone (an
    exporter shard routes a finding without parsing it); None for a key of another shape."""
    parts = key.split("|")
    if len(parts) != 4:
        return None
    _kind, client, cluster, broker = parts
    fields = client.split(":", 3)
    if len(fields) < 3:
        return None
    # side, host and app had their colons escaped too; the series key leaves colons alone.
    out = [f.replace("%3A", ":") for f in fields[:3]] + [cluster, broker]
    if out[0] == "broker":
        out.append(fields[3] if len(fields) == 4 else "")
    return "|".join(out)


@dataclass
class Finding:
    """One detected (or resolved) pathology for one client x broker series."""

    kind: str
    severity: str
    side: str
    host: str
    app: str
    broker: str
    window_start: str
    window_end: str
    summary: str
    recommendation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    status: str = "firing"
    broker_id: int | None = None
    broker_endpoint: str | None = None
    peer_host: str | None = None
    cluster: str | None = None
    updated_at: str | None = None
    client_library: str | None = None
    client_version: str | None = None
    client_library_evidence: str | None = None  # how the agent knows the library
    process_role: str | None = None  # one of Kafka's own processes (clients.PROCESS_ROLES)
    # Event time: start of the window the finding fired in, end of the newest window it held in.
    first_fired_at: str | None = None
    last_seen_at: str | None = None
    change: str | None = None  # one of CHANGES on a published record

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r} not one of {KINDS}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} not one of {SEVERITIES}")
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} not one of {STATUSES}")
        if self.change is not None and self.change not in CHANGES:
            raise ValueError(f"change {self.change!r} not one of {CHANGES}")

    @property
    def key(self) -> str:
        client = client_id(self.side, self.host, self.app, self.peer_host)
        return finding_key(self.kind, client, self.cluster, self.broker)

    @classmethod
    def for_series(
        cls,
        agg: Aggregate,
        kind: str,
        severity: str,
        summary: str,
        recommendation: str,
        evidence: dict[str, Any],
    ) -> Finding:
        """A firing finding about ``agg``'s series and window."""
        return cls(
            kind=kind,
            severity=severity,
            side=agg.side,
            host=agg.host,
            app=agg.app,
            broker=agg.broker,
            window_start=agg.window_start,
            window_end=agg.window_end,
            summary=summary,
            recommendation=recommendation,
            evidence=evidence,
            broker_id=agg.broker_id,
            broker_endpoint=agg.broker_endpoint,
            peer_host=agg.peer_host,
            cluster=agg.cluster,
            client_library=agg.client_library,
            client_version=agg.client_version,
            client_library_evidence=agg.client_library_evidence,
            process_role=agg.process_role,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON value for ``connmon.findings``."""
        # Not dataclasses.asdict: its deep copies were a third of the job's driver time.
        body = {name: getattr(self, name) for name in _FIELDS}
        body["evidence"] = dict(self.evidence)
        return {"schema": SCHEMA_VERSION, **body, "broker": self.broker, "key": self.key}

    def resolved(self, window_start: str, window_end: str, updated_at: str) -> Finding:
        """This finding's resolution: the record that ends it, about the given window."""
        done = dataclasses.replace(
            self,
            status="resolved",
            window_start=window_start,
            window_end=window_end,
            summary="Resolved: " + self.summary,
            change="resolved",
        )
        done.updated_at = updated_at
        return done

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(**{k: v for k, v in data.items() if k in _FIELD_SET})


_FIELD_SET = frozenset(f.name for f in dataclasses.fields(Finding))
_FIELDS = tuple(f.name for f in dataclasses.fields(Finding) if f.name != "broker")  # last
