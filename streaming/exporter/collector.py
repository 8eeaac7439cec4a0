"""A client_python custom ``Collector``: fresh metric families from the store on every scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from streaming.exporter.store import ROLES, Snapshot, Store
from streaming.metricnames import metric
from streaming.metricnames.connmon import (
    AGGREGATE_METRICS,
    JOB_HOST_METRICS,
    JOB_METRICS,
)

LIBRARY_INFO = "connmon_client_library_info"
SIMPLE_AGGREGATES = tuple(
    m.name
    for m in AGGREGATE_METRICS
    if m.name not in ("connmon_sockets", "connmon_connection_closes_per_second", LIBRARY_INFO)
)


def _family(name: str) -> GaugeMetricFamily | CounterMetricFamily:
    m = metric(name)
    cls = CounterMetricFamily if m.type == "counter" else GaugeMetricFamily
    return cls(m.name, m.help, labels=list(m.labels))


class ConnmonCollector:
    """Reads a ``Store`` snapshot; holds no metric objects between scrapes."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def describe(self) -> list[Metric]:
        # Empty: registering must not call collect() (the store may still be loading).
        return []

    def collect(self) -> Iterator[Metric]:
        snap = self._store.snapshot()

        sockets = _family("connmon_sockets")
        closes = _family("connmon_connection_closes_per_second")
        simple = {name: _family(name) for name in SIMPLE_AGGREGATES}
        library = _family(LIBRARY_INFO)
        for agg in snap.aggregates:
            labels = list(agg.labels)
            for state, count in agg.sockets.items():
                sockets.add_metric([*labels, state], count)
            for by, rate in agg.closes.items():
                closes.add_metric([*labels, by], rate)
            for name, value in agg.gauges.items():
                simple[name].add_metric(labels, value)
            if agg.library is not None:
                library.add_metric([*labels, *agg.library], 1.0)
        yield sockets
        yield closes
        yield from simple.values()
        yield library

        active = _family("connmon_finding_active")
        advice = _family("connmon_finding_recommendation_info")
        for f in snap.findings:
            active.add_metric([f.kind, f.severity, *f.labels], 1.0)
            if f.recommendation:
                advice.add_metric([f.kind, f.severity, *f.labels, f.recommendation], 1.0)
        yield active
        yield advice

        job = {m.name: _family(m.name) for m in JOB_METRICS}
        for status in snap.statuses:
            for name, value in status.values.items():
                job[name].add_metric([status.job_id, status.query], value)
        yield from job.values()
        for name, samples in tail_samples(snap):
            family = _family(name)
            for labels, value in samples:
                family.add_metric(list(labels), value)
            yield family


Samples = list[tuple[str, list[tuple[tuple[str, ...], float]]]]


def tail_samples(snap: Snapshot) -> Samples:
    """Samples small enough to build on every scrape, as (name, [(labels, value)])."""
    return job_host_samples(snap) + fired_samples(snap) + self_metric_samples(snap)


def fired_samples(snap: Snapshot) -> Samples:
    """Findings fired since the exporter started, by kind and severity, of this shard."""
    shard = str(snap.shard)
    fired = [
        ((kind, severity, shard), float(n)) for (kind, severity), n in sorted(snap.fired.items())
    ]
    return [("connmon_findings_fired_total", fired)]


def job_host_samples(snap: Snapshot) -> Samples:
    """The hosts the job named for their clocks or late events, as (name, [(labels, value)])."""
    offset: list[tuple[tuple[str, ...], float]] = []
    skewed: list[tuple[tuple[str, ...], float]] = []
    late: list[tuple[tuple[str, ...], float]] = []
    for s in snap.statuses:
        for host, offset_s, skewed_n, late_n in s.hosts:
            labels = (s.job_id, s.query, host)
            if offset_s is not None:
                offset.append((labels, offset_s))
            skewed.append((labels, skewed_n))
            late.append((labels, late_n))
    names = [m.name for m in JOB_HOST_METRICS]
    return list(zip(names, (offset, skewed, late), strict=True))


def self_metric_samples(snap: Snapshot) -> Samples:
    """The exporter's own metrics as (name, [(label values, value)])."""
    size = len(snap.aggregates) + len(snap.findings) + len(snap.statuses)
    return [
        ("connmon_exporter_series", [((), size)]),
        ("connmon_exporter_series_limit", [((), snap.series_limit)]),
        ("connmon_exporter_shards", [((str(snap.shard),), snap.shards)]),
        ("connmon_exporter_series_dropped_total", [((), snap.dropped)]),
        ("connmon_exporter_series_expired_total", [((), snap.expired)]),
        (
            "connmon_exporter_messages_total",
            [((role,), snap.messages.get(role, 0)) for role in ROLES],
        ),
        (
            "connmon_exporter_invalid_messages_total",
            [((role, reason), n) for (role, reason), n in sorted(snap.invalid.items())],
        ),
        (
            "connmon_exporter_last_message_timestamp_seconds",
            [((role,), snap.last_message[role]) for role in ROLES if role in snap.last_message],
        ),
        ("connmon_exporter_consumer_errors_total", [((), snap.consumer_errors)]),
    ]
