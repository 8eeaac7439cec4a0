"""A library only installed where a process runs is no proof that the process uses it: a plain
Python script leaking CLOSE_WAIT on raw sockets, run from a virtualenv where kafka-python is
installed, is named kafka-python by the agent with evidence ``installed``, and its finding gives
no kafka-python advice. Real agent, real broker, real Spark replay."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_helpers import agent_config, agent_writing, events_in

from streaming.detectors.config import DetectorConfig
from streaming.job.pipeline import replay

REPO = Path(__file__).parents[2]
APP = "raw-leak"
# Opens connections to the broker and never reads or closes them: once the broker's idle reaper
# closes its end, each stays in CLOSE_WAIT. Imports nothing of Kafka.
LEAK = """
import socket, sys, time
held = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(3)]
print("ready", flush=True)
time.sleep(600)
"""


def _venv_with_kafka_python(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    pip = [str(where / "bin" / "pip"), "install", "--no-deps", "--disable-pip-version-check"]
    r = subprocess.run([*pip, "kafka-python==2.0.2"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.skip(f"kafka-python could not be installed from PyPI: {r.stderr[-400:]}")
    return where / "bin" / "python"


def test_a_raw_socket_leak_beside_an_installed_kafka_python_gets_no_kafka_python_advice(
    kafka_cluster_factory, spark, tmp_path
):
    python = _venv_with_kafka_python(tmp_path / "venv")
    cluster = kafka_cluster_factory(brokers=1, overrides={"connections.max.idle.ms": "3000"})
    port = cluster.nodes[0].port
    cfg = agent_config(
        tmp_path / "agent.yaml", "evidence-host", cluster, [{"match": "import socket", "name": APP}]
    )
    out = tmp_path / "events.jsonl"
    leak = subprocess.Popen(
        [str(python), "-c", LEAK, "127.0.0.1", str(port)], stdout=subprocess.PIPE, text=True
    )
    agent = agent_writing(cfg, out)
    try:
        assert leak.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 90

        def stuck() -> bool:
            return any(
                e.get("app") == APP
                and e["kind"] == "summary"
                and e["state"] == "CLOSE_WAIT"
                and e["oldest_state_age_s"] >= 6.0
                for e in events_in(out)
            )

        while not stuck() and time.monotonic() < deadline:
            time.sleep(1.0)
        assert stuck(), f"no aged CLOSE_WAIT summary for {APP}: {events_in(out)[-5:]}"
    finally:
        leak.kill()
        leak.wait()
        agent.send_signal(signal.SIGTERM)
        log, _ = agent.communicate(timeout=60)
    assert agent.returncode == 0, log[-3000:]

    mine = [e for e in events_in(out) if e.get("app") == APP]
    # (Summaries of a state the sockets left, and TIME_WAIT, carry no process: no library.)
    named = {
        (e["client_library"], e.get("client_library_evidence"))
        for e in mine
        if e.get("client_library") is not None
    }
    assert named == {("kafka-python", "installed")}, named

    result = replay(spark, str(out), DetectorConfig().replace(close_wait_grace_s=3.0))
    found = [f for f in result.findings if f["app"] == APP]
    assert {f["kind"] for f in found} == {"close_wait_buildup"}, found
    for f in found:
        assert (f["client_library"], f["client_library_evidence"]) == ("kafka-python", "installed")
        assert "kafka-python" not in f["recommendation"], f["recommendation"]
        # The usual suspects of an unidentified library instead.
        assert "a known leak in Sarama and kafka-rust" in f["recommendation"]
