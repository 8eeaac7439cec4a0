from __future__ import annotations

import json

import pytest

from streaming.exporter.labels import broker_label, clean, peer_label, strip_port
from streaming.exporter.parse import (
    MAX_HOSTS,
    InvalidMessage,
    parse_aggregate,
    parse_finding,
    parse_status,
)
from streaming.exporter.samples import NOW, aggregate, finding, status


def test_aggregate_fields_become_base_unit_values() -> None:
    agg = parse_aggregate(aggregate())
    assert agg.labels == ("client", "web-1", "orders-consumer", "local", "2", "")
    assert agg.window_s == 60.0
    assert agg.window_end == pytest.approx(NOW - 5)
    assert agg.sockets == {"CLOSE_WAIT": 3.0, "ESTABLISHED": 2.0}  # TIME_WAIT 0: no sample
    assert agg.gauges["connmon_connection_opens_per_second"] == pytest.approx(6 / 60)
    assert agg.gauges["connmon_close_wait_oldest_age_seconds"] == 512.0
    assert agg.closes == {"peer": pytest.approx(3 / 60)}


def test_a_healthy_series_is_only_what_it_says() -> None:
    """No zero count or rate and no unknown age becomes a sample: absent means none."""
    agg = parse_aggregate(
        aggregate(
            sockets={"ESTABLISHED": 2, "CLOSE_WAIT": 0}, close_wait_count=0,
            close_wait_oldest_age_s=None, close_wait_slope_per_s=None, max_idle_s=0.0,
            opens=0, closes_peer=0, closes_after_idle=0, dup_processes=0,
        )
    )  # fmt: skip
    assert agg.sockets == {"ESTABLISHED": 2.0}
    # An age of 0 is a value, and so is the process's fd usage whenever it is known.
    assert agg.gauges == {"connmon_max_idle_seconds": 0.0, "connmon_process_fd_usage_ratio": 0.25}
    assert agg.closes == {}
    busy = parse_aggregate(aggregate(dup_processes=1, dup_unused_processes=2, short_lived=3))
    assert busy.gauges["connmon_duplicate_connections"] == 1.0
    assert busy.gauges["connmon_unused_extra_connections"] == 2.0
    assert busy.gauges["connmon_short_lived_connections_per_second"] == pytest.approx(3 / 60)


def test_unknown_close_wait_slope_is_no_sample_not_zero() -> None:
    assert parse_aggregate(aggregate()).gauges["connmon_close_wait_slope_per_second"] == 0.01
    agg = parse_aggregate(aggregate(close_wait_slope_per_s=None))
    assert "connmon_close_wait_slope_per_second" not in agg.gauges
    negative = parse_aggregate(aggregate(close_wait_slope_per_s=-0.02))  # draining is a value
    assert negative.gauges["connmon_close_wait_slope_per_second"] == -0.02


FD = "connmon_process_fd_usage_ratio"


def test_fd_usage_is_open_descriptors_over_the_soft_limit() -> None:
    assert parse_aggregate(aggregate(fds_open=256, fds_limit=1024)).gauges[FD] == 0.25
    assert parse_aggregate(aggregate(fds_open=0, fds_limit=1024)).gauges[FD] == 0.0  # a value
    assert parse_aggregate(aggregate(fds_open=1024, fds_limit=1024)).gauges[FD] == 1.0
    # A soft limit lowered under what is already open: bounded, the process is at its limit.
    assert parse_aggregate(aggregate(fds_open=5000, fds_limit=1024)).gauges[FD] == 1.0
    broker = parse_aggregate(
        aggregate(side="broker", app="kafka-broker", peer_host="10.0.0.7", fds_open=30000,
                  fds_limit=100000)
    )  # fmt: skip
    assert broker.labels[0] == "broker" and broker.gauges[FD] == pytest.approx(0.3)


@pytest.mark.parametrize(
    "over",
    [
        {"fds_open": None},
        {"fds_limit": None},
        {"fds_open": None, "fds_limit": None},
        {"fds_limit": 0},  # no limit to be a share of
        {"fds_open": 10, "fds_limit": 0},
    ],
)
def test_unknown_fd_usage_is_no_sample(over: dict) -> None:
    agg = parse_aggregate(aggregate(**over))
    assert FD not in agg.gauges
    assert agg.gauges["connmon_max_idle_seconds"] == 540.2  # the rest of the series is served


