"""A scenario session: the clusters, connmon's components, the workloads and the observer.

One ``Session`` runs any set of scenarios concurrently (the e2e suite and ``connmon demo`` run
them all); ``start()`` brings everything up, ``tick()`` starts delayed workloads and performs
timed actions, ``stop()`` stops everything it started, whatever state it is in.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from streaming.detectors.config import DetectorConfig
from streaming.scenarios import catalog, javadriver
from streaming.scenarios.launcher import Proc, stop_all, workload_argv
from streaming.scenarios.model import Action, Scenario, Workload, detector_config, validate
from streaming.scenarios.observer import Observer
from streaming.stack.kafka import KafkaCluster, create_topics

log = logging.getLogger(__name__)


class Session:
    """Everything one run needs. Use as a context manager."""

    def __init__(
        self,
        scenarios: Iterable[Scenario],
        run_dir: Path,
        connmon: bool = True,
        base_detector: DetectorConfig = catalog.SESSION_DETECTOR,
        say: Callable[[str], None] = print,
        exporter_shards: int = 1,
    ) -> None:
        self.scenarios = list(scenarios)
        self.exporter_shards = exporter_shards
        validate(self.scenarios, catalog.CLUSTERS)
        self.detector = detector_config(base_detector, self.scenarios)
        self.run_dir = Path(run_dir)
        self.with_connmon = connmon
        self.say = say
        self.clusters: dict[str, KafkaCluster] = {}
        self.workloads: dict[str, Proc] = {}
        self.components = None  # streaming.scenarios.components.Components once started
        self.observer: Observer | None = None
        self.findings = None  # a FindingsReader once something reads connmon.findings
        self.t_start: float | None = None
        self.started_at: float | None = None  # wall clock of t_start
        self._pending: list[tuple[Scenario, Workload]] = []
        self._actions: list[tuple[Scenario, Action]] = []
        self.actions_done: list[str] = []

    # ---- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cluster_names(self) -> list[str]:
        names: list[str] = []
        for s in self.scenarios:
            for c in [s.cluster, *(s.workload_cluster(w) for w in s.workloads)]:
                if c not in names:
                    names.append(c)
        return names

    def start(self) -> Session:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if any(w.client == "java" for s in self.scenarios for w in s.workloads):
                self.say("building the Java client driver (cached after the first run)...")
                javadriver.ensure_built(quiet=javadriver.is_built())
            self._start_clusters()
            for s in self.scenarios:
                if s.topics:
                    create_topics(self.clusters[s.cluster].bootstrap_servers, dict(s.topics))
            if self.with_connmon:
                from streaming.scenarios.components import Components

                self.components = Components(
                    self.run_dir / "connmon", self.detector, self.say, self.exporter_shards
                )
                self.components.start(self.clusters, self.app_names())
            self.observer = Observer(self.broker_labels(), self.pid_apps).start()
            self.t_start = time.monotonic()
            self.started_at = time.time()
            self._pending = [(s, w) for s in self.scenarios for w in s.workloads]
            self._actions = sorted(
                ((s, a) for s in self.scenarios for a in s.actions), key=lambda x: x[1].at_s
            )
            self.tick()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_clusters(self) -> None:
        """Start the clusters in parallel threads (each waits mostly on its JVMs)."""
        errors: list[BaseException] = []
        for name in self.cluster_names():
            p = catalog.CLUSTERS[name]
            self.clusters[name] = KafkaCluster(
                brokers=p.brokers,
                overrides=dict(p.overrides),
                name=f"connmon-{name}",
                base_dir=str(self.run_dir / "kafka" / name),
            )

        def start(c: KafkaCluster) -> None:
            try:
                c.start()
            except BaseException as exc:  # reported below, all clusters stopped by stop()
                errors.append(exc)

        self.say(f"starting Kafka clusters: {', '.join(self.clusters)}")
        threads = [threading.Thread(target=start, args=(c,)) for c in self.clusters.values()]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except BaseException:
            # Ctrl-C while starting: let the starts finish so stop() sees every broker's pid.
            for t in threads:
                t.join()
            raise
        if errors:
            raise errors[0]
        for name, c in self.clusters.items():
            self.say(f"  kafka {name}: {c.bootstrap_servers}")

    def stop(self) -> None:
        """Stop workloads, observer, connmon and clusters (each step even if one fails)."""
        steps: list[tuple[str, Callable[[], None]]] = [
            ("workloads", lambda: stop_all(list(self.workloads.values()))),
            ("observer", lambda: self.observer and self.observer.stop()),
            ("findings reader", lambda: self.findings and self.findings.stop()),
            ("connmon", lambda: self.components and self.components.stop()),
        ]
        steps += [(f"kafka {n}", c.stop) for n, c in self.clusters.items()]
        # A second Ctrl-C must not leave half the stack running.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            for name, step in steps:
                try:
                    step()
                except Exception as exc:  # keep stopping the rest
                    log.warning("stopping %s failed: %s", name, exc)
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)

    # ---- during the run ----------------------------------------------------------------------
    def elapsed(self) -> float:
        return 0.0 if self.t_start is None else time.monotonic() - self.t_start

    def tick(self) -> None:
        """Start workloads and run actions that are due."""
        now = self.elapsed()
        for s, w in list(self._pending):
            if w.start_after_s <= now:
                self._start_workload(s, w)
                self._pending.remove((s, w))
        while self._actions and self._actions[0][1].at_s <= now:
            s, a = self._actions.pop(0)
            cluster = self.clusters[s.cluster]
            self.say(f"[{now:5.0f}s] {s.name}: {a.kind} {s.cluster}/{a.node_id}")
            if a.kind == "stop_node":
                cluster.stop_node(a.node_id)
            else:
                cluster.start_node(a.node_id)
            self.actions_done.append(f"{now:.0f}s {s.name}: {a.kind} {s.cluster}/{a.node_id}")

    def _start_workload(self, s: Scenario, w: Workload) -> None:
        cluster = self.clusters[s.workload_cluster(w)]
        bootstrap = cluster.node(w.broker).endpoint if w.broker else cluster.bootstrap_servers
        also = self.clusters[w.also[0]].node(w.also[1]).endpoint if w.also else None
        argv = workload_argv(w, bootstrap, also)
        proc = Proc(w.app, argv, self.run_dir / "workloads" / f"{w.app}.log")
        self.workloads[w.app] = proc.start()

    def dead_workloads(self) -> list[Proc]:
        return [p for p in self.workloads.values() if not p.alive()]

    def run_for(self, seconds: float, every_s: float = 1.0, on_tick=None) -> None:
        """Tick until ``seconds`` from the workloads' start have passed."""
        while self.elapsed() < seconds:
            self.tick()
            if on_tick is not None:
                on_tick(self)
            time.sleep(every_s)

    # ---- what the observer and components need ----------------------------------------------
    def app_names(self) -> list[str]:
        return [w.app for s in self.scenarios for w in s.workloads]

    def pid_apps(self) -> dict[int, str]:
        return {p.pid: name for name, p in self.workloads.items() if p.pid is not None}

    def broker_labels(self) -> dict[tuple[str, int], str]:
        return {
            ("127.0.0.1", n.port): f"{name}/{n.node_id}"
            for name, c in self.clusters.items()
            for n in c.nodes
        }

    def read_findings(self):
        """Start (once) and return the reader of connmon.findings on the home cluster."""
        if self.findings is None and self.components is not None and self.components.home:
            from streaming.scenarios.findings import FindingsReader

            self.findings = FindingsReader(self.components.home).start()
        return self.findings

    def observer_report(self, scenario: Scenario | None = None) -> str:
        if self.observer is None:
            return "(observer not started)"
        return self.observer.report(scenario.apps if scenario else None)
