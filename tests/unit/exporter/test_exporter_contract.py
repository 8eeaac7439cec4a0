"""The exporter reads exactly what the job's own schema classes write (streaming/schema)."""

from __future__ import annotations

import json

import pytest

from streaming.exporter.parse import parse_aggregate, parse_finding, parse_status
from streaming.exporter.samples import NOW, iso
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding
from streaming.schema.status import JobStatus


def _agg(**over) -> Aggregate:
    base = dict(
        side="client", host="web-1", app="orders", broker="2", broker_id=2,
        broker_endpoint="10.0.0.2:9092", cluster="local",
        window_start=iso(NOW - 60), window_end=iso(NOW),
        sockets={"ESTABLISHED": 1, "CLOSE_WAIT": 4}, close_wait_count=4, opens=3,
        closes_peer=6, closes_after_idle=2, max_idle_s=12.5,
    )  # fmt: skip
    base.update(over)
    return Aggregate(**base)


def test_job_aggregate_parses() -> None:
    agg = parse_aggregate(json.dumps(_agg().to_dict()))
    assert agg.labels == ("client", "web-1", "orders", "local", "2", "")
    assert agg.sockets["CLOSE_WAIT"] == 4
    assert agg.gauges["connmon_connection_opens_per_second"] == pytest.approx(3 / 60)
    assert agg.closes["peer"] == pytest.approx(6 / 60)
    assert "connmon_close_wait_oldest_age_seconds" not in agg.gauges  # unknown: no sample


def test_job_aggregate_fd_usage() -> None:
    """The job's fds_open and fds_limit (null when the agent could not read them)."""
    fd = "connmon_process_fd_usage_ratio"
    agg = parse_aggregate(json.dumps(_agg(fds_open=768, fds_limit=1024).to_dict()))
    assert agg.gauges[fd] == 0.75
    assert fd not in parse_aggregate(json.dumps(_agg().to_dict())).gauges


def test_job_aggregate_with_unknown_broker_id_has_no_port_label() -> None:
    raw = _agg(broker="10.0.0.9:9092", broker_id=None, broker_endpoint="10.0.0.9:9092")
    assert parse_aggregate(json.dumps(raw.to_dict())).labels[4] == "10.0.0.9"


def test_job_finding_parses_even_without_updated_at() -> None:
    f = Finding.for_series(_agg(), "idle_churn", "warning", "s", "r", {"cycles": 3})
    assert f.updated_at is None
    parsed = parse_finding(json.dumps(f.to_dict()))
    assert (parsed.kind, parsed.severity, parsed.firing) == ("idle_churn", "warning", True)
    assert parsed.updated_at == pytest.approx(NOW)


def test_job_status_parses() -> None:
    s = JobStatus(
        job_id="connmon-job", query="aggregates", batch_id=7, timestamp=iso(NOW),
        batch_duration_s=0.4, input_rows_per_s=10.0, processed_rows_per_s=20.0,
        num_input_rows=4, watermark=None, watermark_delay_s=None, dead_letter_total=2,
        late_events_total=1, last_event_time=None,
    )  # fmt: skip
    parsed = parse_status(json.dumps(s.to_dict()))
    assert parsed.values["connmon_job_late_events_total"] == 1
    assert "connmon_job_last_event_timestamp_seconds" not in parsed.values


def test_job_host_level_series_parses() -> None:
    """The job's host-level series (app and broker "*") has no broker id or endpoint."""
    host = Aggregate(
        side="client", host="web-1", app="*", broker="*", window_start=iso(NOW - 60),
        window_end=iso(NOW), host_attempt_fails_per_min=90.0,
    )  # fmt: skip
    agg = parse_aggregate(json.dumps(host.to_dict()))
    assert agg.labels == ("client", "web-1", "*", "", "*", "")