def test_an_aggregate_without_the_fd_fields_parses() -> None:
    """Aggregates of a job that predates the fields (or of agents that do not send them)."""
    obj = json.loads(aggregate())
    del obj["fds_open"], obj["fds_limit"]
    agg = parse_aggregate(json.dumps(obj))
    assert FD not in agg.gauges and agg.sockets["CLOSE_WAIT"] == 3


@pytest.mark.parametrize(
    "over",
    [{"fds_open": -1}, {"fds_limit": -1024}, {"fds_open": "many"}, {"fds_limit": True}],
)
def test_invalid_fd_fields_raise(over: dict) -> None:
    with pytest.raises(InvalidMessage) as exc:
        parse_aggregate(aggregate(**over))
    assert exc.value.reason == "invalid_value"
    assert next(iter(over)) in exc.value.detail


def test_unknown_broker_id_uses_endpoint_host_never_the_port() -> None:
    agg = parse_aggregate(aggregate(broker_id=None, broker_endpoint="kafka-3.example:9093"))
    assert agg.labels[4] == "kafka-3.example"
    assert ":" not in agg.labels[4]


def test_broker_side_peer_host_loses_its_port() -> None:
    agg = parse_aggregate(aggregate(side="broker", app="kafka-broker", peer_host="10.1.2.3:51234"))
    assert agg.labels[5] == "10.1.2.3"


def test_client_side_ignores_peer_host() -> None:
    assert parse_aggregate(aggregate(peer_host="10.1.2.3")).labels[5] == ""


@pytest.mark.parametrize(
    ("side", "library", "version", "expected"),
    [
        ("client", "java", "4.3.1", ("java", "4.3.1")),
        ("client", "sarama", "v1.43.2-rc1", ("sarama", "1.43.2")),
        ("client", "librdkafka", None, ("librdkafka", "")),
        ("client", "some-future-lib", "1.0", ("other", "1.0")),  # bounded: a known list
        ("client", "kafkajs", "2.2.4; rm -rf /", ("kafkajs", "other")),
        ("client", "unknown", None, None),  # no evidence: no info series
        ("client", None, None, None),
        ("broker", "java", "4.3.1", None),  # the broker's own library says nothing of clients
    ],
)
def test_client_library_labels_are_bounded(side, library, version, expected) -> None:
    raw = aggregate(side=side, client_library=library, client_version=version, peer_host="h")
    assert parse_aggregate(raw).library == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "malformed_json"),
        (b"[1, 2]", "malformed_json"),
        (b"\xff\xfe", "malformed_json"),
        (aggregate(schema=2), "unsupported_schema"),
        (aggregate(host=None), "missing_field"),
        (aggregate(side="sideways"), "invalid_value"),
        (aggregate(opens="many"), "invalid_value"),
        (aggregate(opens=-1), "invalid_value"),
        (aggregate(window_end="yesterday"), "invalid_value"),
        (aggregate(window_end="2026-11-21T05:00:00"), "invalid_value"),
        (aggregate(broker_id=None, broker_endpoint=None), "missing_field"),
        (aggregate(broker_id=None, broker_endpoint=None, broker="7"), None),
    ],
)
def test_bad_aggregates_raise_with_a_bounded_reason(raw: bytes, reason: str | None) -> None:
    if reason is None:  # the control case parses
        assert parse_aggregate(raw).labels[4] == "7"
        return
    with pytest.raises(InvalidMessage) as exc:
        parse_aggregate(raw)
    assert exc.value.reason == reason


def test_nan_is_rejected() -> None:
    raw = aggregate().decode().replace('"max_idle_s": 540.2', '"max_idle_s": NaN').encode()
    with pytest.raises(InvalidMessage, match="max_idle_s"):
        parse_aggregate(raw)


