"""Network namespaces: which ones exist, and a collector that dumps each (fixture /proc trees)."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from streaming.agent import netns
from streaming.agent.collector import Collector
from streaming.agent.netns import NamespaceTable, parse_ns_link
from streaming.agent.records import CLOSE_WAIT, ESTABLISHED, SocketRecord

TCP_HEADER = "  sl  local_address rem_address   st tx rx tr tm retr uid timeout inode\n"


def _tcp_line(state: int, sport: int, dport: int, inode: int) -> str:
    return (
        f"   0: 0200000A:{sport:04X} 0100000A:{dport:04X} {state:02X} 00000000:00000000"
        f" 00:00000000 00000000  1000        0 {inode} 1 0000000000000000 20 4 30 10 -1\n"
    )


def _proc(root: Path, pids: dict[int, int], own_pid: int) -> Path:
    """A /proc tree: each pid's ns/net link names its namespace inode; ``self`` is own_pid."""
    for pid, ns in pids.items():
        (root / str(pid) / "ns").mkdir(parents=True, exist_ok=True)
        link = root / str(pid) / "ns" / "net"
        if link.is_symlink():
            link.unlink()
        os.symlink(f"net:[{ns}]", link)
    if not (root / "self").exists():
        os.symlink(str(own_pid), root / "self")
    return root


@pytest.mark.parametrize(
    ("link", "inode"),
    [("net:[4026531840]", 4026531840), ("mnt:[4026531840]", None), ("net:[]", None), ("", None)],
)
def test_parse_ns_link(link: str, inode: int | None) -> None:
    assert parse_ns_link(link) == inode


def test_namespaces_are_listed_once_each_with_their_lowest_pid(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 7: 200, 5: 200, 9: 300}, own_pid=1)
    (root / "12").mkdir()  # another user's process, its ns link not readable
    table = NamespaceTable(str(root))
    assert table.own == 100
    assert table.refresh() == {100: 1, 200: 5, 300: 9}
    assert table.unreadable == 1


def test_a_pid_moved_to_another_namespace_is_seen_at_the_next_recheck(tmp_path) -> None:
    now = [0.0]
    root = _proc(tmp_path, {1: 100, 8: 100}, own_pid=1)
    table = NamespaceTable(str(root), recheck_s=30.0, clock=lambda: now[0])
    assert table.refresh() == {100: 1}
    _proc(root, {8: 400}, own_pid=1)  # a runtime moved the container's process
    now[0] = 10.0
    assert table.refresh() == {100: 1}  # cached until the recheck
    now[0] = 31.0
    assert table.refresh() == {100: 1, 400: 8}


def test_a_gone_pid_takes_its_namespace_along(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 8: 400}, own_pid=1)
    table = NamespaceTable(str(root))
    assert table.refresh() == {100: 1, 400: 8}
    (root / "8" / "ns" / "net").unlink()
    (root / "8" / "ns").rmdir()
    (root / "8").rmdir()
    assert table.refresh() == {100: 1}


def test_namespace_links_are_read_again_only_when_the_process_list_changes(
    tmp_path, monkeypatch
) -> None:
    root = _proc(tmp_path, {1: 100, 7: 200}, own_pid=1)
    table = NamespaceTable(str(root))
    assert table.refresh() == {100: 1, 200: 7}
    reads: list[int] = []
    real = netns.read_ns
    monkeypatch.setattr(netns, "read_ns", lambda r, pid: reads.append(pid) or real(r, pid))
    assert table.refresh() == {100: 1, 200: 7} and reads == []
    _proc(root, {9: 300}, own_pid=1)
    assert table.refresh() == {100: 1, 200: 7, 300: 9} and reads == [9]
    (root / "12").mkdir()  # not readable: tried again on every refresh
    reads.clear()
    table.refresh()
    table.refresh()
    assert reads == [12, 12] and table.unreadable == 1


class FakeSock:
    """Stands in for a netlink socket opened in another namespace (the dump is faked too)."""

    def __init__(self, ns_path: str) -> None:
        self.ns_path = ns_path
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _rec(state: int, sport: int) -> SocketRecord:
    return SocketRecord(socket.AF_INET, state, "10.0.0.2", sport, "10.0.0.1", 9092, sport, 0)


