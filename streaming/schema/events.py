"""Socket-state event schema, version 1: the one source of truth.

Agents write these events as JSON objects (one per Kafka message, keyed by host); the Spark job
reads them with ``from_json`` and the StructType produced here. ``json_schema()`` renders the
committed ``docs/events.schema.json``; a unit test fails when that file is out of date. What is
accepted, byte for byte, is decided by ``streaming.schema.validate``.

Changes must be additive within a version: new optional fields only. Anything else bumps
``SCHEMA_VERSION`` and the job learns to read both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from streaming.schema.clients import (
    CLIENT_LIBRARIES,
    LIBRARY_EVIDENCE,
    PROCESS_ROLES,
    UNKNOWN_LIBRARY,
)

SCHEMA_VERSION = 1
# Hard limits of the contract. A record over MAX_EVENT_BYTES is rejected unread; a string field
# over MAX_STRING_CHARS (Unicode code points) is rejected too. Agents keep within both.
MAX_EVENT_BYTES = 16384
MAX_STRING_CHARS = 256

KINDS = ("opened", "transition", "closed", "summary", "heartbeat", "short_lived")
SIDES = ("client", "broker")
# Linux TCP states by their kernel number (include/net/tcp_states.h).
TCP_STATES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECV",
    4: "FIN_WAIT1",
    5: "FIN_WAIT2",
    6: "TIME_WAIT",
    7: "CLOSE",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
    12: "NEW_SYN_RECV",
}
STATE_NAMES = tuple(TCP_STATES.values())
CLOSED_BY = ("local", "peer", "unknown")
# How a process is paused: stopped by a signal, stopped by its tracer, frozen by its cgroup.
PAUSES = ("stopped", "traced", "frozen")
OPEN_REASONS = ("new", "initial")  # "initial": already open when the agent started
# Why a connect failed (the socket went from SYN_SENT straight to CLOSE): refused (RST: nothing
# listens), timeout (no answer), unreachable (ICMP host/network unreachable), aborted (the
# client closed it while connecting: its own connect timeout), error (any other errno).
CONNECT_ERRORS = ("refused", "timeout", "unreachable", "aborted", "error")

_SOCKET_KINDS = ("opened", "transition", "closed")
# Counted connections (eBPF collector): attributed like a socket, no socket of their own.
_COUNTED = ("short_lived",)


def fit(text: str) -> str:
    """``text`` within MAX_STRING_CHARS: a longer one is cut and ends in ``~`` and a short hash
    of the whole, so two long values that share a start stay distinct."""
    if len(text) <= MAX_STRING_CHARS:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return text[: MAX_STRING_CHARS - 9] + "~" + digest


@dataclass(frozen=True)
class Field:
    """One top-level event field; ``kinds`` lists the event kinds that carry it."""

    name: str
    type: str  # string | long | double | boolean | timestamp | map_long
    description: str
    kinds: tuple[str, ...] = KINDS
    required: bool = False
    enum: tuple[str, ...] | None = None
    minimum: float | None = None


FIELDS: tuple[Field, ...] = (
    # Envelope: every event.
    Field("schema", "long", "Schema version of this event.", required=True, minimum=1),
    Field("kind", "string", "Event kind.", required=True, enum=KINDS),
    Field(
        "event_time",
        "timestamp",
        "When the agent observed this, ISO 8601 UTC with milliseconds and a Z suffix.",
        required=True,
    ),
    Field("host", "string", "Host name of the agent.", required=True),
    Field("agent_id", "string", "Agent instance id (host + start time).", required=True),
    Field("seq", "long", "Per-agent monotonic sequence number.", required=True, minimum=0),
    # Socket identity and attribution: socket events and summaries.
    Field(
        "cluster",
        "string",
        "Configured Kafka cluster name.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
    ),
    Field(
        "side",
        "string",
        "client: this host connects to a broker; broker: a client connects to this broker.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
        required=True,
        enum=SIDES,
    ),
    Field(
        "app",
        "string",
        "Application name from the agent's app rules (bounded; 'unknown' if unattributed).",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
        required=True,
    ),
    Field(
        "broker_id",
        "long",
        "Kafka broker id, null when the endpoint is not known from metadata.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
    ),
    Field(
        "broker_endpoint",
        "string",
        "Broker listener host:port (client side: the peer; broker side: the local listener).",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
        required=True,
    ),
    Field(
        "peer_host",
        "string",
        "Broker side: the client's address (or name); client side: null.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
    ),
    Field(
        "bootstrap",
        "boolean",
        "The endpoint is known only from bootstrap.servers, not from metadata.",
        kinds=_SOCKET_KINDS + _COUNTED,
    ),
    Field(
        "pid",
        "long",
        "Owning process id (null for TIME_WAIT or unattributed).",
        kinds=_SOCKET_KINDS + _COUNTED,
    ),
    Field("comm", "string", "Owning process name.", kinds=_SOCKET_KINDS + _COUNTED),
    Field(
        "container",
        "string",
        "Container or pod id from the cgroup path.",
        kinds=_SOCKET_KINDS + _COUNTED,
    ),
    Field(
        "pod",
        "string",
        "Kubernetes pod name of the owning process.",
        kinds=_SOCKET_KINDS + _COUNTED,
    ),
    Field(
        "namespace",
        "string",
        "Kubernetes namespace of the owning process.",
        kinds=_SOCKET_KINDS + _COUNTED,
    ),
    Field(
        "client_library",
        "string",
        "Client side: the Kafka client library of the owning process ("
        + ", ".join(CLIENT_LIBRARIES)
        + f", or {UNKNOWN_LIBRARY}; a newer agent may know more); broker side: null.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
    ),
    Field(
        "client_version",
        "string",
        "Version of client_library as the library states it, null when not found.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
    ),
    Field(
        "client_library_evidence",
        "string",
        "How the agent knows client_library: "
        + ", ".join(LIBRARY_EVIDENCE)
        + " (loaded code, the JVM's class path, the application's own manifest, a JVM, or only "
        "installed where the process runs); null when unknown or from an older agent.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
    ),
    Field(
        "process_role",
        "string",
        "Client side: the owning process is one of Kafka's own ("
        + ", ".join(PROCESS_ROLES)
        + "), which run several clients by design; null for an application.",
        kinds=_SOCKET_KINDS + ("summary",) + _COUNTED,
        enum=PROCESS_ROLES,
    ),
    Field("conn", "string", "Socket 4-tuple 'laddr:lport->raddr:rport'.", kinds=_SOCKET_KINDS),
    Field("inode", "long", "Socket inode (0 for TIME_WAIT).", kinds=_SOCKET_KINDS),
    # Socket state.
    Field(
        "state",
        "string",
        "TCP state now (closed: the last state seen).",
        kinds=_SOCKET_KINDS + ("summary",),
        required=True,
        enum=STATE_NAMES,
    ),
    Field(
        "prev_state",
        "string",
        "TCP state before this transition.",
        kinds=("transition",),
        enum=STATE_NAMES,
    ),
    Field(
        "open_reason", "string", "Why 'opened' was emitted.", kinds=("opened",), enum=OPEN_REASONS
    ),
    Field(
        "state_age_s",
        "double",
        "Seconds the socket has been in its state.",
        kinds=_SOCKET_KINDS,
        minimum=0,
    ),
    Field(
        "idle_s",
        "double",
        "Seconds since the last data sent or received, whichever is more recent (null: /proc).",
        kinds=_SOCKET_KINDS,
        minimum=0,
    ),
    Field(
        "lifetime_s",
        "double",
        "Seconds since the socket was first seen.",
        kinds=_SOCKET_KINDS,
        minimum=0,
    ),
    Field(
        "closed_by",
        "string",
        "Who closed first: local (FIN_WAIT*/TIME_WAIT path), peer (CLOSE_WAIT/LAST_ACK path, "
        "or gone from ESTABLISHED with no TIME_WAIT left).",
        kinds=("transition", "closed", "short_lived"),
        enum=CLOSED_BY,
    ),
    Field(
        "connect_error",
        "string",
        "The connect failed (SYN_SENT to CLOSE) and why; only the eBPF collector sees every one "
        "(a failed connect leaves no socket for a scan).",
        kinds=("closed", "short_lived"),
        enum=CONNECT_ERRORS,
    ),
    Field(
        "lifetime_sum_s",
        "double",
        "Sum of the counted connections' lifetimes (null: their opens were not seen).",
        kinds=_COUNTED,
        minimum=0,
    ),
    Field(
        "lifetime_max_s",
        "double",
        "Longest lifetime among the counted connections.",
        kinds=_COUNTED,
        minimum=0,
    ),
    Field(
        "idle_at_close_s",
        "double",
        "Idle seconds when the close began (last sampled idle + time elapsed since).",
        kinds=("closed",),
        minimum=0,
    ),
    Field(
        "broker_drop",
        "boolean",
        "The broker closed it at the moment it also closed a connection in use (data within "
        "5 s; this one or another from this host): a restart or failure, not an idle expiry.",
        kinds=("closed",),
    ),
    Field(
        "reopen_idle_s",
        "double",
        "A re-open: the same process (broker side: the same peer address) closed a connection "
        "to this broker before; that connection's idle seconds at close.",
        kinds=("opened",),
        minimum=0,
    ),
    Field(
        "reopen_after_drop",
        "boolean",
        "The connection this one re-opens was closed with broker_drop.",
        kinds=("opened",),
    ),
    Field(
        "bytes_sent",
        "long",
        "Bytes acked by the peer (tcpi_bytes_acked).",
        kinds=_SOCKET_KINDS,
        minimum=0,
    ),
    Field(
        "bytes_received",
        "long",
        "Bytes received (tcpi_bytes_received).",
        kinds=_SOCKET_KINDS,
        minimum=0,
    ),
    Field("rtt_s", "double", "Smoothed round-trip time.", kinds=_SOCKET_KINDS, minimum=0),
    # Summary: one per (host, app, side, broker, state) per summary interval.
    Field(
        "count",
        "long",
        "summary: sockets in this group; short_lived: connections counted.",
        kinds=("summary", "short_lived"),
        minimum=0,
    ),
    Field(
        "oldest_state_age_s",
        "double",
        "Longest time in state within the group.",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "max_idle_s", "double", "Largest idle time within the group.", kinds=("summary",), minimum=0
    ),
    Field(
        "processes",
        "long",
        "Distinct owning processes in the group.",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "max_per_process",
        "long",
        "Most sockets one process holds in this group.",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "dup_processes",
        "long",
        "Processes holding more than one socket in this group.",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "dup_max_idle_s",
        "double",
        "Among processes with more than one socket: idle seconds of the idlest extra socket.",
        kinds=("summary",),
        minimum=0,
    ),
    Field("dup_conn", "string", "4-tuple of that idlest extra socket.", kinds=("summary",)),
    Field(
        "dup_unused_processes",
        "long",
        "Processes with an extra socket that carried data only in its first 10 s and re-opens "
        "nothing (a Java client's bootstrap connection).",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "dup_used_max_idle_s",
        "double",
        "Idle seconds of the idlest extra socket that carried data after its first 10 s or "
        "re-opens a connection its process lost (a second client in the process).",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "dup_used_active_idle_s",
        "double",
        "Idle seconds of the busiest socket of that socket's process in this group.",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "paused_processes",
        "long",
        "Processes of the group that are paused now (stopped by a signal or a tracer, or "
        "frozen by their cgroup); absent when none is.",
        kinds=("summary",),
        minimum=1,
    ),
    Field(
        "paused_how",
        "string",
        "How most of those processes are paused.",
        kinds=("summary",),
        enum=PAUSES,
    ),
    Field(
        "fds_open",
        "long",
        "Open file descriptors of the group's process nearest its limit (the highest share "
        "of fds_limit in use); absent when no process's fd table could be read.",
        kinds=("summary",),
        minimum=0,
    ),
    Field(
        "fds_limit",
        "long",
        "That process's soft limit on open files (RLIMIT_NOFILE); absent when unlimited or "
        "unreadable.",
        kinds=("summary",),
        minimum=1,
    ),
    Field(
        "interval_s",
        "double",
        "Seconds between summaries (and heartbeats); short_lived: the period counted.",
        kinds=("summary", "heartbeat", "short_lived"),
        minimum=0,
    ),
    # Heartbeat: one per agent per summary interval.
    Field(
        "collector",
        "string",
        "Socket collector in use.",
        kinds=("heartbeat",),
        enum=("netlink", "proc"),
    ),
    Field(
        "sockets", "long", "Kafka sockets seen in the last scan.", kinds=("heartbeat",), minimum=0
    ),
    Field(
        "scan_duration_s", "double", "Duration of the last scan.", kinds=("heartbeat",), minimum=0
    ),
    Field(
        "events_dropped",
        "long",
        "Events dropped since agent start.",
        kinds=("heartbeat",),
        minimum=0,
    ),
    Field(
        "tcp_active_opens",
        "long",
        "Host TCP ActiveOpens counter (/proc/net/snmp), cumulative.",
        kinds=("heartbeat",),
        minimum=0,
    ),
    Field(
        "tcp_attempt_fails",
        "long",
        "Host TCP AttemptFails counter: refused or timed-out connects leave no socket to see.",
        kinds=("heartbeat",),
        minimum=0,
    ),
    Field("version", "string", "connmon version of the agent.", kinds=("heartbeat",)),
)

FIELDS_BY_NAME = {f.name: f for f in FIELDS}
REQUIRED_BY_KIND = {k: tuple(f.name for f in FIELDS if f.required and k in f.kinds) for k in KINDS}

_JSON_TYPES = {
    "string": "string",
    "long": "integer",
    "double": "number",
    "boolean": "boolean",
    "timestamp": "string",
}


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) for one event, with a per-kind ``required`` list."""
    props: dict[str, Any] = {}
    for f in FIELDS:
        t = _JSON_TYPES[f.type]
        prop: dict[str, Any] = {"description": f"{f.description} Kinds: {', '.join(f.kinds)}."}
        prop["type"] = t if f.required else [t, "null"]
        if f.type == "timestamp":
            prop["format"] = "date-time"
        if f.enum:
            prop["enum"] = list(f.enum) + ([] if f.required else [None])
        if f.minimum is not None:
            prop["minimum"] = f.minimum
        props[f.name] = prop
    envelope = [f.name for f in FIELDS if f.required and set(f.kinds) == set(KINDS)]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://connmon.dev/schema/events/v{SCHEMA_VERSION}.json",
        "title": f"connmon socket-state event, schema {SCHEMA_VERSION}",
        "type": "object",
        "properties": props,
        "required": envelope,
        "additionalProperties": True,
        "allOf": [
            {
                "if": {"properties": {"kind": {"const": k}}},
                "then": {"required": list(REQUIRED_BY_KIND[k])},
            }
            for k in KINDS
        ],
    }


def spark_schema():  # -> pyspark.sql.types.StructType
    """StructType for ``from_json``. Timestamps are read as strings and parsed by the job, so a
    malformed time is detectable (and sent to the dead-letter topic) rather than silently null."""
    from pyspark.sql import types as T

    spark_types = {
        "string": T.StringType(),
        "long": T.LongType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
        "timestamp": T.StringType(),
    }
    return T.StructType([T.StructField(f.name, spark_types[f.type], True) for f in FIELDS])
