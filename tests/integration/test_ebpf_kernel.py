"""The eBPF collector on the real kernel, with a real KRaft broker: connections far shorter than
a scan are all counted and attributed to their process, refused connects are counted per process
and broker, and a CLOSE_WAIT left by the broker is still seen by the scans with its age.

Skipped, with the reason, where the kernel or the agent's privileges do not allow eBPF."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from agent_helpers import events_in, wait_for_ebpf
from job_helpers import wait_for

from streaming.agent import ebpf
from streaming.stack.ports import free_port

REPO = Path(__file__).parents[2]
WHY_NOT = ebpf.check().why_not
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"eBPF not usable here: {WHY_NOT}")

N_SHORT = 60  # connections of 50 ms each
M_REFUSED = 25  # connects to the stopped broker
IDLE_REAP_MS = 2000  # the broker's connections.max.idle.ms
CLOSE_WAIT_HOLD_S = 8  # the client keeps one idle connection open this long

CLIENT = textwrap.dedent(
    """
    import socket, sys, time
    port, dead, n, m, hold = (int(a) for a in sys.argv[1:6])
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        time.sleep(0.05)
        s.close()
    for _ in range(m):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", dead))
        except ConnectionRefusedError:
            pass
        s.close()
    # An idle connection: the broker reaps it, this process keeps its end open (CLOSE_WAIT).
    s = socket.create_connection(("127.0.0.1", port))
    time.sleep(hold)
    s.close()
    print("done", flush=True)
    """
)


def _lost(port: int) -> int:
    """The agent's count of state changes its eBPF collector missed."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("connmon_agent_ebpf_events_lost_total "):
                return int(float(line.split()[1]))
    raise AssertionError("connmon_agent_ebpf_events_lost_total is not exported")


def test_short_connections_refused_connects_and_close_wait(kafka_cluster_factory, tmp_path) -> None:
    cluster = kafka_cluster_factory(overrides={"connections.max.idle.ms": str(IDLE_REAP_MS)})
    port = cluster.nodes[0].port
    dead = free_port()  # a broker that is stopped: nothing listens on its address
    metrics_port = free_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "host": "it-host",
                "scan_interval_s": 1,
                "summary_interval_s": 5,
                "metrics_address": f"127.0.0.1:{metrics_port}",
                "ebpf": "on",
                "clusters": [
                    {"name": "local", "endpoints": [f"1@127.0.0.1:{port}", f"2@127.0.0.1:{dead}"]}
                ],
                "apps": [{"match": "connmon-ebpf-client", "name": "ebpf-client"}],
            }
        )
    )
    out, log = tmp_path / "events.jsonl", tmp_path / "agent.log"
    agent = _agent(cfg, out, log)
    try:
        deadline = time.monotonic() + 60
        # bpftrace attaches in the background, after the first scan.
        while (
            not out.exists()
            or '"heartbeat"' not in out.read_text()
            or "eBPF collector attached" not in log.read_text()
        ):
            assert agent.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert "+ ebpf" in log.read_text()
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, str(port), str(dead), str(N_SHORT), str(M_REFUSED),
             str(CLOSE_WAIT_HOLD_S), "connmon-ebpf-client"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert client.stdout.strip() == "done", client.stderr
        time.sleep(3.5)  # two scans and one print of the kernel's counts

        # A slow agent: until a scan has seen the client close its CLOSE_WAIT connection, its
        # last act.
        wait_for(
            "a scan that saw the client's last close",
            lambda: [
                e for e in events_in(out)
                if e["kind"] == "closed" and e.get("app") == "ebpf-client"
                and e.get("closed_by") == "peer"
            ],
            timeout_s=30,
            poll_s=0.5,
        )  # fmt: skip
        lost = _lost(metrics_port)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
    events = events_in(out)
    text = log.read_text()
    assert "Traceback" not in text, text

    def mine(e: dict, broker: int) -> bool:
        return e.get("side") == "client" and e.get("broker_id") == broker

    # Every 50 ms connection: counted by the kernel, or (when a scan happened to see it open)
    # reported by the scans; never both, never missed.
    short = [e for e in events if e["kind"] == "short_lived" and mine(e, 1)]
    scanned = [
        e for e in events
        if e["kind"] == "opened" and e.get("open_reason") == "new" and mine(e, 1)
    ]  # fmt: skip
    # Only the client's: other processes on this host talk to the broker too.
    short = [e for e in short if e["app"] == "ebpf-client"]
    scanned = [e for e in scanned if e["app"] == "ebpf-client"]
    established = [e for e in short if e.get("connect_error") is None]
    total = sum(e["count"] for e in established) + len(scanned)
    # + the CLOSE_WAIT one. A run the kernel skipped (a BPF program already running on that
    # CPU) is one state change unseen, and is counted as lost instead.
    assert N_SHORT + 1 - lost <= total <= N_SHORT + 1, (total, len(scanned), lost)
    attributed = [e for e in events if mine(e, 1) and e.get("app") == "unknown"]
    assert not [e for e in attributed if e.get("pid") is not None], attributed
    assert {e["pid"] for e in established + scanned} == {client_pid(events)}
    assert all(e["closed_by"] == "local" for e in established)
    assert all(e["lifetime_max_s"] < 1.0 for e in established)

    refused = [e for e in events if e["kind"] == "short_lived" and mine(e, 2)]
    assert M_REFUSED - lost <= sum(e["count"] for e in refused) <= M_REFUSED
    assert {(e["app"], e["connect_error"], e["closed_by"]) for e in refused} == {
        ("ebpf-client", "refused", "unknown")
    }

    cw = [
        e for e in events
        if e["kind"] == "transition" and e["state"] == "CLOSE_WAIT" and mine(e, 1)
    ]  # fmt: skip
    assert cw and cw[0]["app"] == "ebpf-client" and cw[0]["closed_by"] == "peer"
    closed = [
        e for e in events
        if e["kind"] == "closed" and mine(e, 1) and e.get("closed_by") == "peer"
        and e["app"] == "ebpf-client"
    ]  # fmt: skip
    assert closed, "the CLOSE_WAIT connection's close"
    # Its age in CLOSE_WAIT, dated by the broker's FIN: from the reap to the client's close.
    ages = [
        e.get("state_age_s", e.get("oldest_state_age_s"))
        for e in events
        if mine(e, 1) and e.get("state") == "CLOSE_WAIT"
    ]
    assert max(ages) >= CLOSE_WAIT_HOLD_S - IDLE_REAP_MS / 1000 - 3.0, ages


