"""connmon as a person runs it on the local stack, with nothing rendered for the test.

``connmon stack up`` loads the committed alert and recording rules and runs the committed
Alertmanager configuration (only its receivers' URLs point at the stack's webhook receiver);
the agent, the job and the exporter run from the command line on the topics the stack made.

Under test:
- a real CLOSE_WAIT leak fires ConnMonCloseWaitBuildup after its committed ``for`` and its
  notification reaches the stack's receiver through the committed routes;
- while the agent and the exporter run, ConnMonAgentDown and ConnMonExporterDown are neither
  pending nor firing; stopping each makes its alert pending (the committed ``for`` that follows
  is tested by ``promtool test rules`` on the same file);
- every committed recording rule and every query of the committed dashboards
  (``dashboards/out``) returns data from this stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_helpers import close_wait_leak
from exporter_feed import feed
from job_helpers import wait_for

from streaming.mixin import check
from streaming.mixin.exprs import dashboard_exprs, rule_exprs
from streaming.mixin.promql import grafana_to_promql, metric_names
from streaming.stack.kafka import _alive
from streaming.stack.ports import free_port
from streaming.stack.prometheus import PrometheusServer
from streaming.stack.webhook import read_log
from streaming.topics.spec import DEFAULT_NAMES

pytestmark = pytest.mark.integration

IDLE_MS = 4000  # the broker reaps idle connections: a client that never closes leaks
LEAKER = "leaky-client"
DOWN_ALERTS = ("ConnMonAgentDown", "ConnMonExporterDown")
CLI = [sys.executable, "-m", "streaming"]
# Counters with a label per cause exist only once something happened: on a healthy stack their
# panels are empty. Every other panel and recording rule must show data.
EMPTY_WHEN_HEALTHY = {"connmon_agent_events_dropped_total": "no event was dropped"}


class Stack:
    """``connmon stack up`` in its own state folder, and connmon's processes around it."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.env = {**os.environ, "CONNMON_STATE_DIR": str(d / "stack")}
        self.agent_metrics = f"127.0.0.1:{free_port()}"
        self.exporter_metrics = f"127.0.0.1:{free_port()}"
        self.procs: dict[str, subprocess.Popen] = {}

    def connmon(self, *args: str) -> str:
        done = subprocess.run(
            [*CLI, *args], capture_output=True, text=True, env=self.env, timeout=180
        )
        assert done.returncode == 0, f"connmon {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def status(self) -> dict[str, Any]:
        return json.loads(self.connmon("stack", "status", "--json"))

    def spawn(self, name: str, *args: str) -> None:
        log = (self.dir / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [*CLI, *args], stdout=log, stderr=subprocess.STDOUT, env=self.env,
            start_new_session=True,
        )  # fmt: skip

    def stop(self, name: str) -> None:
        p = self.procs[name]
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {n}\n{(self.dir / f'{n}.log').read_text()[-1500:]}" for n in self.procs
        )


def _agent_config(d: Path, bootstrap: str, metrics: str) -> Path:
    path = d / "agent.json"  # JSON is YAML: the agent reads it as such
    path.write_text(json.dumps({
        "host": "stack-host",
        "scan_interval_s": 1,
        "summary_interval_s": 2,
        "metrics_address": metrics,
        "kafka": {"bootstrap.servers": bootstrap},
        "clusters": [{"name": "local", "bootstrap_servers": bootstrap, "metadata_refresh_s": 5}],
        "apps": [{"match": r"--app (\S+)", "name": r"\1", "on": "cmdline"}],
    }))  # fmt: skip
    return path


def _job_config(d: Path, bootstrap: str) -> Path:
    """The job on compressed windows: a leak is a finding within seconds, not minutes."""
    path = d / "job.json"
    path.write_text(json.dumps({
        "job": {
            "bootstrap_servers": bootstrap, "master": "local[2]",
            "checkpoint": str(d / "ckpt"), "trigger": "2s", "starting_offsets": "earliest",
            "shuffle_partitions": 2, "state_buckets": 4,
        },
        "detectors": {"window_s": 10, "watermark_s": 5, "close_wait_grace_s": 5},
    }))  # fmt: skip
    return path


