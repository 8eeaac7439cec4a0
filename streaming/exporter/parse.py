"""Pure parsing of the job's messages (docs/topics.md, schema 1) into exporter records.

Each parser takes the raw Kafka value and returns a record or raises ``InvalidMessage`` with a
bounded reason, which the exporter counts per topic and reason and keeps aside.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streaming.exporter.labels import MAX_TEXT_LEN, broker_label, clean, peer_label
from streaming.schema.clients import UNKNOWN_LIBRARY, library_label, version_label
from streaming.schema.status import QUERY_ALIASES

SUPPORTED_SCHEMA = 1
SIDES = ("client", "broker")
SEVERITIES = ("info", "warning", "critical")
STATUSES = ("firing", "resolved")
# Reasons are a fixed set: they become label values.
REASONS = (
    "malformed_json",
    "unsupported_schema",
    "missing_field",
    "invalid_value",
    "processing_error",  # an exporter bug, counted instead of crashing
)

# Hosts of one status record the exporter serves: the job lists at most 100 plus "(others)".
MAX_HOSTS = 101

SeriesLabels = tuple[str, str, str, str, str, str]  # side, host, app, cluster, broker_id, peer


class InvalidMessage(ValueError):
    """A message the exporter cannot use; ``reason`` is one of ``REASONS``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Aggregate:
    """Latest window values of one client x broker series."""

    labels: SeriesLabels
    window_end: float
    window_s: float
    # Each holds only what is exported: no zero counts or rates, no unknown ages or slope.
    sockets: dict[str, float]  # TCP state -> sockets
    gauges: dict[str, float]  # metric name -> value (already per second where a rate)
    closes: dict[str, float]  # closed_by -> closes per second
    # (client_library, client_version) label values of a client-side series, when identified
    library: tuple[str, str] | None = None


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str
    firing: bool
    labels: SeriesLabels
    updated_at: float
    recommendation: str = ""  # the job's advice, "" when it gave none
    fired: bool = False  # the record of its firing (not a change, heartbeat or resolution)
    first_fired_at: str = ""  # event time it fired, as the job wrote it ("" if not given)


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    query: str
    timestamp: float
    values: dict[str, float]  # metric name -> value
    # (host, clock offset or None, skewed events, late events), hosts the job named
    hosts: tuple[tuple[str, float | None, float, float], ...] = ()


def _load(raw: bytes | str) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidMessage("malformed_json", str(exc)) from None
    if not isinstance(obj, dict):
        raise InvalidMessage("malformed_json", "value is not a JSON object")
    schema = obj.get("schema")
    if schema != SUPPORTED_SCHEMA:
        raise InvalidMessage("unsupported_schema", f"schema {schema!r}")
    return obj


def _req(obj: dict[str, Any], name: str) -> Any:
    if obj.get(name) is None:
        raise InvalidMessage("missing_field", name)
    return obj[name]


def _num(obj: dict[str, Any], name: str, required: bool = False) -> float | None:
    value = _req(obj, name) if required else obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidMessage("invalid_value", f"{name}={value!r} is not a finite number")
    return float(value)


