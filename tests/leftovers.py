"""What a test session left behind: processes it started that still run, TCP connections the
test process itself still holds, librdkafka clients still alive. ``tests/conftest.py`` fails
the run on any of them once every fixture is torn down.

Processes are found by an environment marker that the session sets in its own environment and
every child inherits (``MARKER=<token>``). The functions take the ``/proc`` root as an argument,
so they can be tried on a fake tree."""

from __future__ import annotations

import gc
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MARKER = "CONNMON_TEST_SESSION"
# /proc/net/tcp states of a connection in use or half-closed (LISTEN, TIME_WAIT, CLOSE are not)
_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "08": "CLOSE_WAIT"}


@dataclass(frozen=True)
class Leftover:
    """One thing still there: a process, a connection or a client handle."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def new_token() -> str:
    """A fresh marker value for one test session."""
    return uuid.uuid4().hex


def marked_processes(
    token: str, proc: Path = Path("/proc"), skip: set[int] | None = None
) -> list[Leftover]:
    """Live processes whose environment holds ``MARKER=token`` (not those in ``skip``)."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in (skip or set()):
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            if needle not in env:
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(Leftover("process", f"pid {entry.name}: {cmd.strip()[:200]}"))
    return found


def _addr(hex_addr: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080`` (IPv6 addresses are shown as stored)."""
    host, port = hex_addr.split(":")
    if len(host) == 8:
        host = ".".join(str(b) for b in reversed(bytes.fromhex(host)))
    return f"{host}:{int(port, 16)}"


def open_connections(pid: str = "self", proc: Path = Path("/proc")) -> list[Leftover]:
    """TCP connections (established, connecting or half-closed) that process ``pid`` holds."""
    inodes = set()
    fd_dir = proc / pid / "fd"
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / pid / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[9] in inodes and f[3] in _STATES:
                found.append(
                    Leftover("connection", f"{_STATES[f[3]]} {_addr(f[1])} -> {_addr(f[2])}")
                )
    return found


def kafka_clients() -> list[Leftover]:
    """librdkafka clients (producers, consumers, admin clients) still alive in this process."""
    try:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient
    except ImportError:
        return []
    gc.collect()
    types = (Producer, Consumer, AdminClient)
    return [Leftover("kafka client", repr(o)) for o in gc.get_objects() if isinstance(o, types)]


def find(
    token: str,
    proc: Path = Path("/proc"),
    grace_s: float = 5.0,
    clients: Callable[[], list[Leftover]] = kafka_clients,
) -> list[Leftover]:
    """Everything left behind, after waiting up to ``grace_s`` for it to go away."""
    skip = {os.getpid()}
    deadline = time.monotonic() + grace_s
    while True:
        found = [*marked_processes(token, proc, skip), *open_connections("self", proc), *clients()]
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)
