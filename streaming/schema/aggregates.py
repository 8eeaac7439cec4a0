"""``connmon.aggregates`` value, schema 1 (docs/topics.md): one window of one series.

The job builds these from Spark's windowed aggregates; the detectors read them; the exporter
serves them. Fields beyond docs/topics.md are additions (never renames) and listed in docs/job.md.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from streaming.schema.times import epoch

SCHEMA_VERSION = 1
# app and broker of a host-level series: the host's TCP counters, which no socket explains.
HOST_SERIES = "*"
# connmon's own processes, as the agent names them ("connmon-<subcommand>", the job's Spark JVM
# "connmon-job"): they talk to the clusters they monitor, and the job leaves them out of
# findings unless told otherwise.
CONNMON_COMMANDS = ("agent", "job", "exporter", "topics", "replay", "demo", "scenario", "stack")
CONNMON_APPS = frozenset(f"connmon-{c}" for c in CONNMON_COMMANDS)


# Percent-encoding of the key separators, so two different series never share a key. Names
# without '%', '|' or ':' (all usual host, app and broker names) are left as they are.
_ESCAPE_BAR = str.maketrans({"%": "%25", "|": "%7C"})
_ESCAPE_BAR_COLON = str.maketrans({"%": "%25", "|": "%7C", ":": "%3A"})


def key_part(text: str, colon: bool = False) -> str:
    """``text`` as one component of a ``|``-separated key; ``colon``: of a ``:``-separated one
    too (a finding key's client part)."""
    if "%" not in text and "|" not in text and (not colon or ":" not in text):
        return text
    return text.translate(_ESCAPE_BAR_COLON if colon else _ESCAPE_BAR)


def join_key(parts: list[str]) -> str:
    """``parts`` as a ``|``-separated key, each escaped by ``key_part``: joined once, and
    escaped only when a part holds ``%`` or ``|`` (seldom; keys are made per row)."""
    key = "|".join(parts)
    if "%" in key or key.count("|") != len(parts) - 1:
        key = "|".join(map(key_part, parts))
    return key


# A series: one client (side, host, app, and on the broker side the client's address) and one
# broker of one Kafka cluster. The one definition of series identity: keys, the job's windows,
# the detectors' history and the exported labels all follow it.
SERIES_FIELDS = ("side", "host", "app", "cluster", "broker", "peer_host")


def series_key(
    side: str, host: str, app: str, cluster: str | None, broker: str, peer_host: str | None
) -> str:
    """``side|host|app|cluster|broker`` (client side) or ``...|peer_host`` (broker side); an
    unknown cluster is empty. Broker ids repeat across clusters, so the cluster is part of it."""
    parts = [side, host, app, cluster or "", broker]
    if side == "broker":
        parts.append(peer_host or "")
    return join_key(parts)


def client_id(side: str, host: str, app: str, peer_host: str | None) -> str:
    """The finding key's client part: ``side:host:app`` (plus ``:peer_host`` on the broker side).
    ``peer_host`` is last, so an IPv6 address there keeps its colons."""
    parts = [key_part(p, colon=True) for p in (side, host, app)]
    if side == "broker":
        parts.append(key_part(peer_host or ""))
    return ":".join(parts)


@dataclass
class Aggregate:
    """One series (client x broker seen from one side) in one event-time window."""

    side: str
    host: str
    app: str
    broker: str  # broker id as a string, or the endpoint when the id is unknown
    window_start: str
    window_end: str
    broker_id: int | None = None
    broker_endpoint: str | None = None
    peer_host: str | None = None
    cluster: str | None = None
    updated_at: str | None = None
    sockets: dict[str, int] = field(default_factory=dict)
    close_wait_count: int = 0
    close_wait_oldest_age_s: float | None = None
    close_wait_slope_per_s: float | None = None
    time_wait_count: int = 0
    syn_sent_count: int = 0
    max_idle_s: float | None = None
    opens: int = 0
    closes_local: int = 0
    closes_peer: int = 0
    closes_unknown: int = 0
    closes_after_idle: int = 0
    short_lived: int = 0
    lifetime_avg_s: float | None = None
    lifetime_max_s: float | None = None
    dup_processes: int = 0
    dup_max_idle_s: float | None = None
    # Additions to docs/topics.md (schema 1 stays compatible: new optional fields only).
    window_s: float = 60.0
    dup_conn: str | None = None
    established_processes: int | None = None
    established_max_per_process: int | None = None  # most ESTABLISHED sockets of one process
    closes_after_idle_local: int = 0
    closes_after_idle_peer: int = 0
    idle_at_close_max_s: float | None = None
    host_attempt_fails_per_min: float | None = None
    last_event_time: str | None = None
    # Re-opens by the same client after an idle close (not after a broker drop), and the
    # range of those closes' idle times: what idle_churn counts.
    reopens_after_idle: int = 0
    reopen_idle_min_s: float | None = None
    reopen_idle_max_s: float | None = None
    # Connections the broker closed together with busy ones (restarts, failures).
    closes_broker_drop: int = 0
    # Connects that failed (SYN_SENT to CLOSE), and of those the refused ones: seen per
    # process only with the agent's eBPF collector (a failed connect leaves no socket).
    connects_failed: int = 0
    connects_refused: int = 0
    # Extra connections by kind (duplicate_connections): unused since opened, and used ones.
    dup_unused_processes: int = 0
    dup_used_max_idle_s: float | None = None
    dup_used_active_idle_s: float | None = None
    # The client's library and version (client side, when the agent identified it).
    client_library: str | None = None
    client_version: str | None = None
    client_library_evidence: str | None = None  # streaming.schema.clients.LIBRARY_EVIDENCE
    process_role: str | None = None  # streaming.schema.clients.PROCESS_ROLES
    # Processes of the series the agent saw paused in the window, and how (events.PAUSES).
    paused_processes: int = 0
    paused_how: str | None = None
    # File descriptors of the series' process nearest its limit, at the latest summary: open
    # ones and its soft RLIMIT_NOFILE (absent when the agent could not read them).
    fds_open: int | None = None
    fds_limit: int | None = None

    # Cached: the job's driver asks each aggregate for them a dozen times (keys, history).
    # Identity fields are never changed in place (``dataclasses.replace`` makes a new one).
    @cached_property
    def series(self) -> str:
        return series_key(self.side, self.host, self.app, self.cluster, self.broker, self.peer_host)

    @cached_property
    def client(self) -> str:
        return client_id(self.side, self.host, self.app, self.peer_host)

    def to_dict(self) -> dict[str, Any]:
        """The JSON value for ``connmon.aggregates``."""
        body = {"schema": SCHEMA_VERSION, "series": self.series}
        body.update(zip(_FIELDS, _get_fields(self), strict=True))
        body["sockets"] = dict(self.sockets)
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Aggregate:
        """Inverse of ``to_dict``; unknown keys (newer producers) are ignored."""
        return cls(**{k: v for k, v in data.items() if k in _FIELD_SET})

    @classmethod
    def from_fields(cls, names: tuple[str, ...] | list[str], values: Iterable[Any]) -> Aggregate:
        """``names`` set to ``values``, every other field at its default: what
        ``Aggregate(**dict(zip(names, values)))`` makes, without the generated ``__init__`` and
        its 50 keyword arguments (the job restores every series' history this way each batch).
        ``names`` must be fields of ``Aggregate`` and include the required ones. A field not
        given reads as its default from the class, as a dataclass keeps plain defaults there;
        only default factories are called."""
        a = cls.__new__(cls)
        d = a.__dict__
        for name, factory in _FACTORIES:
            d[name] = factory()
        d.update(zip(names, values, strict=True))
        return a

    @classmethod
    def adopt(cls, fields: dict[str, Any]) -> Aggregate:
        """An aggregate whose attributes are the dict ``fields`` itself (not copied: the
        caller hands it over): ``from_fields`` for a dict built to be one. Keys must be fields
        of ``Aggregate``, the required ones among them; the others read as their defaults."""
        a = cls.__new__(cls)
        for name, factory in _FACTORIES:
            if name not in fields:
                fields[name] = factory()
        a.__dict__ = fields
        return a

    def covered_s(self) -> float:
        """Seconds of the window the series' events have reached so far: from its start to the
        newest event (the whole window once that is unknown)."""
        if self.last_event_time is None:
            return self.window_s
        return min(max(epoch(self.last_event_time) - epoch(self.window_start), 0.0), self.window_s)

    @cached_property
    def identity(self) -> tuple[Any, ...]:
        """The ``SERIES_FIELDS`` values."""
        return tuple(getattr(self, f) for f in SERIES_FIELDS)

    def same_series(self, other: Aggregate) -> bool:
        return self.identity == other.identity


_FIELDS = tuple(f.name for f in dataclasses.fields(Aggregate))
_FIELD_SET = frozenset(_FIELDS)
_get_fields = operator.attrgetter(*_FIELDS)
_FACTORIES = tuple(
    (f.name, f.default_factory)
    for f in dataclasses.fields(Aggregate)
    if f.default_factory is not dataclasses.MISSING
)
