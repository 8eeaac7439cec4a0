"""netlink request building and reply parsing, against replies captured from this kernel."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest

from streaming.agent import netlink
from streaming.schema.events import TCP_STATES

FIXTURES = Path(__file__).parents[2] / "fixtures" / "agent"
STATE_NUM = {v: k for k, v in TCP_STATES.items()}


def _manifest() -> dict:
    return json.loads((FIXTURES / "manifest.json").read_text())


def test_parse_captured_dump_matches_socket_api_truth() -> None:
    records = netlink.parse_messages((FIXTURES / "netlink_tcp.bin").read_bytes())
    manifest = _manifest()
    by_tuple = {(r.src, r.sport, r.dst, r.dport): r for r in records}
    assert len(records) == manifest["netlink_records"] == len(manifest["sockets"])
    for truth in manifest["sockets"]:
        r = by_tuple[(truth["src"], truth["sport"], truth["dst"], truth["dport"])]
        assert r.state == STATE_NUM[truth["state"]], truth
        assert r.inode == truth["inode"], truth
        assert r.family == (socket.AF_INET6 if ":" in truth["src"] else socket.AF_INET)
        if truth["inode"] == 0:
            # TIME_WAIT and orphaned FIN_WAIT2 are timewait minisocks: no tcp_info.
            assert r.idle_ms is None and r.bytes_acked is None
        else:
            assert r.idle_ms is not None and r.rtt_us is not None and r.rtt_us > 0
            assert r.idle_ms == min(r.last_send_ms, r.last_recv_ms)
        if "bytes_received" in truth:
            assert r.bytes_received == truth["bytes_received"]
            assert r.bytes_acked >= truth["bytes_acked_min"]


def _run_bytecode(bc: bytes, sport: int, dport: int) -> bool:
    """The kernel's inet_diag_bc_run for S_EQ/D_EQ/JMP, written from net/ipv4/inet_diag.c."""
    pc, length = 0, len(bc)
    while length > 0:
        code, yes, no = struct.unpack_from("=BBH", bc, pc)
        if code == netlink.INET_DIAG_BC_JMP:
            ok = False
        elif code == netlink.INET_DIAG_BC_S_EQ:
            ok = sport == struct.unpack_from("=BBH", bc, pc + 4)[2]
        elif code == netlink.INET_DIAG_BC_D_EQ:
            ok = dport == struct.unpack_from("=BBH", bc, pc + 4)[2]
        else:
            raise AssertionError(f"unexpected op {code}")
        step = yes if ok else no
        pc += step
        length -= step
    return length == 0


@pytest.mark.parametrize("ports", [[9092], [9092, 9093, 19092], list(range(30000, 30020))])
def test_port_filter_accepts_exactly_the_ports(ports: list[int]) -> None:
    bc = netlink.build_port_filter(ports)
    assert len(bc) % 4 == 0
    for p in ports:
        assert _run_bytecode(bc, p, 40000)
        assert _run_bytecode(bc, 40000, p)
    assert not _run_bytecode(bc, 40000, 40001)
    assert not _run_bytecode(bc, 9091, 9094)


def test_port_filter_rejects_bad_ports() -> None:
    with pytest.raises(ValueError, match="at least one"):
        netlink.build_port_filter([])
    with pytest.raises(ValueError, match="70000"):
        netlink.build_port_filter([70000])


def test_request_layout() -> None:
    req = netlink.build_request(socket.AF_INET6, [9092], seq=7)
    length, mtype, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert length == len(req)
    assert mtype == netlink.SOCK_DIAG_BY_FAMILY
    assert flags == netlink.NLM_F_REQUEST | netlink.NLM_F_DUMP
    assert seq == 7
    family, proto, ext, _, states = struct.unpack_from("=BBBBI", req, 16)
    assert (family, proto, ext) == (socket.AF_INET6, socket.IPPROTO_TCP, 2)
    assert not states & (1 << 10)  # no LISTEN
    nla_len, nla_type = struct.unpack_from("=HH", req, 16 + 56)
    assert nla_type == netlink.INET_DIAG_REQ_BYTECODE and nla_len == 4 + 16 + 4  # 2 tests + JMP


