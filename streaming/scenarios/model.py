"""Scenario definitions as data: clusters, client workloads, timed actions, expected findings.

A scenario never changes product code paths: it only picks broker and client settings (time
compressed to seconds) and the detector thresholds the session's job runs with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.detectors.config import DetectorConfig
from streaming.schema.findings import KINDS as FINDING_KINDS

CLIENTS = {
    "rdkafka": ("producer", "consumer", "two-producers"),
    "java": ("producer", "idle-producer", "consumer", "stalled-consumer"),
    "raw": ("close-wait-leak", "churn"),
    # Go and Node.js programs (streaming/scenarios/workloads/programs.py)
    "sarama": ("producer", "idle-producer", "consumer"),
    "franz-go": ("producer", "idle-producer", "consumer"),
    "kafkajs": ("producer", "idle-producer", "consumer"),
}
ACTIONS = ("stop_node", "start_node")


class ScenarioError(ValueError):
    """A scenario definition is inconsistent; the message names the scenario and field."""


@dataclass(frozen=True)
class ClusterProfile:
    """A Kafka cluster the scenarios share, by name."""

    name: str
    brokers: int
    overrides: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass(frozen=True)
class Workload:
    """One client process. ``cluster`` defaults to the scenario's; ``broker`` pins the
    bootstrap list to one node (raw sockets; Java bootstrap tests). ``also`` names a second
    (cluster, broker) the same process keeps one busy, healthy connection to (raw leak only)."""

    client: str
    mode: str
    app: str
    topic: str | None = None
    group: str | None = None
    interval_ms: int | None = None
    props: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    cluster: str | None = None
    broker: int | None = None
    start_after_s: float = 0.0
    also: tuple[str, int] | None = None


@dataclass(frozen=True)
class Action:
    """Something done to the scenario's cluster at ``at_s`` seconds after the workloads start."""

    at_s: float
    kind: str
    node_id: int


ANY_APP = "*"


@dataclass(frozen=True)
class Expect:
    """A finding of ``kind`` (None: any kind) for client ``app`` must (not) appear. ``app`` may
    be ``ANY_APP``: any app and side that belongs to no other scenario (host-level findings,
    broker-side findings, unattributed sockets). ``cluster``: only findings for that cluster
    (None: any). ``library``: the client library the finding must name; ``advice``: words its
    recommendation must contain (the library's own advice)."""

    kind: str | None
    app: str
    present: bool = True
    side: str = "client"
    cluster: str | None = None
    library: str | None = None
    advice: str | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    cluster: str
    workloads: tuple[Workload, ...]
    expect: tuple[Expect, ...]
    topics: Mapping[str, int] = field(default_factory=dict)
    detector: Mapping[str, float] = field(default_factory=dict)
    actions: tuple[Action, ...] = ()
    duration_s: float = 180.0
    # How long after the workloads start the expected findings may take to appear.
    expect_within_s: float = 180.0

    @property
    def apps(self) -> tuple[str, ...]:
        return tuple(w.app for w in self.workloads)

    def workload_cluster(self, w: Workload) -> str:
        return w.cluster or self.cluster


def validate(scenarios: Iterable[Scenario], clusters: Mapping[str, ClusterProfile]) -> None:
    """Fail with the scenario and field when a definition cannot run as written."""
    apps: dict[str, str] = {}
    topics: dict[str, str] = {}
    for s in scenarios:
        if s.cluster not in clusters:
            raise ScenarioError(f"{s.name}: cluster {s.cluster!r} is not defined")
        for w in s.workloads:
            where = f"{s.name}: workload {w.app!r}"
            if w.client not in CLIENTS:
                raise ScenarioError(f"{where}: client {w.client!r} not one of {sorted(CLIENTS)}")
            if w.mode not in CLIENTS[w.client]:
                raise ScenarioError(f"{where}: mode {w.mode!r} not one of {CLIENTS[w.client]}")
            if w.client != "raw" and not w.topic:
                raise ScenarioError(f"{where}: topic is required for {w.client} clients")
            cluster = s.workload_cluster(w)
            if cluster not in clusters:
                raise ScenarioError(f"{where}: cluster {cluster!r} is not defined")
            if w.broker is not None and not 1 <= w.broker <= clusters[cluster].brokers:
                raise ScenarioError(f"{where}: broker {w.broker} not in cluster {cluster!r}")
            if w.also is not None:
                also_cluster, also_broker = w.also
                if (w.client, w.mode) != ("raw", "close-wait-leak"):
                    raise ScenarioError(f"{where}: also is for raw close-wait-leak workloads")
                if also_cluster not in clusters:
                    raise ScenarioError(f"{where}: also cluster {also_cluster!r} is not defined")
                if not 1 <= also_broker <= clusters[also_cluster].brokers:
                    raise ScenarioError(f"{where}: also broker {also_broker} not in cluster")
            if w.app in apps:
                raise ScenarioError(f"{where}: app name already used by {apps[w.app]!r}")
            apps[w.app] = s.name
        for t in s.topics:
            if t in topics:
                raise ScenarioError(f"{s.name}: topic {t!r} already used by {topics[t]!r}")
            topics[t] = s.name
        for e in s.expect:
            if e.kind is not None and e.kind not in FINDING_KINDS:
                raise ScenarioError(f"{s.name}: expected kind {e.kind!r} is unknown")
            if e.app != ANY_APP and e.app not in s.apps:
                raise ScenarioError(f"{s.name}: expectation names app {e.app!r} not in workloads")
            if e.cluster is not None and e.cluster not in clusters:
                raise ScenarioError(f"{s.name}: expectation names cluster {e.cluster!r}")
        for a in s.actions:
            if a.kind not in ACTIONS:
                raise ScenarioError(f"{s.name}: action {a.kind!r} not one of {ACTIONS}")
            if not 1 <= a.node_id <= clusters[s.cluster].brokers:
                raise ScenarioError(f"{s.name}: action node {a.node_id} not in {s.cluster!r}")


def detector_config(base: DetectorConfig, scenarios: Iterable[Scenario]) -> DetectorConfig:
    """One job serves every scenario of a run, so their detector settings must agree: merge
    them onto ``base`` and fail naming both scenarios when two disagree."""
    merged: dict[str, float] = {}
    owner: dict[str, str] = {}
    for s in scenarios:
        for k, v in s.detector.items():
            if k in merged and merged[k] != v:
                raise ScenarioError(
                    f"detector setting {k}: {owner[k]} wants {merged[k]}, {s.name} wants {v}"
                )
            merged[k], owner[k] = v, s.name
    try:
        return base.replace(**merged)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from exc
