"""The agent in the host's network namespace sees the sockets of processes in other namespaces
(what a Kubernetes pod is), on the real kernel: network namespaces and a veth pair made here,
a real KRaft broker listening on the host end, a real Kafka client inside the namespace."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from streaming.agent.collector import Collector
from streaming.agent.netns import read_ns
from streaming.agent.records import ESTABLISHED
from streaming.stack.kafka import create_topics
from streaming.stack.ports import free_port

REPO = Path(__file__).parents[2]
CLIENT = REPO / "tests" / "fixtures" / "agent" / "stalled_producer.py"


@dataclass
class Pod:
    """A network namespace joined to the host by a veth pair: host end .1, namespace end .2."""

    name: str
    host_ip: str
    ns_ip: str

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *args], **kw)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def pod() -> Iterator[Pod]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create network namespaces")
    tag = uuid.uuid4().hex[:6]
    name, host_if, ns_if = f"cm{tag}", f"cmh{tag}", f"cmn{tag}"
    net = 16 + int(tag[:2], 16) % 200
    p = Pod(name, f"10.213.{net}.1", f"10.213.{net}.2")
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{p.host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", name, "addr", "add", f"{p.ns_ip}/30", "dev", ns_if)
        _ip("-n", name, "link", "set", ns_if, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield p
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _wait_line(proc: subprocess.Popen, want: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == want:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before printing {want!r}")
    raise AssertionError(f"no {want!r} within {timeout_s}s")


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
        _wait_line(client, "ready")
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
        _wait_line(client, "ready")
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
