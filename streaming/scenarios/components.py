"""connmon's own components for a scenario session, as subprocesses: the agent, the job, the
exporter, and Prometheus with rules generated for the session's thresholds.

All the wiring to the components' command lines and config files lives here, so a change in
one of them is a change in one place. Each component runs as ``python -m streaming ...``
(the same code as the ``connmon`` console script) with its config in the run directory.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from streaming.detectors.config import DetectorConfig
from streaming.scenarios.launcher import Proc, stop_all
from streaming.stack.alertmanager import AlertmanagerServer, local_config
from streaming.stack.kafka import KafkaCluster, create_topics
from streaming.stack.ports import free_port
from streaming.stack.prometheus import PrometheusServer, connmon_jobs
from streaming.stack.webhook import WebhookReceiver
from streaming.topics.spec import PARTIALS_MAX_BYTES

EVENTS, AGGREGATES, FINDINGS = "connmon.events", "connmon.aggregates", "connmon.findings"
DEADLETTER, JOB_STATUS = "connmon.deadletter", "connmon.job-status"
PARTIALS = "connmon.partials"
# connmon's own topics live on this cluster of the session.
HOME_CLUSTER = "main"
# Compressed like the scenarios: the agent scans every second and summarises every 5 s.
AGENT_SCAN_S, AGENT_SUMMARY_S = 1.0, 5.0
JOB_TRIGGER = "5s"  # a micro-batch takes 4-6 s on 2 shared cores; 2 s only fell behind
ALERT_FOR = "5s"
SCRAPE_S = 1.0
# The workloads carry ``--app NAME`` in argv; one agent rule turns it into the app name.
# connmon's own processes are named connmon-<component> by the agent's defaults.
APP_RULES = ({"match": r"--app (\S+)", "name": r"\1", "on": "cmdline"},)

FINDING_METRIC = "connmon_finding_active"
_ALERT_NAMES = {
    "close_wait_buildup": "ConnMonCloseWaitBuildup",
    "idle_churn": "ConnMonIdleChurn",
    "duplicate_connections": "ConnMonDuplicateConnections",
    "idle_zombie": "ConnMonIdleZombie",
    "connection_storm": "ConnMonConnectionStorm",
    "time_wait_pileup": "ConnMonTimeWaitPileup",
}


class ComponentError(RuntimeError):
    """A component did not start; the message names it and quotes its log."""


def alert_name(kind: str) -> str:
    """The alert that fires for a finding kind (streaming.mixin.alerts)."""
    try:
        from streaming.mixin.alerts import finding_alerts
        from streaming.mixin.config import DEFAULT

        names = {a.kind: a.name for a in finding_alerts(DEFAULT)}
        return names.get(kind, _ALERT_NAMES[kind])
    except ImportError:
        return _ALERT_NAMES[kind]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streaming", *args]


def agent_config(
    clusters: Mapping[str, KafkaCluster], home: str, metrics_address: str
) -> dict[str, Any]:
    """The agent's config file (streaming/agent/config.py layout)."""
    return {
        "scan_interval_s": AGENT_SCAN_S,
        "summary_interval_s": AGENT_SUMMARY_S,
        "events_topic": EVENTS,
        "metrics_address": metrics_address,
        "kafka": {"bootstrap.servers": home},
        "clusters": [
            {"name": name, "bootstrap_servers": c.bootstrap_servers, "metadata_refresh_s": 10}
            for name, c in clusters.items()
        ],
        "apps": list(APP_RULES),
    }


def job_config(home: str, detector: DetectorConfig, checkpoint: Path) -> dict[str, Any]:
    """The job's config file (streaming/job/settings.py layout)."""
    return {
        "job": {
            "bootstrap_servers": home,
            "events_topic": EVENTS,
            "aggregates_topic": AGGREGATES,
            "findings_topic": FINDINGS,
            "deadletter_topic": DEADLETTER,
            "status_topic": JOB_STATUS,
            "partials_topic": PARTIALS,
            "master": "local[2]",
            "checkpoint": str(checkpoint),
            "trigger": JOB_TRIGGER,
            "starting_offsets": "earliest",
            "shuffle_partitions": 2,
            # A demo's few dozen series: each bucket costs a Python call per batch.
            "state_buckets": 16,
        },
        "detectors": dataclasses.asdict(detector),
    }


def exporter_argv(home: str, listen: str, shard: int = 0, shards: int = 1) -> list[str]:
    return cli(
        "exporter",
        "--shards",
        str(shards),
        "--shard-index",
        str(shard),
        "--bootstrap-servers",
        home,
        "--listen",
        listen,
        "--aggregates-topic",
        AGGREGATES,
        "--findings-topic",
        FINDINGS,
        "--status-topic",
        JOB_STATUS,
    )


