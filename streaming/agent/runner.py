"""The agent loop: scan, attribute, classify, track, emit. All I/O comes in through the
constructor (collector, process table, metadata, sink, clock) so tests can replace any of it."""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from streaming import __version__
from streaming.agent import ebpf, kubeapi, netns, procnet
from streaming.agent.apps import AppNamer, label_keys
from streaming.agent.collector import Collector
from streaming.agent.config import AgentConfig, ConfigError
from streaming.agent.events import EventFactory, make_agent_id
from streaming.agent.fds import fd_usage
from streaming.agent.kafka_meta import (
    Classification,
    ClusterEndpoints,
    EndpointMap,
    MetadataRefresher,
    classify,
)
from streaming.agent.libraries import UNKNOWN as UNKNOWN_LIBRARY_ID
from streaming.agent.libraries import ClientLibrary, LibraryIdentifier
from streaming.agent.lifecycle import Meta, SocketLifecycles, meta_fields
from streaming.agent.metrics import AgentMetrics
from streaming.agent.pause import PauseProbe
from streaming.agent.pods import PodDirectory, PodSource
from streaming.agent.procs import ProcessTable, ProcInfo
from streaming.agent.records import CLOSE, TIME_WAIT, SocketRecord
from streaming.schema.clients import evidence_of
from streaming.schema.events import TCP_STATES
from streaming.schema.fds import FdUsage

log = logging.getLogger(__name__)


def cluster_endpoints(cfg: AgentConfig) -> list[ClusterEndpoints]:
    return [
        ClusterEndpoints(
            name=c.name,
            static=c.endpoints,
            bootstrap=c.bootstrap_servers,
            listener_ports=c.listener_ports,
            local_broker_id=c.broker_id,
        )
        for c in cfg.clusters
    ]


def make_refresher(cfg: AgentConfig, metrics: AgentMetrics) -> MetadataRefresher:
    return MetadataRefresher(
        cluster_endpoints(cfg),
        bootstrap_of={c.name: ",".join(c.bootstrap_servers) for c in cfg.clusters},
        kafka_config_of={c.name: cfg.metadata_client(c) for c in cfg.clusters},
        refresh_s={c.name: c.metadata_refresh_s for c in cfg.clusters},
        on_refresh=lambda name, ts: metrics.last_metadata.labels(name).set(ts),
    )


def make_pod_watcher(
    cfg: AgentConfig,
    metrics: AgentMetrics,
    environ: Mapping[str, str] | None = None,
    sa_dir: str | None = None,
) -> kubeapi.PodWatcher | None:
    """The API server's pod watch for this node, not started; None when ``kubernetes.api`` is
    off or (``auto``) the agent is not in a pod with a token. ConfigError when ``on`` cannot
    work."""
    k = cfg.kubernetes
    env = os.environ if environ is None else environ
    api = kubeapi.in_cluster(k.api, k.node_name, env, sa_dir or kubeapi.SA_DIR)
    keys = label_keys(cfg.apps)
    if api is None:
        if keys:
            log.warning(
                "apps: rules on pod labels (%s) never match: the Kubernetes API is off "
                "(kubernetes.api)", ", ".join(sorted(keys)),
            )  # fmt: skip
        return None
    watcher = kubeapi.PodWatcher(api, keys, on_error=metrics.kubernetes_api_error)
    for reason in kubeapi.ERROR_REASONS:
        metrics.kubernetes_api_errors.labels(reason)  # every reason at 0 from the start
    metrics.kubernetes_pods.set_function(watcher.__len__)
    return watcher


def make_ebpf(
    cfg: AgentConfig, metrics: AgentMetrics, verdict: ebpf.Verdict | None = None
) -> ebpf.EbpfCollector | None:
    """The eBPF collector, not started; None when ``ebpf`` is off or (``auto``) this host or
    this agent's privileges do not allow it (``verdict``: ``ebpf.check()``'s, asked when not
    given), which the metrics then say. ConfigError when ``on`` cannot work."""
    if cfg.ebpf == "off" or cfg.collector == "proc":
        metrics.set_ebpf_disabled("off")
        return None
    v = ebpf.check() if verdict is None else verdict
    if v.reason is not None:
        if cfg.ebpf == "on":
            raise ConfigError(f"ebpf: on, but {v.why}")
        log.info("eBPF collector not used: %s; connections shorter than a scan are missed", v.why)
        metrics.set_ebpf_disabled(v.reason)
        return None
    if v.why is not None:
        log.info("eBPF collector: %s", v.why)
    return ebpf.EbpfCollector(
        max(1, round(cfg.scan_interval_s)), on_lost=metrics.ebpf_lost.inc, env=dict(v.env)
    )


