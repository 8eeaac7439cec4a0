"""Kafka meaning for sockets: which (ip, port) is which broker of which cluster.

Client side: the socket's remote end is a broker listener, learned from cluster metadata
(AdminClient.list_topics), static config, or only ``bootstrap.servers`` (``bootstrap=True``).
Broker side: the socket's local port is one of this host's configured listener ports.
``classify`` is pure; ``MetadataRefresher`` does the network I/O.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from streaming.agent.records import SocketRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoint:
    cluster: str
    broker_id: int | None
    endpoint: str  # host:port as advertised or configured
    bootstrap: bool = False


@dataclass(frozen=True, slots=True)
class Classification:
    cluster: str
    side: str
    broker_id: int | None
    broker_endpoint: str
    peer_host: str | None
    bootstrap: bool


@dataclass
class EndpointMap:
    """(ip, port) -> Endpoint for the client side; local port -> (cluster, broker id) for the
    broker side."""

    endpoints: dict[tuple[str, int], Endpoint] = field(default_factory=dict)
    listeners: dict[int, tuple[str, int | None]] = field(default_factory=dict)

    def ports(self) -> set[int]:
        """Every port worth asking the kernel about (the in-kernel filter)."""
        return {p for _, p in self.endpoints} | set(self.listeners)


def split_host_port(hp: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); ValueError names the bad value."""
    hp = hp.strip()
    if hp.startswith("["):
        host, _, rest = hp[1:].partition("]")
        port_s = rest.lstrip(":")
    else:
        host, _, port_s = hp.rpartition(":")
    if "://" in host:
        host = host.split("://", 1)[1]
    if not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ValueError(f"not host:port: {hp!r}")
    return host, int(port_s)


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the literal itself for an IP); [] when unresolvable."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    out: list[str] = []
    for fam, *_, sa in infos:
        addr = sa[0]
        if fam == socket.AF_INET6 and addr.startswith("::ffff:") and "." in addr:
            addr = addr[7:]
        if addr not in out:
            out.append(addr)
    return out


@dataclass(frozen=True)
class ClusterEndpoints:
    """What one cluster contributes: brokers from metadata and config, bootstrap entries,
    and this host's listener ports when the agent runs on a broker."""

    name: str
    brokers: Mapping[int, str] = field(default_factory=dict)  # id -> host:port (metadata)
    static: tuple[tuple[int | None, str], ...] = ()  # (id or None, host:port)
    bootstrap: tuple[str, ...] = ()
    listener_ports: tuple[int, ...] = ()
    local_broker_id: int | None = None


def build_map(
    clusters: Iterable[ClusterEndpoints], resolver: Callable[[str, int], list[str]] = resolve
) -> EndpointMap:
    """Merge clusters into one map. Metadata and static entries beat bootstrap-only entries."""
    em = EndpointMap()
    for c in clusters:
        known: list[tuple[int | None, str]] = [(i, hp) for i, hp in c.brokers.items()]
        known += list(c.static)
        for broker_id, hp in known:
            host, port = split_host_port(hp)
            for ip in resolver(host, port):
                em.endpoints[(ip, port)] = Endpoint(c.name, broker_id, hp, False)
        for hp in c.bootstrap:
            host, port = split_host_port(hp)
            for ip in resolver(host, port):
                em.endpoints.setdefault((ip, port), Endpoint(c.name, None, hp, True))
        for port in c.listener_ports:
            em.listeners[port] = (c.name, c.local_broker_id)
    return em


def classify(rec: SocketRecord, em: EndpointMap) -> Classification | None:
    """Kafka meaning of one socket, or None when it is not a Kafka connection."""
    lis = em.listeners.get(rec.sport)
    if lis is not None:
        cluster, broker_id = lis
        local = em.endpoints.get((rec.src, rec.sport))
        if local is not None and local.broker_id is not None:
            broker_id = local.broker_id
        ep = f"[{rec.src}]:{rec.sport}" if ":" in rec.src else f"{rec.src}:{rec.sport}"
        return Classification(cluster, "broker", broker_id, ep, rec.dst, False)
    remote = em.endpoints.get((rec.dst, rec.dport))
    if remote is not None:
        return Classification(
            remote.cluster, "client", remote.broker_id, remote.endpoint, None, remote.bootstrap
        )
    return None


_admins: dict[tuple, object] = {}


def fetch_brokers(
    bootstrap: str, kafka_config: Mapping[str, str] | None = None, timeout_s: float = 5.0
) -> dict[int, str]:
    """Broker id -> 'host:port' from one metadata request (raises KafkaException on failure)."""
    from confluent_kafka.admin import AdminClient

    # Connect failures surface as the exception below; librdkafka's own log would repeat them.
    conf = {"bootstrap.servers": bootstrap, "client.id": "connmon-agent-metadata", "log_level": 2}
    conf.update(kafka_config or {})
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    admin = _admins.get(key)
    if admin is None:
        # One long-lived client per cluster: a new one per refresh would open and close a
        # connection each time, and the agent would report its own churn.
        admin = _admins[key] = AdminClient(conf)
    md = admin.list_topics(timeout=timeout_s)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


class MetadataRefresher:
    """Refresh every cluster's broker list in a background thread; ``current()`` is the latest
    EndpointMap (the previous one is kept while a cluster is unreachable)."""

    def __init__(
        self,
        clusters: list[ClusterEndpoints],
        bootstrap_of: Mapping[str, str],
        kafka_config_of: Mapping[str, Mapping[str, str]],
        refresh_s: Mapping[str, float],
        on_refresh: Callable[[str, float], None] | None = None,
        fetch: Callable[..., dict[int, str]] = fetch_brokers,
    ) -> None:
        self._clusters = {c.name: c for c in clusters}
        self._bootstrap_of = bootstrap_of
        self._kafka_config_of = kafka_config_of
        self._refresh_s = refresh_s
        self._on_refresh = on_refresh
        self._fetch = fetch
        self._map = build_map(self._clusters.values())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next: dict[str, float] = {n: 0.0 for n in self._clusters}

    def current(self) -> EndpointMap:
        return self._map

    def refresh_due(self, now: float | None = None, timeout_s: float = 5.0) -> bool:
        """Refresh clusters whose interval has passed; True when any refresh succeeded."""
        now = time.monotonic() if now is None else now
        changed = False
        for name, c in list(self._clusters.items()):
            bootstrap = self._bootstrap_of.get(name)
            if not bootstrap or now < self._next[name]:
                continue
            try:
                brokers = self._fetch(bootstrap, self._kafka_config_of.get(name), timeout_s)
            except Exception as exc:  # KafkaException, resolver errors: keep the old map
                log.warning("metadata refresh for cluster %s failed: %s", name, exc)
                self._next[name] = now + min(self._refresh_s.get(name, 60.0), 10.0)
                continue
            self._next[name] = now + self._refresh_s.get(name, 60.0)
            # Rebuilt even when the broker list is unchanged: host names are resolved again.
            self._clusters[name] = ClusterEndpoints(
                c.name, brokers, c.static, c.bootstrap, c.listener_ports, c.local_broker_id
            )
            changed = True
            if self._on_refresh:
                self._on_refresh(name, time.time())
        if changed:
            self._map = build_map(self._clusters.values())
        return changed

    def start(self) -> MetadataRefresher:
        def loop() -> None:
            while not self._stop.is_set():
                self.refresh_due()
                self._stop.wait(1.0)

        self._thread = threading.Thread(target=loop, name="connmon-metadata", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