def rule_files(detector: DetectorConfig, out_dir: Path) -> list[Path]:
    """Alert and recording rules for this session: the mixin's generator with the session's
    thresholds and short ``for`` (the scrape jobs are named as shipped)."""
    from streaming.mixin.alerts import alert_rules
    from streaming.mixin.build import dump_yaml
    from streaming.mixin.config import MixinConfig
    from streaming.mixin.rules import recording_rules

    cfg = MixinConfig(detectors=detector).replace(
        finding_for=ALERT_FOR,
        rate_window="1m",
        rollup_interval=None,  # the test Prometheus evaluates every rule group often
        # Every client of a session runs on this one host; the broker alert must fire before
        # the findings it holds back do.
        broker_unavailable_hosts=1,
        broker_unavailable_for="0s",
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    alerts, rules = out_dir / "alerts.yaml", out_dir / "rules.yaml"
    alerts.write_text(dump_yaml(alert_rules(cfg)))
    rules.write_text(dump_yaml(recording_rules(cfg)))
    return [alerts, rules]


def _wait_http(url: str, proc: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ComponentError(f"{proc.name} exited during start:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise ComponentError(f"{proc.name} did not serve {url} within {timeout_s:.0f}s:\n{proc.tail()}")


class Components:
    """Agent, job, exporter, Prometheus and Alertmanager (with a webhook receiver keeping what
    it delivers) for one session."""

    def __init__(
        self,
        run_dir: Path,
        detector: DetectorConfig,
        say: Callable[[str], None] = print,
        exporter_shards: int = 1,
    ) -> None:
        self.dir = Path(run_dir)
        self.detector = detector
        self.say = say
        self.procs: list[Proc] = []
        self.prometheus: PrometheusServer | None = None
        self.alertmanager: AlertmanagerServer | None = None
        self.webhook: WebhookReceiver | None = None  # what a person on call would receive
        self.agent_metrics = f"127.0.0.1:{free_port()}"
        # One exporter per shard, each serving its share of the series.
        self.exporter_metrics = [f"127.0.0.1:{free_port()}" for _ in range(exporter_shards)]
        self.home = ""

    def start(self, clusters: Mapping[str, KafkaCluster], apps: Iterable[str] = ()) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.home = clusters[HOME_CLUSTER].bootstrap_servers
        create_topics(self.home, {EVENTS: 3, DEADLETTER: 1})
        size = {"max.message.bytes": str(PARTIALS_MAX_BYTES)}  # as `connmon topics create`
        create_topics(self.home, {PARTIALS: 3}, size)
        create_topics(
            self.home, {AGGREGATES: 3, FINDINGS: 3, JOB_STATUS: 1}, {"cleanup.policy": "compact"}
        )
        agent_cfg = self.dir / "agent.json"  # JSON is YAML: the agent reads it as such
        agent_cfg.write_text(json.dumps(agent_config(clusters, self.home, self.agent_metrics)))
        job_cfg = self.dir / "job.json"
        job_cfg.write_text(json.dumps(job_config(self.home, self.detector, self.dir / "ckpt")))
        self.say("starting connmon: agent, job, exporter, Prometheus, Alertmanager")
        agent = self._spawn("agent", cli("agent", "--config", str(agent_cfg)))
        job = self._spawn("job", cli("job", "--config", str(job_cfg)))
        shards = len(self.exporter_metrics)
        exporters = [
            self._spawn(
                "exporter" if shards == 1 else f"exporter-{i}",
                exporter_argv(self.home, listen, i, shards),
            )
            for i, listen in enumerate(self.exporter_metrics)
        ]
        _wait_http(f"http://{self.agent_metrics}/metrics", agent, 60)
        for listen, exporter in zip(self.exporter_metrics, exporters, strict=True):
            _wait_http(f"http://{listen}/metrics", exporter, 60)
        self.webhook = WebhookReceiver(log=self.dir / "notifications.jsonl").start()
        self.alertmanager = AlertmanagerServer(
            local_config(self.webhook.url(), group_wait="10s", group_interval="30s"),
            base_dir=str(self.dir / "alertmanager"),
            keep_dir=True,
        ).start()
        self.prometheus = PrometheusServer(
            scrape_jobs=connmon_jobs([self.agent_metrics], self.exporter_metrics),
            rule_files=rule_files(self.detector, self.dir / "rules"),
            scrape_interval_s=SCRAPE_S,
            evaluation_interval_s=SCRAPE_S,
            base_dir=str(self.dir / "prometheus"),
            keep_dir=True,
            alertmanagers=[self.alertmanager.address],
        ).start()
        if not job.alive():
            raise ComponentError(f"job exited during start:\n{job.tail()}")

    def _spawn(self, name: str, argv: list[str]) -> Proc:
        proc = Proc(name, argv, self.dir / f"{name}.log").start()
        self.procs.append(proc)
        return proc

    def urls(self) -> dict[str, str]:
        out = {"agent /metrics": f"http://{self.agent_metrics}/metrics"}
        for i, listen in enumerate(self.exporter_metrics):
            name = "exporter" if len(self.exporter_metrics) == 1 else f"exporter shard {i}"
            out[f"{name} /metrics"] = f"http://{listen}/metrics"
        if self.prometheus is not None:
            out["Prometheus"] = self.prometheus.url
            out["Prometheus alerts"] = f"{self.prometheus.url}/alerts"
        if self.alertmanager is not None:
            out["Alertmanager"] = self.alertmanager.url
        from streaming.stack import artifacts

        boards = artifacts.repo_root() / "dashboards" / "out"
        if boards.is_dir():  # generated by `make mixin`; no Grafana runs here
            out["dashboards (JSON)"] = f"{boards}/ (import into Grafana)"
        return out

    def dead(self) -> list[Proc]:
        return [p for p in self.procs if not p.alive()]

    def stop(self) -> None:
        stop_all(self.procs, timeout_s=30)
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.alertmanager is not None:
            self.alertmanager.stop()
        if self.webhook is not None:
            self.webhook.stop()
