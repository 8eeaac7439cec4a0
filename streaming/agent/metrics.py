"""The agent's /metrics: prometheus-client objects built from ``streaming.metricnames.agent``."""

from __future__ import annotations

import threading
from collections import Counter as _Tally
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from streaming.metricnames import agent as names
from streaming.metricnames.base import Metric
from streaming.webserver import EndpointSecurity, serve_endpoint

SCAN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _counter(m: Metric, reg: CollectorRegistry) -> Counter:
    # prometheus-client appends _total itself.
    return Counter(m.name.removesuffix("_total"), m.help, m.labels, registry=reg)


def _gauge(m: Metric, reg: CollectorRegistry) -> Gauge:
    return Gauge(m.name, m.help, m.labels, registry=reg)


class AgentMetrics:
    """Self-metrics in a private registry (tests read them with ``get_sample_value``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = reg = registry or CollectorRegistry()
        self.scan_duration = Histogram(
            names.SCAN_DURATION.name, names.SCAN_DURATION.help, buckets=SCAN_BUCKETS, registry=reg
        )
        self.sockets = _gauge(names.SOCKETS, reg)
        self.produced = _counter(names.EVENTS_PRODUCED, reg)
        self.dropped = _counter(names.EVENTS_DROPPED, reg)
        self.delivery_errors = _counter(names.DELIVERY_ERRORS, reg)
        self.collector = _gauge(names.COLLECTOR_INFO, reg)
        self.ebpf_disabled = _gauge(names.EBPF_DISABLED, reg)
        self.ebpf_lost = _counter(names.EBPF_LOST, reg)
        self.last_scan = _gauge(names.LAST_SCAN, reg)
        self.last_metadata = _gauge(names.LAST_METADATA_REFRESH, reg)
        self.queue = _gauge(names.QUEUE_LENGTH, reg)
        self.up = _gauge(names.UP, reg)
        self.namespaces = _gauge(names.NETWORK_NAMESPACES, reg)
        self.unreadable = _gauge(names.UNREADABLE_PROCESSES, reg)
        self.unreadable_fd_tables = _gauge(names.UNREADABLE_FD_TABLES, reg)
        self.namespace_errors = _counter(names.NAMESPACE_ERRORS, reg)
        self.kubernetes_api_errors = _counter(names.KUBERNETES_API_ERRORS, reg)
        self.kubernetes_pods = _gauge(names.KUBERNETES_PODS, reg)
        self._namespace_errors: _Tally = _Tally()
        self._socket_keys: set[tuple[str, str]] = set()
        self.dropped_since_start = 0

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped.labels(reason).inc(n)
        self.dropped_since_start += n

    def kubernetes_api_error(self, reason: str) -> None:
        """One failed request to the API server (called from the watch thread)."""
        self.kubernetes_api_errors.labels(reason).inc()

    def set_collector(self, name: str) -> None:
        for other in ("netlink", "proc"):
            self.collector.labels(other).set(1 if other == name else 0)

    def set_ebpf(self, running: bool) -> None:
        self.collector.labels("ebpf").set(1 if running else 0)

    def set_ebpf_disabled(self, reason: str) -> None:
        """The eBPF collector is not used for this agent's life, for ``reason``
        (``ebpf.REASONS``)."""
        self.set_ebpf(False)
        self.ebpf_disabled.labels(reason).set(1)

    def set_namespaces(self, scanned: int, unreadable: int, errors: _Tally) -> None:
        """The collector's namespace figures; ``errors`` are its running totals by reason."""
        self.namespaces.set(scanned)
        self.unreadable.set(unreadable)
        for reason, total in errors.items():
            self.namespace_errors.labels(reason).inc(total - self._namespace_errors[reason])
        self._namespace_errors = _Tally(errors)

    def set_sockets(self, counts: _Tally) -> None:
        """Replace the per (state, side) socket gauges with this scan's counts."""
        for key in self._socket_keys - set(counts):
            self.sockets.labels(*key).set(0)
        for (state, side), n in counts.items():
            self.sockets.labels(state, side).set(n)
        self._socket_keys |= set(counts)

    def serve(
        self, address: str, security: EndpointSecurity | None = None
    ) -> tuple[WSGIServer, threading.Thread]:
        """Serve /metrics on 'host:port' from a daemon thread, with TLS and basic auth as
        ``security`` says; returns (server, thread)."""
        host, _, port = address.rpartition(":")
        return serve_endpoint(
            make_wsgi_app(self.registry),
            host.strip("[]") or "0.0.0.0",
            int(port),
            security,
            thread_name="connmon-agent-http",
        )