def _agent(cfg: Path, out: Path, log: Path) -> subprocess.Popen:
    """The real agent with ``cfg``, its events to ``out`` and its log to ``log``."""
    with log.open("w") as log_f:
        return subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "connmon"), "agent", "--config", str(cfg),
             "--output", str(out)],
            stdout=log_f, stderr=subprocess.STDOUT,
        )  # fmt: skip


def client_pid(events: list[dict]) -> int:
    pids = {e["pid"] for e in events if e.get("app") == "ebpf-client" and e.get("pid")}
    assert len(pids) == 1, pids
    return pids.pop()


# A client that lives for one request: a librdkafka producer that connects, sends one record and
# exits, far within one scan.
ONE_REQUEST = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 0})
    p.produce(sys.argv[2], b"x")
    assert p.flush(10) == 0
    """
)
RUNS = 4


def test_a_process_that_lives_for_one_request_is_identified_at_its_connect(
    kafka_cluster_factory, tmp_path
) -> None:
    """Scans every 10 s hardly ever see these processes: their library is read when the kernel
    reports their connect, so their connections still name librdkafka."""
    cluster = kafka_cluster_factory()
    port = cluster.nodes[0].port
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "host": "it-host",
                "scan_interval_s": 10,
                "summary_interval_s": 60,
                "ebpf": "on",
                "clusters": [{"name": "local", "endpoints": [f"1@127.0.0.1:{port}"]}],
                "apps": [{"match": "connmon-one-request", "name": "one-request"}],
            }
        )
    )
    out, log = tmp_path / "events.jsonl", tmp_path / "agent.log"
    agent = _agent(cfg, out, log)
    try:
        wait_for_ebpf(agent, log)
        pids = []
        for _ in range(RUNS):
            run = subprocess.Popen(
                [sys.executable, "-c", ONE_REQUEST, cluster.bootstrap_servers, "one-request",
                 "connmon-one-request"],
            )  # fmt: skip
            assert run.wait(60) == 0
            pids.append(run.pid)
        # The kernel's counts are printed each second; the scan reports them.
        deadline = time.monotonic() + 60
        while {e.get("pid") for e in _events_of(out, "one-request")} < set(pids):
            assert time.monotonic() < deadline, _events_of(out, "one-request")
            time.sleep(1.0)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
    mine = _events_of(out, "one-request")
    assert any(e["kind"] == "short_lived" for e in mine), mine
    assert {(e["pid"], e.get("client_library")) for e in mine} == {
        (pid, "librdkafka") for pid in pids
    }


def _events_of(path: Path, app: str) -> list[dict]:
    if not path.exists():
        return []
    return [e for e in events_in(path) if e.get("app") == app and e.get("side") == "client"]
