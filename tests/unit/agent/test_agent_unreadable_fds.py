"""What the agent reports when its privileges hide processes' open files: the count, the metric
and one warning naming the missing capability. Permission errors are simulated (the tests may
run as root, whom file modes do not stop)."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import pytest
from test_agent_procs_apps import make_proc

from streaming.agent import config, procs
from streaming.agent.collector import Collector
from streaming.agent.metrics import AgentMetrics
from streaming.agent.procs import ProcessTable, fd_access_hint, socket_inodes
from streaming.agent.records import CLOSE_WAIT, SocketRecord
from streaming.agent.runner import Agent, make_refresher

pytestmark = pytest.mark.unit

PTRACE, DAC = 1 << procs.CAP_SYS_PTRACE, 1 << procs.CAP_DAC_READ_SEARCH


def _deny(monkeypatch: pytest.MonkeyPatch, listing: set[str], links: set[str]) -> None:
    """``os.listdir`` of the fd directories in ``listing`` and ``os.readlink`` under those in
    ``links`` fail with EACCES, as for another user's process without the capabilities."""
    real_listdir, real_readlink = os.listdir, os.readlink

    def listdir(path: str = ".") -> list[str]:
        if str(path) in listing:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_listdir(path)

    def readlink(path: str, *a, **kw) -> str:
        if os.path.dirname(str(path)) in links:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_readlink(path, *a, **kw)

    monkeypatch.setattr(procs.os, "listdir", listdir)
    monkeypatch.setattr(procs.os, "readlink", readlink)


def test_the_hint_names_the_missing_capabilities() -> None:
    assert "lacks CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (" in fd_access_hint(0)
    assert "lacks CAP_DAC_READ_SEARCH (" in fd_access_hint(PTRACE)
    assert "lacks CAP_SYS_PTRACE (" in fd_access_hint(DAC)
    both = fd_access_hint(PTRACE | DAC)
    assert "lacks" not in both and "security module" in both


def test_a_denied_listing_or_link_is_told_apart_from_a_gone_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_proc(tmp_path, 10, ["java"], [1001])
    make_proc(tmp_path, 20, ["java"], [2001])
    make_proc(tmp_path, 30, ["java"], [3001])
    _deny(monkeypatch, {f"{tmp_path}/20/fd"}, {f"{tmp_path}/30/fd"})
    assert socket_inodes(f"{tmp_path}/10/fd") == ({1001}, None)
    inodes, denied = socket_inodes(f"{tmp_path}/20/fd")
    assert inodes == set() and isinstance(denied, PermissionError)
    inodes, denied = socket_inodes(f"{tmp_path}/30/fd")
    assert inodes == set() and isinstance(denied, PermissionError)
    assert socket_inodes(f"{tmp_path}/40/fd") == (set(), None)  # gone: not an error


def test_unreadable_fd_tables_are_counted_and_warned_about_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    make_proc(tmp_path, 10, ["java"], [1001])
    make_proc(tmp_path, 20, ["java"], [2001])
    make_proc(tmp_path, 30, ["java"], [3001])
    _deny(monkeypatch, {f"{tmp_path}/20/fd"}, {f"{tmp_path}/30/fd"})
    table = ProcessTable(tmp_path, caps=PTRACE)
    with caplog.at_level(logging.WARNING, logger="streaming.agent.procs"):
        got = table.lookup({1001, 2001, 3001})
        table.lookup({2001, 3001, 4001})  # rereads every pid for the missing ones
    assert {i: p.pid for i, p in got.items()} == {1001: 10}
    assert table.unreadable_fd_tables == 2
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "of 2 process(es)" in warning and "lacks CAP_DAC_READ_SEARCH" in warning
    # A process that exits is no longer counted; one that becomes readable neither.
    shutil.rmtree(tmp_path / "20")
    monkeypatch.undo()
    make_proc(tmp_path, 30, ["java"], [3001, 3002])
    assert table.lookup({3002})[3002].pid == 30
    assert table.unreadable_fd_tables == 0


def test_the_agent_exports_the_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_proc(tmp_path, 20, ["java"], [2001])
    _deny(monkeypatch, {f"{tmp_path}/20/fd"}, set())
    cfg = config.build(
        {"clusters": [{"name": "local", "endpoints": ["1@127.0.0.1:9092"]}]},
        flags={"proc_root": str(tmp_path), "host": "web-1"},
    )
    m = AgentMetrics()
    sink = type("S", (), {"send": lambda self, e: None, "pump": lambda self: None})()
    leak = SocketRecord(2, CLOSE_WAIT, "127.0.0.1", 40001, "127.0.0.1", 9092, 2001, 0)
    agent = Agent(
        cfg, sink, m, make_refresher(cfg, m),
        collector=Collector("netlink", netlink_dump=lambda ports: [leak]),
        procs=ProcessTable(tmp_path, caps=0), clock=lambda: 1000.0,
    )  # fmt: skip
    agent.scan()
    assert m.registry.get_sample_value("connmon_agent_unreadable_fd_tables") == 1
