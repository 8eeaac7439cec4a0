"""The agent with a real KRaft broker: real confluent-kafka clients, events in the topic,
a stalled client left in CLOSE_WAIT by the broker's idle reaper, and a broker outage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from streaming.agent import config
from streaming.agent.metrics import AgentMetrics
from streaming.agent.producer import KafkaSink
from streaming.agent.runner import Agent, make_refresher
from streaming.stack.kafka import create_topics
from streaming.stack.ports import free_port

REPO = Path(__file__).parents[2]
CLIENT = REPO / "tests" / "fixtures" / "agent" / "stalled_producer.py"


class EventReader:
    """Consume the events topic from the beginning, keeping everything read so far."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-reader",
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe([topic])
        self.events: list[dict] = []
        self.keys: set[bytes] = set()

    def wait_for(self, pred: Callable[[dict], bool], timeout_s: float = 60.0) -> dict:
        for e in self.events:
            if pred(e):
                return e
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            e = json.loads(msg.value())
            self.events.append(e)
            self.keys.add(msg.key())
            if pred(e):
                return e
        kinds = sorted({(e["kind"], e.get("app"), e.get("state")) for e in self.events}, key=str)
        raise AssertionError(f"no matching event within {timeout_s}s; seen {kinds}")

    def close(self) -> None:
        self.consumer.close()


