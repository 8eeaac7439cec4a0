"""``connmon stack up|down|status``: the local stack for a person, with the code the tests use.

``up`` starts a KRaft cluster, Prometheus, Alertmanager and a webhook receiver as detached
processes and records them in a state file (default ``var/stack/state.json`` in the checkout);
``down`` stops them and deletes their data; ``status`` reports what runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from streaming.agent.config import AgentConfig
from streaming.errors import ConfigError
from streaming.exporter.config import DEFAULT_LISTEN
from streaming.options import parse_pairs
from streaming.stack import artifacts
from streaming.stack.alertmanager import AlertmanagerServer, local_config
from streaming.stack.daemon import DaemonError, start_ready
from streaming.stack.kafka import KafkaCluster, KafkaStackError, _alive, _terminate_all
from streaming.stack.ports import free_port
from streaming.stack.prometheus import PrometheusError, PrometheusServer, connmon_jobs
from streaming.stack.secure import create_topics_for_connmon, secure_for_connmon
from streaming.stack.webhook import read_log

# Default scrape targets: the agent's and the exporter's default /metrics addresses.
DEFAULT_AGENT = AgentConfig.metrics_address
DEFAULT_EXPORTER = DEFAULT_LISTEN
NOTIFICATIONS = "notifications.jsonl"  # what the webhook receiver was sent


def state_dir() -> Path:
    env = os.environ.get("CONNMON_STATE_DIR")
    return Path(env) if env else artifacts.repo_root() / "var" / "stack"


def _state_file() -> Path:
    return state_dir() / "state.json"


def load_state() -> dict[str, Any] | None:
    f = _state_file()
    return json.loads(f.read_text()) if f.exists() else None


def default_rule_files() -> list[Path]:
    d = artifacts.repo_root() / "deploy" / "prometheus"
    return [p for p in (d / "alerts.yaml", d / "rules.yaml") if p.exists()]


def stack_up(
    brokers: int = 3,
    overrides: dict[str, str] | None = None,
    kafka_port: int | None = None,
    prometheus_port: int | None = None,
    alertmanager_port: int | None = None,
    scrape_agents: list[str] | None = None,
    scrape_exporters: list[str] | None = None,
    with_prometheus: bool = True,
    with_alertmanager: bool = True,
    security: str = "plaintext",
) -> dict[str, Any]:
    """Start the stack and write the state file; fails if one is already up. With Prometheus
    comes an Alertmanager with connmon's configuration, whose receivers post to a local
    webhook receiver that keeps every notification (``notifications.jsonl``). connmon's
    topics are created; a secured cluster (``sasl_ssl``) also gets each component's ACLs and a
    client settings file per component (``clients/<component>.yaml``)."""
    existing = load_state()
    if existing and stack_running(existing):
        raise ConfigError(
            f"a stack is already up (state in {_state_file()}); run 'connmon stack down'"
        )
    base = state_dir()
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    cluster = KafkaCluster(
        brokers=brokers, overrides=overrides or {}, base_dir=str(base / "kafka"), security=security
    )
    ports = [kafka_port + i for i in range(brokers)] if kafka_port else None
    try:
        cluster.start(ports=ports)
    except KafkaStackError as exc:
        raise ConfigError(str(exc)) from exc
    state: dict[str, Any] = {"kafka": cluster.to_state(), "prometheus": None}
    # Written after each server starts, so 'down' finds what runs whatever happens next.
    _state_file().touch(mode=0o600)  # it holds the secured cluster's passwords
    _state_file().write_text(json.dumps(state, indent=2))
    try:
        if cluster.secured:
            state["clients"] = str(secure_for_connmon(cluster, base / "clients"))
        else:
            create_topics_for_connmon(cluster)
    except BaseException:
        stack_down()
        raise
    _state_file().write_text(json.dumps(state, indent=2))
    if not with_prometheus:
        return state
    try:
        alertmanagers = []
        if with_alertmanager:
            hook_port = free_port()
            log = base / NOTIFICATIONS
            argv = [sys.executable, "-m", "streaming.stack.webhook", "--port", str(hook_port)]
            pid = start_ready(
                "webhook receiver",
                [*argv, "--log", str(log)],
                base / "webhook.log",
                f"http://127.0.0.1:{hook_port}/-/ready",
            )
            state["webhook"] = {"port": hook_port, "pid": pid, "log": str(log)}
            _state_file().write_text(json.dumps(state, indent=2))
            am = AlertmanagerServer(
                local_config(f"http://127.0.0.1:{hook_port}"),
                port=alertmanager_port,
                base_dir=str(base / "alertmanager"),
            ).start()
            state["alertmanager"] = {"port": am.port, "pid": am.pid, "base_dir": am.base_dir}
            _state_file().write_text(json.dumps(state, indent=2))
            alertmanagers.append(am.address)
        prom = PrometheusServer(
            scrape_jobs=connmon_jobs(
                scrape_agents or [DEFAULT_AGENT], scrape_exporters or [DEFAULT_EXPORTER]
            ),
            rule_files=default_rule_files(),
            scrape_interval_s=5,
            evaluation_interval_s=5,
            port=prometheus_port,
            base_dir=str(base / "prometheus"),
            alertmanagers=alertmanagers,
        ).start()
    except BaseException as exc:
        stack_down()
        if isinstance(exc, PrometheusError | DaemonError):
            raise ConfigError(str(exc)) from exc
        raise
    state["prometheus"] = {"port": prom.port, "pid": prom.pid, "base_dir": prom.base_dir}
    _state_file().write_text(json.dumps(state, indent=2))
    return state


_SERVERS = ("prometheus", "alertmanager", "webhook")


def stack_running(state: dict[str, Any]) -> bool:
    pids = [n.get("pid") for n in state["kafka"]["nodes"]]
    pids += [state[name]["pid"] for name in _SERVERS if state.get(name)]
    return any(_alive(p) for p in pids)


def stack_down() -> bool:
    """Stop everything in the state file and delete its data; False if nothing was up."""
    state = load_state()
    if state is None:
        return False
    _terminate_all([state[name]["pid"] for name in _SERVERS if state.get(name)], 15.0)
    KafkaCluster.from_state(state["kafka"]).stop()
    shutil.rmtree(state_dir(), ignore_errors=True)
    return True


def stack_status() -> dict[str, Any]:
    state = load_state()
    if state is None:
        return {"up": False}
    cluster = KafkaCluster.from_state(state["kafka"])
    out: dict[str, Any] = {
        "up": stack_running(state),
        "bootstrap_servers": cluster.bootstrap_servers,
        "brokers": cluster.status(),
    }
    for name in _SERVERS:
        if state.get(name):
            p = state[name]
            out[name] = {"url": f"http://127.0.0.1:{p['port']}", "pid": p["pid"]}
            out[name]["up"] = _alive(p["pid"])
    if state.get("webhook"):
        out["notifications"] = len(read_log(Path(state["webhook"]["log"])))
    return out


def _cmd(args: argparse.Namespace) -> int:
    if args.action == "up":
        state = stack_up(
            brokers=args.brokers,
            overrides=parse_pairs("--broker-config", args.broker_config),
            kafka_port=args.kafka_port,
            prometheus_port=args.prometheus_port,
            scrape_agents=args.scrape_agent,
            scrape_exporters=args.scrape_exporter,
            with_prometheus=not args.no_prometheus,
            with_alertmanager=not args.no_alertmanager,
            alertmanager_port=args.alertmanager_port,
            security=args.security,
        )
        cluster = KafkaCluster.from_state(state["kafka"])
        print(f"kafka: {cluster.bootstrap_servers} ({len(cluster.nodes)} brokers)")
        if state.get("clients"):
            print(
                f"kafka security: SASL_SSL (SCRAM-SHA-512), ACLs on; CA {cluster.ca_file}; "
                f"each component's client settings in {state['clients']}/<component>.yaml"
            )
        for name in _SERVERS:
            if state.get(name):
                print(f"{name}: http://127.0.0.1:{state[name]['port']}")
        if state.get("webhook"):
            print(f"notifications: {state['webhook']['log']}")
        return 0
    if args.action == "down":
        print("stack stopped" if stack_down() else "no stack is up")
        return 0
    status = stack_status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0 if status["up"] else 1
    if not status["up"] and "brokers" not in status:
        print("no stack is up")
        return 1
    print(f"kafka bootstrap: {status['bootstrap_servers']}")
    for b in status["brokers"]:
        state = "up" if b["up"] else "DOWN"
        print(f"  broker {b['node_id']}  {b['endpoint']}  pid {b['pid']}  {state}")
    for name in _SERVERS:
        if name in status:
            p = status[name]
            print(f"{name}: {p['url']}  pid {p['pid']}  {'up' if p['up'] else 'DOWN'}")
    if "notifications" in status:
        print(f"notifications received: {status['notifications']}")
    return 0 if status["up"] else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stack", help="start, stop or inspect the local Kafka + Prometheus + Alertmanager stack"
    )
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--brokers", type=int, choices=(1, 3), default=3, help="Kafka nodes (default 3)")
    p.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker setting override, repeatable (e.g. connections.max.idle.ms=5000)",
    )
    p.add_argument("--kafka-port", type=int, help="first broker port (default: any free port)")
    p.add_argument("--prometheus-port", type=int, help="Prometheus port (default: any free port)")
    p.add_argument(
        "--scrape-agent",
        action="append",
        metavar="HOST:PORT",
        help=f"an agent's /metrics for Prometheus, repeatable (default {DEFAULT_AGENT})",
    )
    p.add_argument(
        "--scrape-exporter",
        action="append",
        metavar="HOST:PORT",
        help=f"an exporter's /metrics for Prometheus, repeatable (default {DEFAULT_EXPORTER})",
    )
    p.add_argument(
        "--alertmanager-port", type=int, help="Alertmanager port (default: any free port)"
    )
    p.add_argument(
        "--security",
        choices=("plaintext", "sasl_ssl"),
        default="plaintext",
        help="sasl_ssl: TLS + SASL/SCRAM-SHA-512 with ACLs; connmon's topics, its users' ACLs "
        "and their client settings are made too (default plaintext)",
    )
    p.add_argument("--no-prometheus", action="store_true", help="start Kafka only")
    p.add_argument(
        "--no-alertmanager",
        action="store_true",
        help="no Alertmanager and webhook receiver beside Prometheus",
    )
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.set_defaults(func=_cmd)
