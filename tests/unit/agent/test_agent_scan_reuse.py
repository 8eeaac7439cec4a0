"""Steady scans reuse records: a socket whose state and inode did not change keeps its
SocketRecord (new tcp_info numbers written into it), and the agent emits the same events as
with fresh records every scan."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from streaming.agent import config, netlink
from streaming.agent.collector import Collector
from streaming.agent.metrics import AgentMetrics
from streaming.agent.procs import ProcessTable
from streaming.agent.records import (
    CLOSE_WAIT,
    ESTABLISHED,
    FIN_WAIT1,
    LAST_ACK,
    TIME_WAIT,
)
from streaming.agent.runner import Agent, make_refresher

INET_DIAG_SHUTDOWN = 8
INET_DIAG_SOCKOPT = 22
INET_DIAG_SKV6ONLY = 11


def _nla(atype: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + bytes(-len(raw) % 4)


def _tcp_info(snd: int, rcv: int, ack: int = 0, rtt: int = 300, sent: int = 0) -> bytes:
    buf = bytearray(232)
    struct.pack_into("=IxxxxII", buf, 44, snd, rcv, ack)
    struct.pack_into("=I", buf, 68, rtt)
    struct.pack_into("=QQ", buf, 120, sent, 2 * sent)
    return bytes(buf)


@dataclass
class Sock:
    """One socket as the kernel would list it in a dump."""

    cookie: int
    state: int
    sport: int
    inode: int
    snd: int = 0
    rcv: int = 0
    sent: int = 0
    family: int = socket.AF_INET
    dport: int = 9092
    before_info: bytes = b""  # attributes the kernel puts ahead of tcp_info
    after_info: bytes = b""

    def message(self) -> bytes:
        fam = self.family
        src = "10.0.0.5" if fam == socket.AF_INET else "fd00::5"
        dst = "10.0.0.1" if fam == socket.AF_INET else "fd00::1"

        def raw(a: str) -> bytes:
            return socket.inet_pton(fam, a).ljust(16, b"\0")

        body = struct.pack("=BBBB", fam, self.state, 0, 0)
        body += struct.pack(">HH", self.sport, self.dport) + raw(src) + raw(dst)
        body += struct.pack("=IQ", 0, self.cookie)
        body += struct.pack("=IIIII", 0, 0, 0, 1000, self.inode)
        if self.state != TIME_WAIT:  # a timewait minisock comes without attributes
            body += _nla(INET_DIAG_SHUTDOWN, b"\0") + self.before_info
            body += _nla(INET_DIAG_SOCKOPT, b"\0\0")
            body += _nla(netlink.INET_DIAG_INFO, _tcp_info(self.snd, self.rcv, sent=self.sent))
            body += self.after_info
        return struct.pack("=IHHII", 16 + len(body), netlink.TCPDIAG_GETSOCK, 2, 1, 0) + body


_DONE = struct.pack("=IHHII", 20, netlink.NLMSG_DONE, 2, 1, 0) + bytes(4)


def _reads(socks: list[Sock], per_read: int = 3) -> list[bytes]:
    """A dump as the kernel hands it over: a few messages per read, NLMSG_DONE last."""
    msgs = [s.message() for s in socks]
    reads = [b"".join(msgs[i : i + per_read]) for i in range(0, len(msgs), per_read)]
    return reads + [_DONE]


def _parse(reads: list[bytes], cache: netlink.DumpCache | None = None) -> list:
    out: list = []
    seen: dict = {}
    for r in reads:
        netlink.parse_into(r, out, 7, cache, seen)
    if cache is not None:
        cache.records = seen
    return out


def test_unchanged_sockets_keep_their_record_and_get_the_new_numbers() -> None:
    cache = netlink.DumpCache()
    first = [
        Sock(1, ESTABLISHED, 40001, 1001, snd=10, rcv=20, sent=5),
        Sock(2, ESTABLISHED, 40002, 1002),
        Sock(3, TIME_WAIT, 40003, 0),
        Sock(4, ESTABLISHED, 40004, 1004, family=socket.AF_INET6),
        Sock(5, ESTABLISHED, 40005, 1005),
    ]
    a = {r.sport: r for r in _parse(_reads(first), cache)}
    second = [
        Sock(1, ESTABLISHED, 40001, 1001, snd=5010, rcv=20, sent=900),
        Sock(2, CLOSE_WAIT, 40002, 1002),  # the state changed: a new record
        Sock(3, TIME_WAIT, 40003, 0),
        Sock(4, ESTABLISHED, 40004, 1004, snd=7, rcv=3, family=socket.AF_INET6),
        Sock(6, ESTABLISHED, 40005, 1006),  # the same 4-tuple, another socket
        Sock(7, ESTABLISHED, 40007, 1007),  # new
    ]
    got = _parse(_reads(second), cache)
    b = {r.sport: r for r in got}
    assert b[40001] is a[40001] and b[40003] is a[40003] and b[40004] is a[40004]
    assert b[40002] is not a[40002] and b[40005] is not a[40005]
    r = b[40001]
    assert (r.last_send_ms, r.last_recv_ms, r.idle_ms, r.bytes_acked, r.bytes_received) == (
        5010,
        20,
        20,
        900,
        1800,
    )
    # Reused or not, every record is what a parse without the cache gives.
    assert got == _parse(_reads(second))
    assert all(r.netns == 7 for r in got)
    assert set(cache.records) == {1, 2, 3, 4, 6, 7}


def test_a_message_of_the_same_length_laid_out_otherwise_is_read_in_full() -> None:
    # The second message is as long as the first, but an attribute ahead of tcp_info moves it.
    pad8 = _nla(99, b"\0\0\0\0")
    socks = [
        Sock(1, ESTABLISHED, 40001, 1001, snd=1, rcv=2, after_info=pad8),
        Sock(2, ESTABLISHED, 40002, 1002, snd=3, rcv=4, before_info=pad8),
        Sock(3, ESTABLISHED, 40003, 1003, snd=5, rcv=6, after_info=pad8),
    ]
    cache = netlink.DumpCache()
    for _ in range(2):
        got = _parse(_reads(socks, per_read=3), cache)
        want = [(s.sport, s.snd, s.rcv) for s in socks]
        assert [(r.sport, r.last_send_ms, r.last_recv_ms) for r in got] == want
        assert got == _parse(_reads(socks))
        for s in socks:
            s.snd += 100


def test_a_socket_listed_twice_in_one_dump_gets_a_record_each_time() -> None:
    cache = netlink.DumpCache()
    _parse(_reads([Sock(1, ESTABLISHED, 40001, 1001)]), cache)
    twice = _parse(_reads([Sock(1, ESTABLISHED, 40001, 1001)] * 2), cache)
    assert len(twice) == 2 and twice[0] is not twice[1] and twice[0] == twice[1]


class FakeNetlink:
    """The agent's own sock_diag socket, answering each dump request with the next canned dump."""

    def __init__(self, dumps: list[list[Sock]]) -> None:
        self.dumps = dumps
        self.pending: list[bytes] = []
        self.closed = False

    def sendall(self, req: bytes) -> None:
        assert not self.pending, "a dump was left half read"
        self.pending = _reads(self.dumps.pop(0))

    def recv_into(self, buf: bytearray) -> int:
        data = self.pending.pop(0)
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.closed = True