def _metrics(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        return r.read().decode()


def _sample(text: str, prefix: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_cli_agent_with_real_clients_and_a_stalled_client(
    kafka_cluster_factory, unique_name, tmp_path
):
    # The broker reaps idle connections after 5 s; a stopped client cannot close its end.
    cluster = kafka_cluster_factory(brokers=1, overrides={"connections.max.idle.ms": "5000"})
    bootstrap = cluster.bootstrap_servers
    broker_port = cluster.nodes[0].port
    events_topic, data_topic = f"{unique_name}-events", f"{unique_name}-data"
    create_topics(bootstrap, {events_topic: 1, data_topic: 1})
    cfg_file = tmp_path / "agent.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "host": "it-host",
                "clusters": [
                    {
                        "name": "local",
                        "bootstrap_servers": bootstrap,
                        "listener_ports": [broker_port],
                        "metadata_refresh_s": 5,
                    }
                ],
                "apps": [{"match": "stalled_producer", "name": "orders-client"}],
            }
        )
    )
    metrics_address = f"127.0.0.1:{free_port()}"
    agent = subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "connmon"),
            "agent",
            "--config",
            str(cfg_file),
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            events_topic,
            "--interval",
            "0.5",
            "--summary-interval",
            "2",
            "--metrics-address",
            metrics_address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    reader = EventReader(bootstrap, events_topic)
    client = None
    try:
        # The agent scans and publishes before the client starts, and the client is stopped as
        # soon as it has sent: the broker reaps its connection 5 s after, while it cannot close
        # its end, however slow the machine is.
        reader.wait_for(lambda e: True)
        client = subprocess.Popen(
            [sys.executable, str(CLIENT), bootstrap, data_topic], stdout=subprocess.PIPE, text=True
        )
        assert client.stdout.readline().strip() == "ready"
        os.kill(client.pid, signal.SIGSTOP)  # a client whose network thread is stalled

        def is_client(e: dict) -> bool:
            return e.get("app") == "orders-client" and e.get("side") == "client"

        opened = reader.wait_for(lambda e: is_client(e) and e["kind"] == "opened")
        assert opened["pid"] == client.pid and opened["broker_id"] == 1
        assert opened["cluster"] == "local" and opened["host"] == "it-host"
        # The broker's end of the same connection, seen on the broker side.
        client_port = int(opened["conn"].split("->")[0].rsplit(":", 1)[1])
        broker_end = reader.wait_for(
            lambda e: (
                e.get("side") == "broker"
                and e.get("conn", "").endswith(f"->127.0.0.1:{client_port}")
            )
        )
        assert broker_end["app"] == "kafka-broker" and broker_end["broker_id"] == 1
        assert broker_end["peer_host"] == "127.0.0.1"
        cw = reader.wait_for(
            lambda e: is_client(e) and e["kind"] == "transition" and e["state"] == "CLOSE_WAIT"
        )
        assert cw["closed_by"] == "peer" and cw["broker_id"] == 1 and cw["pid"] == client.pid
        aged = reader.wait_for(
            lambda e: (
                is_client(e)
                and e["kind"] == "summary"
                and e["state"] == "CLOSE_WAIT"
                and e["oldest_state_age_s"] >= 2.0
            )
        )
        assert aged["count"] >= 1 and aged["broker_id"] == 1
        # `connmon agent --once --output -` prints the stuck socket with its age, app, broker.
        once = subprocess.run(
            [
                str(REPO / ".venv" / "bin" / "connmon"),
                "agent",
                "--config",
                str(cfg_file),
                "--once",
                "--output",
                "-",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert once.returncode == 0, once.stderr[-2000:]
        printed = [json.loads(line) for line in once.stdout.splitlines()]
        stuck = [e for e in printed if e.get("conn") == cw["conn"]]
        assert len(stuck) == 1 and stuck[0]["state"] == "CLOSE_WAIT"
        assert stuck[0]["app"] == "orders-client" and stuck[0]["broker_id"] == 1
        assert stuck[0]["state_age_s"] >= 2.0  # dated by the broker's FIN, not by agent start
        text = _metrics(metrics_address)
        assert _sample(text, 'connmon_agent_sockets{side="client",state="CLOSE_WAIT"}') >= 1
        assert _sample(text, 'connmon_agent_collector_info{collector="netlink"}') == 1
        assert _sample(text, "connmon_agent_up") == 1
        assert _sample(text, 'connmon_agent_events_produced_total{kind="summary"}') > 0
        assert _sample(
            text, 'connmon_agent_last_metadata_refresh_timestamp_seconds{cluster="local"}'
        )

        os.kill(client.pid, signal.SIGCONT)  # it wakes up, notices the FIN and closes
        closed = reader.wait_for(
            lambda e: is_client(e) and e["kind"] == "closed" and e["conn"] == cw["conn"]
        )
        assert closed["closed_by"] == "peer" and closed["lifetime_s"] > 0
        heartbeat = reader.wait_for(lambda e: e["kind"] == "heartbeat")
        assert heartbeat["collector"] == "netlink" and heartbeat["tcp_active_opens"] > 0
        assert reader.keys == {b"it-host"}
        seqs = [e["seq"] for e in reader.events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    finally:
        reader.close()
        if client is not None:
            client.kill()
            client.wait()
        agent.send_signal(signal.SIGTERM)
        try:
            out, _ = agent.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            out, _ = agent.communicate()
    assert agent.returncode == 0, out[-3000:]


def test_agent_survives_a_broker_outage(kafka_cluster_factory, unique_name):
    cluster = kafka_cluster_factory(brokers=1)
    bootstrap = cluster.bootstrap_servers
    create_topics(bootstrap, {unique_name: 1})
    cfg = config.build(
        {
            "clusters": [{"name": "local", "bootstrap_servers": bootstrap}],
            "kafka": {
                "bootstrap.servers": bootstrap,
                "message.timeout.ms": 3000,
                "linger.ms": 20,
                "log_level": 0,
            },
            "scan_interval_s": 0.1,
            "summary_interval_s": 0.1,
            "queue_size": 20,
            "host": "outage-host",
        },
        env={},
    )
    metrics = AgentMetrics()
    sink = KafkaSink(unique_name, cfg.host, cfg.kafka, metrics, 20)
    refresher = make_refresher(cfg, metrics)
    refresher.refresh_due()
    agent = Agent(cfg, sink, metrics, refresher)
    thread = threading.Thread(target=agent.run, daemon=True)
    reg = metrics.registry

    def value(name: str, labels: dict | None = None) -> float:
        return reg.get_sample_value(name, labels or {}) or 0.0

    def produced() -> float:
        return sum(
            value("connmon_agent_events_produced_total", {"kind": k})
            for k in ("opened", "transition", "closed", "summary", "heartbeat")
        )

    def wait(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            assert time.monotonic() < deadline, what
            time.sleep(0.1)

    thread.start()
    try:
        wait(lambda: produced() > 0, 30, "no event delivered while the broker is up")
        cluster.stop_node(1)
        stopped_at = time.time()
        wait(
            lambda: (
                value("connmon_agent_events_dropped_total", {"reason": "queue_full"}) > 0
                and value("connmon_agent_events_dropped_total", {"reason": "delivery_timeout"}) > 0
            ),
            60,
            "no drops counted while the broker is down",
        )
        assert thread.is_alive()
        assert value("connmon_agent_last_scan_timestamp_seconds") > stopped_at  # still scanning
        assert value("connmon_agent_up") == 1
        before = produced()
        cluster.start_node(1)
        wait(lambda: produced() > before + 10, 90, "delivery did not resume after the restart")
    finally:
        agent.stop_event.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert sink.close(10) == 0
    assert value("connmon_agent_up") == 0