def _time(obj: dict[str, Any], name: str, required: bool = True) -> float | None:
    value = _req(obj, name) if required else obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidMessage("invalid_value", f"{name}={value!r} is not an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidMessage("invalid_value", f"{name}={value!r} is not ISO 8601") from None
    if parsed.tzinfo is None:
        raise InvalidMessage("invalid_value", f"{name}={value!r} has no time zone")
    return parsed.timestamp()


def _choice(obj: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    value = _req(obj, name)
    if value not in allowed:
        raise InvalidMessage("invalid_value", f"{name}={value!r} not in {allowed}")
    return str(value)


def _series_labels(obj: dict[str, Any]) -> SeriesLabels:
    side = _choice(obj, "side", SIDES)
    host = clean(_req(obj, "host"))
    app = clean(_req(obj, "app"))
    broker_id = obj.get("broker_id")
    # The endpoint, else the job's own ``broker`` field ("*" for host-level series).
    endpoint = obj.get("broker_endpoint") or obj.get("broker")
    if broker_id is None and endpoint is None:
        raise InvalidMessage("missing_field", "broker_id, broker_endpoint or broker")
    peer = peer_label(obj.get("peer_host")) if side == "broker" else ""
    cluster = clean(obj.get("cluster"), default="")
    return (side, host, app, cluster, broker_label(broker_id, endpoint), peer)


def _nonneg(obj: dict[str, Any], name: str) -> float:
    value = _num(obj, name)
    if value is None:
        return 0.0
    if value < 0:
        raise InvalidMessage("invalid_value", f"{name}={value!r} is negative")
    return value


# Exported gauge -> aggregate field: ages (absent when unknown), counts and per-window counts
# exported as rates (both absent at 0). The slope is signed; unknown means too few samples.
_AGES = (
    ("connmon_close_wait_oldest_age_seconds", "close_wait_oldest_age_s"),
    ("connmon_max_idle_seconds", "max_idle_s"),
)
_COUNTS = (
    ("connmon_duplicate_connections", "dup_processes"),
    ("connmon_unused_extra_connections", "dup_unused_processes"),
)
_RATES = (
    ("connmon_connection_opens_per_second", "opens"),
    ("connmon_idle_reconnects_per_second", "reopens_after_idle"),
    ("connmon_broker_dropped_connections_per_second", "closes_broker_drop"),
    ("connmon_connect_failures_per_second", "connects_failed"),
    ("connmon_idle_closes_per_second", "closes_after_idle"),
    ("connmon_short_lived_connections_per_second", "short_lived"),
)
# The process's open descriptors over its soft limit (fds_open / fds_limit, both optional).
FD_USAGE = "connmon_process_fd_usage_ratio"


def parse_aggregate(raw: bytes | str) -> Aggregate:
    """One ``connmon.aggregates`` value."""
    obj = _load(raw)
    labels = _series_labels(obj)
    start = _time(obj, "window_start")
    end = _time(obj, "window_end")
    assert start is not None and end is not None
    window_s = end - start
    if window_s <= 0:
        raise InvalidMessage("invalid_value", "window_end is not after window_start")
    sockets_obj = obj.get("sockets") or {}
    if not isinstance(sockets_obj, dict):
        raise InvalidMessage("invalid_value", "sockets is not an object")
    # Only what says something becomes a sample: no socket in a state, no event in the window,
    # no age without such a socket is absent, not 0 (a healthy series costs 2-3 samples, one
    # more when its process's fd usage is known).
    sockets = {
        clean(state).upper(): n
        for state in sorted(sockets_obj)
        if (n := _nonneg(sockets_obj, state))
    }
    gauges: dict[str, float] = {}
    for name, field in _AGES:
        if obj.get(field) is not None:
            gauges[name] = _nonneg(obj, field)
    for name, field in _COUNTS:
        if value := _nonneg(obj, field):
            gauges[name] = value
    for name, field in _RATES:
        if value := _nonneg(obj, field):
            gauges[name] = value / window_s
    slope = _num(obj, "close_wait_slope_per_s")
    if slope is not None:
        gauges["connmon_close_wait_slope_per_second"] = slope
    fd_usage = _fd_usage(obj)
    if fd_usage is not None:
        gauges[FD_USAGE] = fd_usage
    closes = {
        by: value / window_s
        for by in ("local", "peer", "unknown")
        if (value := _nonneg(obj, f"closes_{by}"))
    }
    return Aggregate(labels, end, window_s, sockets, gauges, closes, _library(obj, labels[0]))


def _fd_usage(obj: dict[str, Any]) -> float | None:
    """``fds_open / fds_limit`` of the series' process, capped at 1 (a limit lowered under the
    descriptors already open); None when either is unknown or the limit is 0."""
    fds_open, fds_limit = _num(obj, "fds_open"), _num(obj, "fds_limit")
    for name, value in (("fds_open", fds_open), ("fds_limit", fds_limit)):
        if value is not None and value < 0:
            raise InvalidMessage("invalid_value", f"{name}={value!r} is negative")
    if fds_open is None or not fds_limit:
        return None
    return min(fds_open / fds_limit, 1.0)


def _query(name: str) -> str:
    """A query's name as the job names it now (``QUERY_ALIASES``): the status published before
    an upgrade and the one after it are one series, so the old one does not look stalled."""
    return QUERY_ALIASES.get(name, name)


def _library(obj: dict[str, Any], side: str) -> tuple[str, str] | None:
    name = obj.get("client_library")
    if side != "client" or not isinstance(name, str) or library_label(name) == UNKNOWN_LIBRARY:
        return None
    version = obj.get("client_version")
    return library_label(name), version_label(version if isinstance(version, str) else None)


def parse_finding(raw: bytes | str) -> Finding:
    """One ``connmon.findings`` value."""
    obj = _load(raw)
    kind = _req(obj, "kind")
    if not isinstance(kind, str) or not kind.replace("_", "").isalnum():
        raise InvalidMessage("invalid_value", f"kind={kind!r}")
    return Finding(
        kind=clean(kind),
        severity=_choice(obj, "severity", SEVERITIES),
        firing=_choice(obj, "status", STATUSES) == "firing",
        labels=_series_labels(obj),
        # The job may leave updated_at null; the window end is then the finding's time.
        updated_at=_time(obj, "updated_at", required=False) or _time(obj, "window_end") or 0.0,
        recommendation=clean(obj.get("recommendation"), "", MAX_TEXT_LEN),
        fired=obj.get("change") == "fired",
        first_fired_at=clean(obj.get("first_fired_at"), "", 64),
    )


_STATUS_FIELDS = {
    "connmon_job_batch_duration_seconds": "batch_duration_s",
    "connmon_job_input_rows_per_second": "input_rows_per_s",
    "connmon_job_processed_rows_per_second": "processed_rows_per_s",
    "connmon_job_batch_input_rows": "num_input_rows",
    "connmon_job_input_offsets_behind": "offsets_behind",
    "connmon_job_watermark_delay_seconds": "watermark_delay_s",
    "connmon_job_dead_letter_events_total": "dead_letter_total",
    "connmon_job_late_events_total": "late_events_total",
    "connmon_job_internal_errors_total": "internal_errors_total",
    "connmon_job_input_lost_records_total": "input_lost_total",
    "connmon_job_state_series": "state_series",
    "connmon_job_state_bytes": "state_bytes",
    "connmon_job_state_bucket_series_max": "state_bucket_series_max",
    "connmon_job_state_bucket_bytes_max": "state_bucket_bytes_max",
    "connmon_job_state_series_shed_total": "state_series_shed_total",
}


def parse_status(raw: bytes | str) -> JobStatus:
    """One ``connmon.job-status`` value."""
    obj = _load(raw)
    timestamp = _time(obj, "timestamp")
    assert timestamp is not None
    values: dict[str, float] = {}
    for metric, field in _STATUS_FIELDS.items():
        value = _num(obj, field)
        if value is not None:
            values[metric] = value
    last_event = _time(obj, "last_event_time", required=False)
    if last_event is not None:
        values["connmon_job_last_event_timestamp_seconds"] = last_event
    values["connmon_job_last_batch_timestamp_seconds"] = timestamp
    return JobStatus(
        clean(_req(obj, "job_id")),
        _query(clean(obj.get("query"), "")),
        timestamp,
        values,
        _hosts(obj.get("hosts")),
    )


def _hosts(raw: Any) -> tuple[tuple[str, float | None, float, float], ...]:
    """The status record's ``hosts``: absent in records of older jobs, at most ``MAX_HOSTS``
    served (the job lists the most skewed first), a host named twice served once."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(h, dict) for h in raw):
        raise InvalidMessage("invalid_value", "hosts is not a list of objects")
    out: dict[str, tuple[str, float | None, float, float]] = {}
    for h in raw:
        host = h.get("host")
        if not isinstance(host, str) or not host:
            raise InvalidMessage("invalid_value", f"hosts: host={host!r}")
        label = clean(host)
        row = (
            label,
            _num(h, "clock_offset_s"),
            _nonneg(h, "skewed_events_total"),
            _nonneg(h, "late_events_total"),
        )
        if label not in out and len(out) < MAX_HOSTS:
            out[label] = row
    return tuple(out.values())