def test_every_namespace_is_dumped_through_its_own_socket(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 20: 200, 30: 300}, own_pid=1)
    opened: list[FakeSock] = []

    def open_in(path: str) -> FakeSock:
        opened.append(FakeSock(path))
        return opened[-1]

    by_ns = {
        None: [_rec(ESTABLISHED, 40000)],  # the agent's own namespace: no socket passed
        f"{root}/20/ns/net": [_rec(CLOSE_WAIT, 40000)],  # the same 4-tuple in another pod
        f"{root}/30/ns/net": [],
    }

    def dump(ports, sock=None):
        assert ports == [9092]
        return list(by_ns[sock.ns_path if sock else None])

    c = Collector("netlink", str(root), dump, namespaces="all", open_in=open_in)
    recs = c.scan([9092])
    assert sorted((r.netns, r.state) for r in recs) == [(100, ESTABLISHED), (200, CLOSE_WAIT)]
    assert len({r.key for r in recs}) == 2  # same 4-tuple, two sockets
    assert c.namespaces_scanned == 3
    c.scan([9092])
    assert len(opened) == 2  # sockets are kept between scans, not reopened
    # Pod 30 ends: its namespace's socket is closed so the namespace is not kept alive.
    for p in (root / "30" / "ns" / "net", root / "30" / "ns", root / "30"):
        p.unlink() if p.is_symlink() else p.rmdir()
    c.scan([9092])
    assert [s.closed for s in opened] == [False, True] and c.namespaces_scanned == 2


def test_a_namespace_the_agent_may_not_enter_is_read_from_proc(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 20: 200}, own_pid=1)
    (root / "20" / "net").mkdir()
    (root / "20" / "net" / "tcp").write_text(TCP_HEADER + _tcp_line(CLOSE_WAIT, 40001, 9092, 77))
    tries = []

    def open_in(path: str):
        tries.append(path)
        raise PermissionError(errno.EPERM, "Operation not permitted")

    c = Collector("netlink", str(root), lambda ports, sock=None: [], "all", open_in=open_in)
    for _ in range(2):
        (r,) = c.scan([9092])
        assert (r.netns, r.state, r.sport, r.inode, r.idle_ms) == (200, CLOSE_WAIT, 40001, 77, None)
    assert len(tries) == 1 and c.errors["enter"] == 1  # not retried on every scan


def test_a_process_gone_before_its_namespace_is_entered_is_no_error(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 20: 200}, own_pid=1)

    def open_in(path: str):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    c = Collector("netlink", str(root), lambda ports, sock=None: [], "all", open_in=open_in)
    assert c.scan([9092]) == []
    assert not c.errors


def test_a_failed_dump_closes_the_socket_and_reopens_next_scan(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 20: 200}, own_pid=1)
    opened: list[FakeSock] = []
    fail = [True]

    def open_in(path: str) -> FakeSock:
        opened.append(FakeSock(path))
        return opened[-1]

    def dump(ports, sock=None):
        if sock is not None and fail[0]:
            raise OSError(errno.EIO, "torn dump")
        return [_rec(ESTABLISHED, 40000)] if sock else []

    c = Collector("netlink", str(root), dump, "all", open_in=open_in)
    assert c.scan(None) == []  # no /proc/20/net/tcp in this tree either
    assert opened[0].closed and c.errors["dump"] == 1
    fail[0] = False
    (r,) = c.scan(None)
    assert r.netns == 200 and len(opened) == 2


def test_own_mode_never_looks_at_other_namespaces(tmp_path) -> None:
    root = _proc(tmp_path, {1: 100, 20: 200}, own_pid=1)

    def open_in(path: str):
        raise AssertionError("own mode entered a namespace")

    c = Collector("netlink", str(root), lambda ports: [_rec(ESTABLISHED, 1)], open_in=open_in)
    (r,) = c.scan(None)
    assert r.netns == 0


def test_bad_namespace_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="namespaces"):
        Collector(namespaces="pods")


def test_namespace_figures_reach_the_agent_metrics(tmp_path) -> None:
    from streaming.agent.metrics import AgentMetrics

    root = _proc(tmp_path, {1: 100, 20: 200, 30: 300}, own_pid=1)
    (root / "40").mkdir()  # a process whose namespace cannot be read

    def open_in(path: str):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    c = Collector("netlink", str(root), lambda ports, sock=None: [], "all", open_in=open_in)
    m = AgentMetrics()
    for _ in range(2):
        c.scan(None)
        m.set_namespaces(c.namespaces_scanned, c.table.unreadable, c.errors)
    get = m.registry.get_sample_value
    assert get("connmon_agent_network_namespaces") == 3
    assert get("connmon_agent_unreadable_processes") == 1
    # Two namespaces refused setns once each; the counter follows the totals, not the calls.
    assert get("connmon_agent_namespace_errors_total", {"reason": "enter"}) == 2
