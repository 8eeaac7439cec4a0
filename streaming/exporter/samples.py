"""Example messages shaped like docs/topics.md (schema 1), for tests, benchmarks and demos.

Each builder returns the JSON bytes the job would produce; keyword arguments override fields
(``None`` included, to test missing values)."""

from __future__ import annotations

import json

from streaming.schema.times import iso

NOW = 1_790_000_000.0  # a fixed reference time (2026-09-21)


def aggregate(end: float = NOW - 5, **over) -> bytes:
    msg = {
        "schema": 1, "series": "client|web-1|orders-consumer|local|2",
        "side": "client", "host": "web-1", "app": "orders-consumer", "cluster": "local",
        "broker_id": 2, "broker_endpoint": "10.0.0.12:9092", "peer_host": None,
        "window_start": iso(end - 60), "window_end": iso(end), "updated_at": iso(end + 2),
        "sockets": {"ESTABLISHED": 2, "CLOSE_WAIT": 3, "TIME_WAIT": 0},
        "close_wait_count": 3, "close_wait_oldest_age_s": 512.0, "close_wait_slope_per_s": 0.01,
        "time_wait_count": 0, "syn_sent_count": 0, "max_idle_s": 540.2,
        "opens": 6, "closes_local": 0, "closes_peer": 3, "closes_unknown": 0,
        "closes_after_idle": 1, "short_lived": 0,
        "lifetime_avg_s": 540.9, "lifetime_max_s": 540.9,
        "dup_processes": 0, "dup_max_idle_s": None, "fds_open": 256, "fds_limit": 1024,
    }  # fmt: skip
    msg.update(over)
    return json.dumps(msg).encode()


def finding(updated: float = NOW - 5, **over) -> bytes:
    msg = {
        "schema": 1, "kind": "close_wait_buildup", "severity": "critical", "status": "firing",
        "side": "client", "host": "web-1", "app": "orders-consumer", "broker_id": 2,
        "broker_endpoint": "10.0.0.12:9092", "peer_host": None, "cluster": "local",
        "window_start": iso(updated - 60), "window_end": iso(updated),
        "evidence": {"close_wait_count": 25}, "summary": "s", "recommendation": "r",
        "key": "close_wait_buildup|client:web-1:orders-consumer|local|2",
        "updated_at": iso(updated),
    }  # fmt: skip
    msg.update(over)
    return json.dumps(msg).encode()


def status(ts: float = NOW - 1, **over) -> bytes:
    msg = {
        "schema": 1, "job_id": "connmon-job", "query": "ingest", "batch_id": 42,
        "timestamp": iso(ts), "batch_duration_s": 1.8,
        "input_rows_per_s": 1200.5, "processed_rows_per_s": 2400.1, "num_input_rows": 2400,
        "watermark": iso(ts - 122), "watermark_delay_s": 122.1,
        "dead_letter_total": 3, "late_events_total": 0, "last_event_time": iso(ts - 0.2),
        "hosts": [
            {"host": "web-7", "clock_offset_s": 181.4, "skewed_events_total": 5520,
             "late_events_total": 0},
            {"host": "web-9", "clock_offset_s": None, "skewed_events_total": 0,
             "late_events_total": 12},
        ],
        "internal_errors_total": 0, "offsets_behind": 0, "input_lost_total": 0,
    }  # fmt: skip
    msg.update(over)
    return json.dumps(msg).encode()
