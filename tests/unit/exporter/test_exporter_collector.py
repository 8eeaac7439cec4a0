"""The exporter through a private CollectorRegistry, as Prometheus would scrape it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.exporter.collector import ConnmonCollector
from streaming.exporter.consumer import handle
from streaming.exporter.samples import NOW, aggregate, finding, status
from streaming.exporter.store import Store
from streaming.metricnames import FORBIDDEN_LABELS, series_names

L = {
    "side": "client",
    "host": "web-1",
    "app": "orders-consumer",
    "cluster": "local",
    "broker_id": "2",
    "peer_host": "",
}
CW = {**L, "state": "CLOSE_WAIT"}


def make(clock, **kw) -> tuple[Store, CollectorRegistry]:
    store = Store(clock=clock, **kw)
    registry = CollectorRegistry()
    registry.register(ConnmonCollector(store))
    return store, registry


def test_aggregate_finding_and_status_are_served(clock) -> None:
    store, reg = make(clock)
    handle(store, "aggregates", b"k1", aggregate(), "t/0@0")
    handle(store, "findings", b"f1", finding(), "t/0@0")
    handle(store, "job_status", b"j", status(), "t/0@0")
    assert reg.get_sample_value("connmon_sockets", {**L, "state": "CLOSE_WAIT"}) == 3
    assert reg.get_sample_value("connmon_sockets", CW) == 3
    assert reg.get_sample_value("connmon_connection_opens_per_second", L) == pytest.approx(0.1)
    closes = reg.get_sample_value(
        "connmon_connection_closes_per_second", {**L, "closed_by": "peer"}
    )
    assert closes == pytest.approx(0.05)
    active = {**L, "kind": "close_wait_buildup", "severity": "critical"}
    assert reg.get_sample_value("connmon_finding_active", active) == 1
    advice = {**active, "recommendation": "r"}
    assert reg.get_sample_value("connmon_finding_recommendation_info", advice) == 1
    job = {"job_id": "connmon-job", "query": "ingest"}
    assert reg.get_sample_value("connmon_job_dead_letter_events_total", job) == 3
    assert reg.get_sample_value("connmon_job_watermark_delay_seconds", job) == 122.1
    assert reg.get_sample_value("connmon_exporter_series") == 3
    assert reg.get_sample_value("connmon_exporter_messages_total", {"topic": "findings"}) == 1
    ts = reg.get_sample_value(
        "connmon_exporter_last_message_timestamp_seconds", {"topic": "aggregates"}
    )
    assert ts == NOW


def test_fd_usage_is_served_per_series_and_leaves_when_unknown(clock) -> None:
    store, reg = make(clock)
    fd = "connmon_process_fd_usage_ratio"
    handle(store, "aggregates", b"k1", aggregate(fds_open=900, fds_limit=1000), "x")
    broker = {**L, "side": "broker", "app": "kafka-broker", "peer_host": "10.0.0.7"}
    raw = aggregate(side="broker", app="kafka-broker", peer_host="10.0.0.7:51000",
                    fds_open=2048, fds_limit=8192)  # fmt: skip
    handle(store, "aggregates", b"k2", raw, "x")
    assert reg.get_sample_value(fd, L) == pytest.approx(0.9)
    assert reg.get_sample_value(fd, broker) == 0.25
    text = generate_latest(reg).decode()
    assert f"# TYPE {fd} gauge" in text
    # The next window without the process's fds (unreadable): no sample, not a stale value.
    handle(store, "aggregates", b"k1", aggregate(end=NOW - 4, fds_open=None), "x")
    assert reg.get_sample_value(fd, L) is None
    assert reg.get_sample_value(fd, broker) == 0.25


def test_resolved_finding_removes_the_series(clock) -> None:
    store, reg = make(clock)
    handle(store, "findings", b"f1", finding(), "x")
    handle(store, "findings", b"f1", finding(updated=NOW - 1, status="resolved"), "x")
    assert reg.get_sample_value("connmon_finding_active", {**L, "kind": "close_wait_buildup",
                                "severity": "critical"}) is None  # fmt: skip
    info = {**L, "kind": "close_wait_buildup", "severity": "critical", "recommendation": "r"}
    assert reg.get_sample_value("connmon_finding_recommendation_info", info) is None


def test_a_long_recommendation_is_served_whole_and_none_serves_no_info(clock) -> None:
    advice = " ".join(["Close the consumer on every error path."] * 20)  # 800 characters
    store, reg = make(clock)
    handle(store, "findings", b"f1", finding(recommendation=advice), "x")
    handle(store, "findings", b"f2", finding(kind="idle_zombie", recommendation=None), "x")
    labels = {**L, "kind": "close_wait_buildup", "severity": "critical"}
    assert (
        reg.get_sample_value(
            "connmon_finding_recommendation_info", {**labels, "recommendation": advice}
        )
        == 1
    )
    infos = [
        s for m in reg.collect() if m.name == "connmon_finding_recommendation_info"
        for s in m.samples
    ]  # fmt: skip
    assert [s.labels["kind"] for s in infos] == ["close_wait_buildup"]


def test_stale_series_disappear_and_are_counted(clock) -> None:
    store, reg = make(clock, staleness_s=120)
    handle(store, "aggregates", b"k1", aggregate(end=NOW - 10), "x")
    assert reg.get_sample_value("connmon_sockets", CW) == 3
    clock.t += 200
    assert reg.get_sample_value("connmon_sockets", CW) is None
    assert reg.get_sample_value("connmon_exporter_series_expired_total") == 1
    assert reg.get_sample_value("connmon_exporter_series") == 0


def test_already_stale_or_older_windows_are_ignored(clock) -> None:
    store, reg = make(clock, staleness_s=120)
    handle(store, "aggregates", b"k1", aggregate(end=NOW - 500), "x")
    assert reg.get_sample_value("connmon_sockets", CW) is None
    handle(store, "aggregates", b"k1", aggregate(end=NOW - 10, sockets={"CLOSE_WAIT": 7}), "x")
    handle(store, "aggregates", b"k1", aggregate(end=NOW - 70, sockets={"CLOSE_WAIT": 1}), "x")
    assert reg.get_sample_value("connmon_sockets", CW) == 7


def test_series_limit_refuses_new_series_and_counts_them(clock) -> None:
    store, reg = make(clock, series_limit=2)
    for host in ("a", "b", "c", "d"):  # same window end: the larger labels stay, not the first
        handle(store, "aggregates", host.encode(), aggregate(host=host), "x")
    # An existing series still updates at the limit; a new one older than all held is refused.
    handle(store, "aggregates", b"d", aggregate(host="d", sockets={"CLOSE_WAIT": 9}), "x")
    handle(store, "aggregates", b"e", aggregate(end=NOW - 6, host="e"), "x")
    assert reg.get_sample_value("connmon_exporter_series") == 2
    assert reg.get_sample_value("connmon_exporter_series_limit") == 2
    assert reg.get_sample_value("connmon_exporter_series_dropped_total") == 3
    assert reg.get_sample_value("connmon_sockets", {**CW, "host": "d"}) == 9
    assert reg.get_sample_value("connmon_sockets", {**CW, "host": "c"}) == 3
    assert reg.get_sample_value("connmon_sockets", {**CW, "host": "a"}) is None


def test_malformed_messages_are_counted_and_kept_aside(clock) -> None:
    store, reg = make(clock)
    handle(store, "aggregates", b"k", b"{oops", "connmon.aggregates/0@17")
    handle(store, "findings", b"k", finding(schema=9), "connmon.findings/1@3")
    bad = {"topic": "aggregates", "reason": "malformed_json"}
    assert reg.get_sample_value("connmon_exporter_invalid_messages_total", bad) == 1
    assert store.rejected[0].where == "connmon.aggregates/0@17"
    assert store.rejected[0].raw_head == b"{oops"
    assert store.rejected[1].reason == "unsupported_schema"


def test_tombstone_deletes_the_series(clock) -> None:
    store, reg = make(clock)
    handle(store, "aggregates", b"k1", aggregate(), "x")
    handle(store, "aggregates", b"k1", None, "x")
    assert reg.get_sample_value("connmon_sockets", CW) is None


def test_exposition_is_valid_and_uses_only_catalog_names_and_bounded_labels(clock) -> None:
    store, reg = make(clock)
    handle(
        store, "aggregates", b"k1",
        aggregate(broker_id=None, broker_endpoint="b-1:9092", host="h\x01ost"), "x",
    )  # fmt: skip
    handle(store, "findings", b"f", finding(), "x")
    handle(store, "job_status", b"j", status(), "x")
    text = generate_latest(reg).decode()
    known = series_names()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.name in known, sample.name
            assert not FORBIDDEN_LABELS & set(sample.labels)
            for value in sample.labels.values():
                assert ":9092" not in value
    assert 'host="h_ost~' in text
    assert 'broker_id="b-1"' in text


def test_each_scrape_builds_fresh_families(clock) -> None:
    store, reg = make(clock)
    handle(store, "aggregates", b"k1", aggregate(), "x")
    first = generate_latest(reg)
    handle(store, "aggregates", b"k1", aggregate(sockets={"CLOSE_WAIT": 11}), "x")
    second = generate_latest(reg)
    assert b'state="CLOSE_WAIT"} 3.0' in first and first != second
    assert reg.get_sample_value("connmon_sockets", CW) == 11


def test_job_hosts_are_served_per_host(clock) -> None:
    """Exact lines for the hosts of one status record; no offset for a host not off now."""
    store, reg = make(clock)
    hosts = [
        {"host": "web-7", "clock_offset_s": 181.4, "skewed_events_total": 5520,
         "late_events_total": 0},
        {"host": "db-2", "clock_offset_s": -240.0, "skewed_events_total": 90,
         "late_events_total": 7},
        {"host": "(others)", "clock_offset_s": None, "skewed_events_total": 40,
         "late_events_total": 3},
    ]  # fmt: skip
    handle(store, "job_status", b"connmon-job", status(hosts=hosts), "x")
    text = generate_latest(reg).decode()
    lines = [line for line in text.splitlines() if line.startswith("connmon_job_host_")]
    job = 'job_id="connmon-job",query="ingest"'
    assert lines == [
        f'connmon_job_host_clock_offset_seconds{{host="web-7",{job}}} 181.4',
        f'connmon_job_host_clock_offset_seconds{{host="db-2",{job}}} -240.0',
        f'connmon_job_host_skewed_events_total{{host="web-7",{job}}} 5520.0',
        f'connmon_job_host_skewed_events_total{{host="db-2",{job}}} 90.0',
        f'connmon_job_host_skewed_events_total{{host="(others)",{job}}} 40.0',
        f'connmon_job_host_late_events_total{{host="web-7",{job}}} 0.0',
        f'connmon_job_host_late_events_total{{host="db-2",{job}}} 7.0',
        f'connmon_job_host_late_events_total{{host="(others)",{job}}} 3.0',
    ]
    assert "# TYPE connmon_job_host_clock_offset_seconds gauge" in text
    assert "# TYPE connmon_job_host_late_events_total counter" in text
    # The next record lists no host (the fleet's clocks are fixed): the series are gone.
    handle(store, "job_status", b"connmon-job", status(ts=NOW, hosts=[]), "x")
    served = [
        line for line in generate_latest(reg).decode().splitlines()
        if line.startswith("connmon_job_host_")
    ]  # fmt: skip
    assert served == []


@pytest.mark.parametrize("old_first", [True, False])
def test_a_status_under_the_ingest_querys_earlier_name_is_the_ingest_querys(clock, old_first):
    """Across an upgrade the compacted status topic holds the last record under the ingest
    query's earlier name and the records under its name now: one series, the newest record's
    values, whichever the exporter reads first; nothing left under the old name to go stale."""
    store, reg = make(clock)
    old = status(ts=NOW - 600, query="aggregates", batch_id=10, num_input_rows=5)
    new = status(ts=NOW - 1, query="ingest", batch_id=11, num_input_rows=7)
    for key, raw in [(b"connmon-job:aggregates", old), (b"connmon-job:ingest", new)][
        :: 1 if old_first else -1
    ]:
        handle(store, "job_status", key, raw, "x")
    text = generate_latest(reg).decode()
    assert 'query="aggregates"' not in text
    stamp = reg.get_sample_value(
        "connmon_job_last_batch_timestamp_seconds", {"job_id": "connmon-job", "query": "ingest"}
    )
    assert stamp == NOW - 1


def test_a_shard_names_itself_and_the_shard_count(clock) -> None:
    store, reg = make(clock, shard=2, shards=3)
    handle(store, "findings", b"f", finding(updated=clock.t, change="fired"), "x")
    assert reg.get_sample_value("connmon_exporter_shards", {"shard": "2"}) == 3
    fired = {"kind": "close_wait_buildup", "severity": "critical", "shard": "2"}
    assert reg.get_sample_value("connmon_findings_fired_total", fired) == 1