class ListSink:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def send(self, e: dict) -> None:
        self.events.append(e)

    def pump(self) -> None:
        pass


def _proc_tree(root: Path, inodes: list[int]) -> Path:
    """pid 100 ("java") owns every socket inode listed; /proc/net/snmp for the heartbeat."""
    (root / "net").mkdir(parents=True)
    (root / "net" / "snmp").write_text("Tcp: ActiveOpens AttemptFails\nTcp: 1 0\n")
    pid = root / "100"
    (pid / "fd").mkdir(parents=True)
    (pid / "comm").write_text("java\n")
    (pid / "cmdline").write_bytes(b"java\0-jar\0app.jar\0")
    (pid / "stat").write_text("100 (java) S 1 100 100 0")
    for fd, inode in enumerate(inodes, 3):
        (pid / "fd" / str(fd)).symlink_to(f"socket:[{inode}]")
    return root


def _dumps() -> list[list[Sock]]:
    est, cw, la, fw1, tw = ESTABLISHED, CLOSE_WAIT, LAST_ACK, FIN_WAIT1, TIME_WAIT
    v6 = socket.AF_INET6
    return [
        [Sock(1, est, 40001, 1001, 10, 10), Sock(2, est, 40002, 1002), Sock(3, est, 40003, 1003),
         Sock(8, est, 40008, 1008, family=v6), Sock(9, est, 40009, 9999)],
        [Sock(1, est, 40001, 1001, 5010, 30, 100), Sock(2, cw, 40002, 1002, 900, 900),
         Sock(3, est, 40003, 1003, 7, 7), Sock(4, est, 40004, 1004),
         Sock(8, est, 40008, 1008, 4, 4, family=v6), Sock(9, est, 40009, 9999, 5, 5)],
        [Sock(1, est, 40001, 1001, 10010, 5030, 200), Sock(2, la, 40002, 1002, 5900, 5900),
         Sock(3, fw1, 40003, 1003, 9, 9), Sock(4, est, 40004, 1004, 3, 3),
         Sock(8, est, 40008, 1008, 5004, 5004, family=v6), Sock(9, est, 40009, 9999, 8, 8)],
        [Sock(1, est, 40001, 1001, 15010, 10030, 200), Sock(3, tw, 40003, 0),
         Sock(4, est, 40004, 1004, 5003, 2, 77), Sock(8, est, 40008, 1008, 1, 1, family=v6)],
        [Sock(1, est, 40001, 1001, 20010, 15030, 300), Sock(3, tw, 40003, 0),
         Sock(5, est, 40004, 1005), Sock(8, est, 40008, 1008, 2, 2, 50, family=v6)],
        [Sock(1, est, 40001, 1001, 25010, 20030, 300), Sock(5, est, 40004, 1005, 9, 9),
         Sock(8, est, 40008, 1008, 3, 3, 60, family=v6)],
        # Steady: only the numbers change.
        [Sock(1, est, 40001, 1001, 30010, 25030, 300), Sock(5, est, 40004, 1005, 5009, 12),
         Sock(8, est, 40008, 1008, 5003, 5003, 60, family=v6)],
        [Sock(1, est, 40001, 1001, 35010, 30030, 400), Sock(5, est, 40004, 1005, 10009, 17),
         Sock(8, est, 40008, 1008, 4, 4, 70, family=v6)],
        [Sock(1, cw, 40001, 1001, 40010, 35030, 400), Sock(5, est, 40004, 1005, 15009, 22),
         Sock(8, est, 40008, 1008, 9, 9, 80, family=v6)],
        [Sock(1, cw, 40001, 1001, 45010, 40030, 400), Sock(5, est, 40004, 1005, 20009, 27),
         Sock(8, est, 40008, 1008, 5009, 5009, 80, family=v6)],
        [Sock(1, cw, 40001, 1001, 50010, 45030, 400), Sock(5, est, 40004, 1005, 1, 1, 90),
         Sock(8, est, 40008, 1008, 10009, 10009, 80, family=v6)],
    ]  # fmt: skip