def test_request_for_both_families_layout() -> None:
    req = netlink.build_request_all([9092], seq=3)
    length, mtype, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, mtype, seq) == (len(req), netlink.TCPDIAG_GETSOCK, 3)
    assert flags == netlink.NLM_F_REQUEST | netlink.NLM_F_DUMP
    family, ext = struct.unpack_from("=BxxB", req, 16)
    states, dbs = struct.unpack_from("=II", req, 16 + 4 + 48)
    assert (family, ext, dbs) == (socket.AF_UNSPEC, 2, 0)  # unspecified: both families
    assert not states & (1 << 10)
    nla_len, nla_type = struct.unpack_from("=HH", req, 16 + 60)
    assert nla_type == netlink.INET_DIAG_REQ_BYTECODE and nla_len == 4 + 16 + 4


def test_replies_to_the_request_for_both_families_parse_alike() -> None:
    msg = bytearray(_synthetic(_tcp_info(232)))
    struct.pack_into("=H", msg, 4, netlink.TCPDIAG_GETSOCK)
    assert netlink.parse_messages(bytes(msg)) == netlink.parse_messages(_synthetic(_tcp_info(232)))


def _synthetic(tcp_info: bytes, family: int = socket.AF_INET) -> bytes:
    """One hand-built SOCK_DIAG_BY_FAMILY message (ports 40000 -> 9092, inode 77, uid 1000)."""
    src = socket.inet_pton(socket.AF_INET, "10.0.0.1") + bytes(12)
    dst = socket.inet_pton(socket.AF_INET, "10.0.0.2") + bytes(12)
    msg = struct.pack("=BBBB", family, 1, 0, 0)
    msg += struct.pack(">HH", 40000, 9092) + src + dst + struct.pack("=I8x", 0)
    msg += struct.pack("=IIIII", 0, 0, 0, 1000, 77)
    attr = struct.pack("=HH", 4 + len(tcp_info), netlink.INET_DIAG_INFO) + tcp_info
    attr += bytes(-len(attr) % 4)
    shutdown = struct.pack("=HHB3x", 5, 8, 0)  # INET_DIAG_SHUTDOWN, as the kernel sends first
    body = msg + shutdown + attr
    done = struct.pack("=IHHII", 20, netlink.NLMSG_DONE, 2, 1, 0) + bytes(4)
    return struct.pack("=IHHII", 16 + len(body), netlink.SOCK_DIAG_BY_FAMILY, 2, 1, 0) + body + done


def _tcp_info(length: int) -> bytes:
    buf = bytearray(length)
    buf[0] = 1
    struct.pack_into("=I", buf, 44, 1500)  # last_data_sent
    struct.pack_into("=I", buf, 52, 250)  # last_data_recv
    struct.pack_into("=I", buf, 68, 420)  # rtt
    if length >= 136:
        struct.pack_into("=QQ", buf, 120, 123456789012, 987654321098)
    return bytes(buf)


def test_parse_full_tcp_info() -> None:
    (r,) = netlink.parse_messages(_synthetic(_tcp_info(232)))
    assert (r.src, r.sport, r.dst, r.dport) == ("10.0.0.1", 40000, "10.0.0.2", 9092)
    assert (r.inode, r.uid, r.state) == (77, 1000, 1)
    assert (r.last_send_ms, r.last_recv_ms, r.idle_ms, r.rtt_us) == (1500, 250, 250, 420)
    assert (r.bytes_acked, r.bytes_received) == (123456789012, 987654321098)


def test_parse_short_tcp_info_from_an_old_kernel() -> None:
    (r,) = netlink.parse_messages(_synthetic(_tcp_info(104)))
    assert (r.idle_ms, r.rtt_us) == (250, 420)
    assert r.bytes_acked is None and r.bytes_received is None


def test_error_reply_raises_with_errno() -> None:
    err = struct.pack("=IHHII", 36, netlink.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i16x", -1)
    with pytest.raises(netlink.NetlinkError) as info:
        netlink.parse_messages(err)
    assert info.value.errno == 1


def test_ipv4_mapped_ipv6_is_reported_as_ipv4() -> None:
    raw = bytes(10) + b"\xff\xff" + socket.inet_aton("192.0.2.7")
    assert netlink._addr(socket.AF_INET6, raw) == "192.0.2.7"
