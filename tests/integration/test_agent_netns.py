"""The agent in the host's network namespace sees the sockets of processes in other namespaces
(what a Kubernetes pod is), on the real kernel: network namespaces and a veth pair made here,
a real KRaft broker listening on the host end, a real Kafka client inside the namespace."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from netns_helpers import Pod, veth_pod, wait_line

from streaming.agent.collector import Collector
from streaming.agent.netns import read_ns
from streaming.agent.records import ESTABLISHED
from streaming.stack.kafka import create_topics
from streaming.stack.ports import free_port

REPO = Path(__file__).parents[2]
CLIENT = REPO / "tests" / "fixtures" / "agent" / "stalled_producer.py"


@pytest.fixture
def pod() -> Iterator[Pod]:
    with veth_pod() as p:
        yield p


def test_sockets_of_another_namespace_are_dumped_through_sock_diag(pod: Pod) -> None:
    port = free_port()
    server = socket.create_server((pod.host_ip, port))
    client = pod.popen(
        sys.executable,
        "-c",
        "import socket, sys, time; s = socket.create_connection((sys.argv[1], int(sys.argv[2])));"
        " print('ready', flush=True); time.sleep(60)",
        pod.host_ip,
        str(port),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_line(client, "ready")
        conn, _ = server.accept()
        client_ns = read_ns("/proc", client.pid)
        assert client_ns is not None and client_ns != read_ns("/proc", "self")

        everywhere = Collector("netlink", namespaces="all").scan([port])
        ours = [r for r in everywhere if r.dport == port and r.src == pod.ns_ip]
        assert len(ours) == 1, everywhere
        (r,) = ours
        assert r.netns == client_ns and r.state == ESTABLISHED and r.inode > 0
        assert r.idle_ms is not None  # tcp_info came through: sock_diag, not /proc
        # The server's end lives in the host's namespace and is seen there too.
        assert any(r.sport == port and r.dst == pod.ns_ip for r in everywhere)
        # An agent that scans only its own namespace never sees the client's end.
        own = Collector("netlink", namespaces="own").scan([port])
        assert not [r for r in own if r.src == pod.ns_ip]
        conn.close()
    finally:
        client.kill()
        client.wait()
        server.close()


def test_a_close_wait_leak_inside_a_pod_is_attributed_by_an_agent_outside_it(
    pod: Pod, kafka_cluster_factory, unique_name, tmp_path
) -> None:
    # The broker listens on the host end of the veth and reaps idle connections after 5 s.
    cluster = kafka_cluster_factory(
        brokers=1, overrides={"connections.max.idle.ms": "5000"}, host=pod.host_ip
    )
    bootstrap = cluster.bootstrap_servers
    create_topics(bootstrap, {unique_name: 1})
    cfg_file = tmp_path / "agent.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "host": "node-1",
                "network_namespaces": "all",
                "clusters": [
                    {
                        "name": "local",
                        "bootstrap_servers": bootstrap,
                        "listener_ports": [cluster.nodes[0].port],
                    }
                ],
                "apps": [{"match": "stalled_producer", "name": "orders-in-pod"}],
            }
        )
    )
    client = pod.popen(
        sys.executable, str(CLIENT), bootstrap, unique_name, stdout=subprocess.PIPE, text=True
    )
    try:
        wait_line(client, "ready")
        os.kill(client.pid, signal.SIGSTOP)  # its network thread stalls; it cannot close
        leaked: list[dict] = []
        deadline = time.monotonic() + 60
        while not leaked and time.monotonic() < deadline:
            time.sleep(2)
            once = subprocess.run(
                [str(REPO / ".venv/bin/connmon"), "agent", "--config", str(cfg_file), "--once",
                 "--output", "-"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert once.returncode == 0, once.stderr[-2000:]
            events = [json.loads(line) for line in once.stdout.splitlines()]
            leaked = [
                e
                for e in events
                if e.get("side") == "client" and e.get("state") == "CLOSE_WAIT" and e.get("pid")
            ]
        assert leaked, "no CLOSE_WAIT client socket seen from outside the namespace"
        (e,) = leaked
        assert (e["pid"], e["app"], e["broker_id"], e["cluster"]) == (
            client.pid,
            "orders-in-pod",
            1,
            "local",
        )
        assert e["conn"].startswith(f"{pod.ns_ip}:")
        # The same connection's broker end, in the host's namespace, names the pod's address.
        assert any(
            ev.get("side") == "broker" and ev.get("peer_host") == pod.ns_ip for ev in events
        ), events
    finally:
        os.kill(client.pid, signal.SIGCONT)
        client.kill()
        client.wait()
