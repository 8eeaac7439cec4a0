"""Running the real agent from an integration test: writing its events to a file, reading
them back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).parents[2]


def events_in(path: Path) -> list[dict]:
    """The events an agent wrote to ``path`` so far (none before its first write; a last line
    the agent is still writing is left for the next read)."""
    if not path.exists():
        return []
    whole = path.read_text().rpartition("\n")[0]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def agent_writing(config: Path, out: Path) -> subprocess.Popen:
    """``connmon agent`` with ``config``, its events to ``out``: scans every 0.5 s, summaries
    every 2 s. Stop it with SIGTERM."""
    return subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "connmon"), "agent", "--config", str(config),
            "--output", str(out), "--interval", "0.5", "--summary-interval", "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def wait_for_ebpf(agent: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    """Until the agent writing ``log`` says its eBPF collector is attached (fails with the log
    if the agent exits or the collector does not attach in time)."""
    deadline = time.monotonic() + timeout_s
    while "eBPF collector attached" not in log.read_text():
        assert agent.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def agent_config(path: Path, host: str, cluster: Any, apps: Iterable[dict] = ()) -> Path:
    """An agent configuration at ``path`` for one local ``cluster`` (``KafkaCluster``): its
    brokers' ports are the broker side on this host, metadata refreshed every 5 s."""
    path.write_text(
        yaml.safe_dump(
            {
                "host": host,
                "clusters": [
                    {
                        "name": "local",
                        "bootstrap_servers": cluster.bootstrap_servers,
                        "listener_ports": [n.port for n in cluster.nodes],
                        "metadata_refresh_s": 5,
                    }
                ],
                "apps": list(apps),
            }
        )
    )
    return path


# A python a non-root uid may run: the venv's lives under /root (mode 0700).
SYSTEM_PYTHON = "/usr/bin/python3"
_HOLDER = """
import socket, sys, time
port = int(sys.argv[1])
server = socket.create_server(("127.0.0.1", port))
client = socket.create_connection(("127.0.0.1", port))
conn, _ = server.accept()
conn.close()  # the "broker" closes: the client's end, kept open, sits in CLOSE_WAIT
print("ready", flush=True)
time.sleep(600)
"""


@dataclass
class Holder:
    """A process of another uid in a network namespace of its own, holding a client socket in
    CLOSE_WAIT to ``127.0.0.1:port`` in that namespace."""

    netns: str
    port: int
    pid: int


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@contextmanager
def close_wait_in_netns(uid: int, app: str, why_root: str) -> Iterator[Holder]:
    """A ``Holder`` of ``uid`` whose command line names ``app``; skips (naming the reason) where
    root, setpriv, ip, the system python or network namespaces are missing."""
    import pytest

    from streaming.stack.ports import free_port

    if os.geteuid() != 0:
        pytest.skip(f"needs root: {why_root}")
    missing = [t for t in ("setpriv", "ip") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} (util-linux, iproute2)")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"needs {SYSTEM_PYTHON} for the process of another uid")
    name = f"cm{app[:6]}{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    holder = None
    try:
        _ip("-n", name, "link", "set", "lo", "up").check_returncode()
        port = free_port()
        holder = subprocess.Popen(
            ["ip", "netns", "exec", name, "setpriv", f"--reuid={uid}", f"--regid={uid}",
             "--clear-groups", "--", SYSTEM_PYTHON, "-c", _HOLDER, str(port), app],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "ready", holder.stderr.read() if holder.stderr else line
        yield Holder(name, port, holder.pid)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        _ip("netns", "del", name)


def close_wait_leak(endpoint: str, app: str) -> subprocess.Popen:
    """A process (``--app <app>`` in its command line) that connects to the broker at
    ``endpoint`` and never reads or closes: once the broker reaps the idle connection, its
    socket stays in CLOSE_WAIT."""
    host, port = endpoint.rsplit(":", 1)
    code = "import socket,sys,time; s=socket.create_connection((sys.argv[1], int(sys.argv[2])))"
    return subprocess.Popen([sys.executable, "-c", code + "; time.sleep(900)", host, port,
                             "--app", app])  # fmt: skip
