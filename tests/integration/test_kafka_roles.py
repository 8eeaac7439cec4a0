"""Kafka's own brokers are told apart from applications: on a real three-broker KRaft cluster,
the real agent names each broker process's connections to the other brokers (its replica
fetchers) client side, app kafka-broker, role broker."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from agent_helpers import agent_config, agent_writing, events_in

from streaming.stack.kafka import create_topics


def test_brokers_replicating_to_each_other_have_the_role_broker(
    kafka_cluster_factory, tmp_path: Path
) -> None:
    cluster = kafka_cluster_factory(brokers=3)
    cfg = agent_config(tmp_path / "agent.yaml", "roles-host", cluster)
    # Replication needs a partition with followers.
    create_topics(cluster.bootstrap_servers, {"replicated": 3}, replication=3)
    out = tmp_path / "events.jsonl"
    agent = agent_writing(cfg, out)

    def brokers_as_clients() -> list[dict]:
        return [
            e
            for e in events_in(out)
            if e["kind"] == "summary" and e["side"] == "client" and e["app"] == "kafka-broker"
        ]

    def agents_own() -> list[dict]:
        return [
            e for e in events_in(out) if e.get("app") == "connmon-agent" and e["side"] == "client"
        ]

    try:
        deadline = time.monotonic() + 90
        # The brokers' connections to each other and the agent's own metadata connection, which
        # it may open after the brokers' are seen (a loaded machine).
        while len({e["broker_id"] for e in brokers_as_clients()}) < 3 or not agents_own():
            assert time.monotonic() < deadline, events_in(out)[-5:]
            time.sleep(1.0)
    finally:
        agent.send_signal(signal.SIGTERM)
        log, _ = agent.communicate(timeout=60)
    assert agent.returncode == 0, log[-3000:]
    summaries = [e for e in brokers_as_clients() if e["count"] > 0]
    assert summaries and {e.get("process_role") for e in summaries} == {"broker"}, summaries
    # Applications carry no role: connmon's own agent is one.
    apps = agents_own()
    assert apps and all(e.get("process_role") is None for e in apps)