def _merge_counts(
    rows: list[tuple[Meta, ebpf.ConnectionCount]],
) -> dict[tuple, list]:
    """Fold counts that mean the same (one process, broker and ending) into one."""
    out: dict[tuple, list] = {}
    for meta, c in rows:
        key = (meta, c.closed_by, c.connect_error)
        slot = out.get(key)
        if slot is None:
            out[key] = [c.count, c.lifetime_sum_s, c.lifetime_max_s]
            continue
        slot[0] += c.count
        slot[1] = (
            None if slot[1] is None or c.lifetime_sum_s is None else slot[1] + c.lifetime_sum_s
        )
        if c.lifetime_max_s is not None:
            slot[2] = c.lifetime_max_s if slot[2] is None else max(slot[2], c.lifetime_max_s)
    return out


class Agent:
    """One agent instance; ``scan()`` does one scan, ``run()`` loops until stopped."""

    def __init__(
        self,
        cfg: AgentConfig,
        sink: Any,
        metrics: AgentMetrics,
        refresher: MetadataRefresher,
        collector: Collector | None = None,
        procs: ProcessTable | None = None,
        clock: Callable[[], float] = time.time,
        libraries: LibraryIdentifier | None = None,
        pod_source: PodSource | None = None,
        ebpf_collector: ebpf.EbpfCollector | None = None,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        self.metrics = metrics
        self.refresher = refresher
        self.collector = collector or Collector(
            cfg.collector, cfg.proc_root, namespaces=cfg.network_namespaces
        )
        self.procs = procs or ProcessTable(cfg.proc_root, PodDirectory(api=pod_source))
        self.namer = AppNamer(cfg.apps, parent_of=self.procs.info)
        self.libraries = libraries or LibraryIdentifier(cfg.proc_root)
        self.pauses = PauseProbe(cfg.proc_root, cfg.cgroup_root)
        self.clock = clock
        self.started = clock()
        self.events = EventFactory(cfg.host, make_agent_id(cfg.host, self.started), clock)
        self.lifecycles = SocketLifecycles()
        self.last_summary: float | None = None
        self.last_scan_s = 0.0
        self.last_socket_count = 0
        self.stop_event = threading.Event()
        self.ebpf = ebpf_collector
        if ebpf_collector is not None:
            ebpf_collector.on_process = self._first_sight
        # Own-namespace mode: the kernel reports every namespace; only the agent's is kept.
        self._own_ns = (
            netns.read_ns(cfg.proc_root, "self") if cfg.network_namespaces == "own" else None
        )
        self._last_map = None
        self._kernel_closed: dict[tuple, str] = {}  # tracked sockets the kernel saw close
        self._time_wait_counts: dict[tuple[int, str], int] = {}
        # Meta of sockets without a process, by classification: the same for every TIME_WAIT
        # socket to one broker, and a summary scan may find tens of thousands.
        self._unowned: dict[Classification, Meta] = {}
        # The last scan's records, unchanged pairs, counts and kind, when it found nothing new.
        self._steady: tuple[list, list, dict, bool] | None = None

    def _sink_busy(self) -> bool:
        """Whether the sink still has events to hand over or delivery reports to serve (a sink
        without ``busy()`` always does)."""
        busy = getattr(self.sink, "busy", None)
        return True if busy is None else bool(busy())

    def _emit(self, fields: dict, at: float) -> None:
        self.sink.send(self.events.make(fields, at))

    def scan(self, force_summary: bool = False) -> int:
        """One scan; returns the number of events emitted."""
        t0 = time.perf_counter()
        now = self.clock()
        em = self.refresher.current()
        counted = self._ebpf_items(em)
        due = self.last_summary is None or now - self.last_summary >= self.cfg.summary_interval_s
        summary = force_summary or due
        # While the kernel counts every connection, TIME_WAIT sockets (one per connection closed
        # here in the last minute: 60,000 at 1,000 connections a second) matter only for the
        # summaries' counts: only summary scans dump them.
        partial = self.lifecycles.counted_elsewhere and not summary
        records = self.collector.scan(em.ports() or None, time_wait=not partial)
        same_map = em is self._last_map
        self._last_map = em
        steady = self._steady
        if (
            same_map
            and steady is not None
            and steady[3] == partial
            and len(records) == len(steady[0])
            and all(map(operator.is_, records, steady[0]))
        ):
            # The collector handed back the very records of the last scan, in the same order,
            # and that scan found nothing new: nothing but tcp_info numbers changed (a changed
            # state or inode comes as a new record), so its split holds again.
            _, unchanged, counts, _ = steady
            fresh: list = []
        else:
            unchanged, fresh, counts = self._split(records, em, same_map)
        self._steady = (records, unchanged, counts, partial) if same_map and not fresh else None
        observations: list = []
        owners = self.procs.lookup({rec.inode for rec, _ in fresh}) if fresh else {}
        if not same_map or len(self._unowned) > 10000:
            self._unowned = {}
        for rec, c in fresh:
            info = owners.get(rec.inode)
            meta = self._unowned.get(c) if info is None else None
            if meta is None:
                lib = self._library(info) if c.side == "client" else None
                meta = self._meta(c, info, lib)
                if info is None:
                    self._unowned[c] = meta
            observations.append((rec, meta))
            ck = (rec.state, c.side)
            counts[ck] = counts.get(ck, 0) + 1
        emitted = 0
        kernel_closed, self._kernel_closed = self._kernel_closed, {}
        for fields in self.lifecycles.update(now, observations, unchanged, partial, kernel_closed):
            self._emit(fields, now)
            emitted += 1
        emitted += self._emit_counts(counted, em, now)
        self.last_scan_s = time.perf_counter() - t0
        self.last_socket_count = len(observations) + len(unchanged)
        if summary:
            emitted += self.summarize(now)
        self.metrics.scan_duration.observe(time.perf_counter() - t0)
        if partial:  # the TIME_WAIT gauges keep the last summary scan's counts
            counts = {**counts, **self._time_wait_counts}
        else:
            self._time_wait_counts = {k: n for k, n in counts.items() if k[0] == TIME_WAIT}
        by_name: Counter = Counter()
        for (state, side), n in counts.items():
            by_name[(TCP_STATES.get(state, "CLOSE"), side)] += n
        self.metrics.set_sockets(by_name)
        self.metrics.set_collector(self.collector.name)
        table = self.collector.table
        self.metrics.set_namespaces(
            self.collector.namespaces_scanned,
            table.unreadable if table else 0,
            self.collector.errors,
        )
        self.metrics.unreadable_fd_tables.set(self.procs.unreadable_fd_tables)
        self.metrics.last_scan.set(now)
        self.sink.pump()
        return emitted

    def _ebpf_items(self, em: EndpointMap) -> list[tuple[ebpf.ConnectionCount, ProcInfo | None]]:
        """Start (or follow the ports of) the eBPF collector and take what it counted. Taken
        before the scan's dump, while the tracker still holds every socket the last scans saw:
        a connection printed on its own that the tracker knows is the tracker's to report."""
        col = self.ebpf
        if col is None:
            return []
        ports = em.ports()
        col.ensure(ports)
        self.lifecycles.counted_elsewhere = col.running
        self.metrics.set_ebpf(col.running)
        known = self.lifecycles.sockets
        own = self._own_ns
        clients = frozenset(p for _, p in em.endpoints)
        out: list[tuple[ebpf.ConnectionCount, ProcInfo | None]] = []
        for item in col.drain():
            if own is not None:
                if item.netns != own:
                    continue
                ns = 0
            else:
                ns = item.netns
            if ns != item.netns:
                item = dataclasses.replace(item, netns=ns)
            if isinstance(item, ebpf.Closed):
                key = item.key
                tracked = known.get(key)
                if tracked is not None:
                    self._kernel_closed[key] = item.closed_by  # see SocketLifecycles.update
                    if not tracked.kernel_counts:
                        continue
                    tracked.kernel_counts = False  # counted below, with the kernel's process
                if self.lifecycles.recently_gone(key):
                    continue
                item = item.as_count(clients)
            # Named now: the process table forgets exited processes at the scan's lookup.
            info = None
            if item.pid:
                info = self.procs.info(item.pid) or ProcInfo(item.pid, item.comm, (), None, None)
            out.append((item, info))
        return out

    def _emit_counts(
        self,
        counted: list[tuple[ebpf.ConnectionCount, ProcInfo | None]],
        em: EndpointMap,
        now: float,
    ) -> int:
        """One ``short_lived`` event per (process, broker, ending) the kernel counted."""
        if not counted:
            return 0
        rows: list[tuple[Meta, ebpf.ConnectionCount]] = []
        for c, info in counted:
            rec = SocketRecord(0, CLOSE, c.src, c.sport, c.dst, c.dport, 0, 0, netns=c.netns)
            cls = classify(rec, em)
            if cls is None:
                continue
            if cls.side != "client":
                info = None
            lib = self._library(info) if cls.side == "client" else None
            rows.append((self._meta(cls, info, lib), c))
        interval = float(self.ebpf.interval_s) if self.ebpf is not None else 0.0
        n = 0
        for (meta, by, error), (count, total, top) in _merge_counts(rows).items():
            fields = {
                "kind": "short_lived",
                **meta_fields(meta),
                "count": count,
                "closed_by": by,
                "connect_error": error,
                "lifetime_sum_s": None if total is None else round(total, 6),
                "lifetime_max_s": None if top is None else round(top, 6),
                "interval_s": interval,
            }
            self._emit(fields, now)
            n += 1
        return n

    def _meta(self, c: Classification, info: ProcInfo | None, lib: ClientLibrary | None) -> Meta:
        return Meta(
            cluster=c.cluster,
            side=c.side,
            app="kafka-broker" if c.side == "broker" else self.namer.name(info),
            broker_id=c.broker_id,
            broker_endpoint=c.broker_endpoint,
            peer_host=c.peer_host,
            bootstrap=c.bootstrap,
            pid=info.pid if info else None,
            comm=info.comm if info else None,
            container=info.container if info else None,
            pod=info.pod.name if info and info.pod else None,
            namespace=info.pod.namespace if info and info.pod else None,
            client_library=lib.name if lib else None,
            client_version=lib.version if lib else None,
            client_library_evidence=evidence_of(lib.source) if lib else None,
            process_role=lib.role if lib else None,
        )

    def _first_sight(self, pid: int) -> None:
        """A process connects to a broker (eBPF, from its reader thread): read its details and
        identify its client library now. A process that lives for one request is gone by the
        next scan; both answers are kept for the scan that reports its connections."""
        info = self.procs.remember(pid)
        if info is not None:
            self.libraries.identify(info)

    def _library(self, info: ProcInfo | None) -> ClientLibrary:
        """The client library of a client socket's process (``unknown`` when unattributed)."""
        return self.libraries.identify(info) if info is not None else UNKNOWN_LIBRARY_ID

    def _split(
        self, records: list[SocketRecord], em: EndpointMap, same_map: bool
    ) -> tuple[list, list, dict[tuple[int, str], int]]:
        """Known sockets that only have new numbers (with their lifecycle entry), the Kafka
        sockets to attribute, and the known ones counted by (state, side)."""
        tracked = self.lifecycles.sockets
        unchanged: list = []
        keep = unchanged.append
        fresh: list = []
        counts: dict[tuple[int, str], int] = {}
        count = counts.get
        for rec in records:
            t = tracked.get(rec.key) if same_map else None
            # Fast path: a known, attributed socket whose inode and state did not change keeps
            # its meaning; only its tcp_info numbers are new. The collector hands such a socket
            # back as the very record the lifecycle holds.
            if t is not None:
                last, meta = t.rec, t.meta
                same = last is rec or (last.inode == rec.inode and last.state == rec.state)
                if same and (meta.pid is not None or not rec.inode):
                    keep((t, rec))
                    ck = (rec.state, meta.side)
                    counts[ck] = count(ck, 0) + 1
                    continue
            c = classify(rec, em)
            if c is not None:
                fresh.append((rec, c))
        return unchanged, fresh, counts

    def _fd_usage(self, pid: int) -> FdUsage | None:
        return fd_usage(pid, self.cfg.proc_root)

    def summarize(self, now: float) -> int:
        """Summaries for every group plus the heartbeat."""
        n = 0
        summaries = self.lifecycles.summaries(
            now, self.cfg.summary_interval_s, self.pauses.how, self._fd_usage
        )
        for fields in summaries:
            self._emit(fields, now)
            n += 1
        opens, fails = procnet.read_tcp_counters(self.cfg.proc_root)
        self._emit(
            {
                "kind": "heartbeat",
                "interval_s": self.cfg.summary_interval_s,
                "collector": self.collector.name,
                "sockets": self.last_socket_count,
                "scan_duration_s": round(self.last_scan_s, 6),
                "events_dropped": self.metrics.dropped_since_start,
                "tcp_active_opens": opens,
                "tcp_attempt_fails": fails,
                "version": __version__,
            },
            now,
        )
        self.last_summary = now
        return n + 1

    def run(self, max_scans: int | None = None) -> None:
        """Scan every ``scan_interval_s`` until ``stop_event`` is set (or ``max_scans``)."""
        self.metrics.up.set(1)
        scans = 0
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                try:
                    self.scan()
                except Exception:  # one bad scan must not stop the agent
                    log.exception("scan failed")
                scans += 1
                if max_scans is not None and scans >= max_scans:
                    break
                next_at += self.cfg.scan_interval_s
                # Serve delivery reports while waiting for the next scan; a sink that says it
                # has nothing left to deliver is not woken until then.
                while not self.stop_event.is_set():
                    left = next_at - time.monotonic()
                    if left <= 0:
                        break
                    self.sink.pump()
                    self.stop_event.wait(min(left, 0.2) if self._sink_busy() else left)
                if time.monotonic() - next_at > self.cfg.scan_interval_s:
                    next_at = time.monotonic()  # fell behind: do not burst
        finally:
            self.metrics.up.set(0)