def _agent(tmp_path: Path, collector: Collector) -> tuple[Agent, ListSink]:
    cfg = config.build(
        {"clusters": [{"name": "local", "endpoints": ["1@10.0.0.1:9092", "1@[fd00::1]:9092"]}]},
        flags={"proc_root": str(tmp_path), "host": "web-1", "summary_interval_s": 10},
    )
    m = AgentMetrics()
    clock = iter([1000.0 + 5 * i for i in range(20)]).__next__
    sink = ListSink()
    procs = ProcessTable(tmp_path)
    return Agent(cfg, sink, m, make_refresher(cfg, m), collector, procs, clock), sink


def test_the_agent_emits_the_same_events_with_reused_records(tmp_path) -> None:
    root = _proc_tree(tmp_path, [1001, 1002, 1003, 1004, 1005, 1008])  # 9999 has no owner
    nl = FakeNetlink(_dumps())
    reusing, sink_a = _agent(root, Collector("netlink", str(root), open_own=lambda: nl))
    fresh_reads = [_reads(d) for d in _dumps()]
    fresh, sink_b = _agent(
        root,
        Collector("netlink", str(root), netlink_dump=lambda ports: _parse(fresh_reads.pop(0))),
    )
    splits = []
    split = reusing._split
    reusing._split = lambda *a: splits.append(1) or split(*a)
    held = []
    for _ in range(len(_dumps())):
        reusing.scan()
        fresh.scan()
        held.append({k: t.rec for k, t in reusing.lifecycles.sockets.items()})
    # Scans 7, 8 and 11 got back the records of the scan before, which had found nothing new.
    assert len(splits) == len(_dumps()) - 3
    for e in sink_a.events + sink_b.events:
        e.pop("scan_duration_s", None)  # wall time
    assert sink_a.events == sink_b.events
    kinds = {e["kind"] for e in sink_a.events}
    assert {"opened", "transition", "closed", "summary"} <= kinds
    # The socket on port 40001 kept one record while established, and one in CLOSE_WAIT.
    key = next(k for k in held[0] if k[2] == 40001)
    assert all(h[key] is held[0][key] for h in held[:8])
    assert held[8][key] is not held[0][key] and all(h[key] is held[8][key] for h in held[8:])
    assert not nl.pending and not nl.closed


def test_a_dump_that_fails_half_way_starts_afresh_on_a_new_socket() -> None:
    class Torn(FakeNetlink):
        """The second dump breaks off before its last read."""

        def recv_into(self, buf: bytearray) -> int:
            if not self.dumps and len(self.pending) == 1:
                raise OSError(5, "torn")
            return super().recv_into(buf)

    socks = [Sock(1, ESTABLISHED, 40001, 1001), Sock(2, ESTABLISHED, 40002, 1002)]
    torn = Torn([socks, socks])
    opened = [torn, FakeNetlink([socks])]
    c = Collector("netlink", open_own=lambda: opened.pop(0))
    first = c.scan([9092])
    with pytest.raises(OSError, match="torn"):
        c.scan([9092])
    assert torn.closed
    again = c.scan([9092])
    assert not opened  # a new socket after the failure, and no record kept from before it
    assert again == first and not any(a is b for a, b in zip(again, first, strict=True))