def test_committed_rules_and_routes_deliver_a_real_leak_and_see_components_go_down(
    tmp_path,
) -> None:
    stack = Stack(tmp_path)
    stack.connmon(
        "stack", "up", "--brokers", "1",
        "--broker-config", f"connections.max.idle.ms={IDLE_MS}",
        "--scrape-agent", stack.agent_metrics, "--scrape-exporter", stack.exporter_metrics,
    )  # fmt: skip
    leak = None
    try:
        status = stack.status()
        bootstrap = status["bootstrap_servers"]
        state = json.loads((tmp_path / "stack" / "state.json").read_text())
        prom = PrometheusServer(port=state["prometheus"]["port"])  # the stack's, as a client
        hook_log = Path(state["webhook"]["log"])
        assert status["alertmanager"]["up"] and status["webhook"]["up"], status
        # The rules Prometheus runs are the committed files, not a rendering of them.
        config = yaml.safe_load(prom.api("status/config")["yaml"])
        assert {Path(f) for f in config["rule_files"]} == {p.resolve() for p in check.RULE_FILES}

        def sent_to() -> list[str]:
            found = prom.api("alertmanagers")["activeAlertmanagers"]
            return [a["url"] for a in found]

        expected = [f"{status['alertmanager']['url']}/api/v2/alerts"]
        wait_for("Prometheus to find the stack's Alertmanager", lambda: sent_to() == expected, 30)

        leak = close_wait_leak(status["brokers"][0]["endpoint"], LEAKER)
        agent_cfg = _agent_config(tmp_path, bootstrap, stack.agent_metrics)
        stack.spawn("agent", "agent", "--config", str(agent_cfg))
        stack.spawn("job", "job", "--config", str(_job_config(tmp_path, bootstrap)))
        stack.spawn(
            "exporter", "exporter", "--bootstrap-servers", bootstrap,
            "--listen", stack.exporter_metrics, "--staleness", "900",
        )  # fmt: skip
        # Series of every kind beside the real ones (another job id), so that every panel has
        # something to show; read from the stack's topics like the job's own output.
        feed(
            bootstrap,
            {r: DEFAULT_NAMES[r] for r in ("aggregates", "findings", "job_status")},
            job_id="connmon-job-fed",
        )

        # Prometheus starts before the components: their targets are down until they serve.
        # Once both are up, no down alert may be pending or firing while they run.
        def up_and_quiet() -> bool:
            up = {r["metric"]["job"] for r in prom.query("up == 1")}
            down = [a for a in prom.alerts() if a["labels"]["alertname"] in DOWN_ALERTS]
            return {"connmon-agent", "connmon-exporter"} <= up and not down

        wait_for("the agent's and the exporter's targets up", up_and_quiet, 120, stack.logs)
        seen_down: list[dict[str, Any]] = []

        def delivered() -> list[dict[str, Any]]:
            dead = [n for n, p in stack.procs.items() if p.poll() is not None]
            assert not dead, f"{dead} exited: {stack.logs()}"
            seen_down.extend(a for a in prom.alerts() if a["labels"]["alertname"] in DOWN_ALERTS)
            return [
                n for n in read_log(hook_log)
                if n["groupLabels"].get("alertname") == "ConnMonCloseWaitBuildup"
                and n["groupLabels"].get("app") == LEAKER
            ]  # fmt: skip

        sent = wait_for("the leak's notification in the stack's receiver", delivered, 480,
                        stack.logs, poll_s=2)  # fmt: skip
        assert seen_down == [], seen_down
        n = sent[0]
        alert = n["alerts"][0]
        assert n["status"] == "firing"
        assert alert["labels"]["kind"] == "close_wait_buildup"
        assert alert["labels"]["cluster"] == "local" and alert["labels"]["side"] == "client"
        assert n["receiver"] == f"connmon-{alert['labels']['severity']}"
        assert n["path"] == f"/{alert['labels']['severity']}"
        assert stack.status()["notifications"] >= 1

        _every_committed_query_has_data(prom)

        for name, alertname in (("agent", "ConnMonAgentDown"), ("exporter", "ConnMonExporterDown")):
            stack.stop(name)

            def pending(alertname: str = alertname) -> list[dict[str, Any]]:
                return [a for a in prom.alerts() if a["labels"]["alertname"] == alertname]

            down = wait_for(f"{alertname} after stopping the {name}", pending, 60)
            assert down[0]["state"] == "pending"
            assert down[0]["labels"]["job"] == f"connmon-{name}"
    finally:
        for name in stack.procs:
            stack.stop(name)
        if leak is not None:
            leak.kill()
            leak.wait()
        status = stack.status()
        assert stack.connmon("stack", "down").strip() == "stack stopped"
    pids = [status[name]["pid"] for name in ("prometheus", "alertmanager", "webhook")]
    pids += [b["pid"] for b in status["brokers"]]
    assert not any(_alive(p) for p in pids)


def _every_committed_query_has_data(prom: PrometheusServer) -> None:
    """Every committed rule expression and dashboard query runs; recording rules and panels
    return data (alert expressions are empty while their condition does not hold)."""
    rules, dashes = check.load_outputs()
    exprs = [(w, e) for doc in rules for w, e in rule_exprs(doc)]
    exprs += [(w, grafana_to_promql(e, "1m")) for d in dashes for w, e in dashboard_exprs(d)]
    assert len(exprs) > 60

    def missing() -> list[str]:
        return [
            f"{w}: {e}"
            for w, e in exprs
            if "/ConnMon" not in w
            and not metric_names(e) & EMPTY_WHEN_HEALTHY.keys()
            and not prom.query(e)
        ]

    # Roll-ups are evaluated once a minute and rates need two scrapes: wait for them.
    empty = wait_for("data for every rule and panel", lambda: not missing(), 150,
                     lambda: "\n".join(missing()), poll_s=5)  # fmt: skip
    assert empty