def test_finding_and_status() -> None:
    f = parse_finding(finding())
    assert (f.kind, f.severity, f.firing) == ("close_wait_buildup", "critical", True)
    assert not parse_finding(finding(status="resolved")).firing
    with pytest.raises(InvalidMessage):
        parse_finding(finding(severity="page-everyone"))
    with pytest.raises(InvalidMessage):
        parse_finding(finding(kind="a b{c}"))
    s = parse_status(status())
    assert s.values["connmon_job_dead_letter_events_total"] == 3
    assert s.values["connmon_job_last_batch_timestamp_seconds"] == pytest.approx(NOW - 1)
    assert s.values["connmon_job_last_event_timestamp_seconds"] == pytest.approx(NOW - 1.2)
    no_wm = json.loads(status())
    no_wm["watermark_delay_s"] = None
    assert "connmon_job_watermark_delay_seconds" not in parse_status(json.dumps(no_wm)).values


def test_status_hosts() -> None:
    """The hosts the job named for their clocks or late events, in the job's order."""
    assert parse_status(status()).hosts == (
        ("web-7", 181.4, 5520.0, 0.0),
        ("web-9", None, 0.0, 12.0),
    )
    behind = {"host": "db-2", "clock_offset_s": -240, "late_events_total": 7}
    others = {"host": "(others)", "clock_offset_s": None, "skewed_events_total": 40,
              "late_events_total": 3}  # fmt: skip
    assert parse_status(status(hosts=[behind, others])).hosts == (
        ("db-2", -240.0, 0.0, 7.0),  # a missing total is 0
        ("(others)", None, 40.0, 3.0),
    )


def test_status_hosts_missing_or_empty_is_no_host() -> None:
    """Records of a job that does not publish ``hosts`` yet, and a healthy fleet."""
    assert parse_status(status(hosts=None)).hosts == ()
    assert parse_status(status(hosts=[])).hosts == ()
    older = json.loads(status())
    del older["hosts"]
    parsed = parse_status(json.dumps(older))
    assert parsed.hosts == ()
    assert parsed.values["connmon_job_dead_letter_events_total"] == 3


@pytest.mark.parametrize(
    ("hosts", "match"),
    [
        ({"host": "x"}, "hosts is not a list"),
        (["web-1"], "hosts is not a list"),
        ([{"clock_offset_s": 3}], "host=None"),
        ([{"host": ""}], "host=''"),
        ([{"host": 7}], "host=7"),
        ([{"host": "x", "clock_offset_s": "3"}], "clock_offset_s"),
        ([{"host": "x", "clock_offset_s": True}], "clock_offset_s"),
        ([{"host": "x", "skewed_events_total": -1}], "skewed_events_total.*negative"),
        ([{"host": "x", "late_events_total": "many"}], "late_events_total"),
    ],
)
def test_malformed_hosts_are_an_invalid_message(hosts: object, match: str) -> None:
    with pytest.raises(InvalidMessage, match=match) as exc:
        parse_status(status(hosts=hosts))
    assert exc.value.reason == "invalid_value"


def test_status_host_labels_are_cleaned_unique_and_bounded() -> None:
    odd = "web\n7\x00"
    rows = [{"host": odd, "clock_offset_s": 200}, {"host": "web-1", "late_events_total": 1},
            {"host": "web-1", "late_events_total": 9}]  # fmt: skip
    hosts = parse_status(status(hosts=rows)).hosts
    assert [h[0] for h in hosts] == [clean(odd), "web-1"]
    assert hosts[0][0].startswith("web_7_~")
    assert hosts[1] == ("web-1", None, 0.0, 1.0)  # a host named twice: the first row
    many = [{"host": f"h{i}", "late_events_total": i} for i in range(150)]
    hosts = parse_status(status(hosts=many)).hosts
    assert len(hosts) == MAX_HOSTS == 101
    assert hosts[-1] == ("h100", None, 0.0, 100.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("host:9092", "host"),
        ("10.0.0.1:9092", "10.0.0.1"),
        ("[::1]:9092", "::1"),
        ("fe80::1", "fe80::1"),
        ("plain", "plain"),
    ],
)
def test_strip_port(value: str, expected: str) -> None:
    assert strip_port(value) == expected


def test_label_cleaning() -> None:
    assert clean("  a\x00b\nc ").startswith("a_b_c~")
    assert clean(None) == "unknown"
    long = clean("x" * 1000)
    assert len(long) == 128 and long.startswith("x" * 100)
    assert broker_label(0, "h:1") == "0"
    assert broker_label(True, "h:1") == "h"
    assert broker_label("7", None) == "7"
    assert peer_label(None) == ""
