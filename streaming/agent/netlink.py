"""TCP sockets from the kernel over netlink sock_diag (what ``ss -tani`` does), with tcp_info.

Pure functions build the request (and the optional in-kernel port filter) and parse the reply;
``dump()`` is the only function that talks to the kernel. It asks for IPv4 and IPv6 together
with the kernel's compatibility request (``TCPDIAG_GETSOCK``, family unspecified): the kernel
then walks its TCP hash tables once instead of once per family. Network namespaces share those
tables unless ``net.ipv4.tcp_child_ehash_entries`` is set, so every dump walks every socket on
the host, and an agent dumping each pod's namespace pays that walk per namespace.

Layouts: linux/netlink.h, linux/inet_diag.h (``inet_diag_req``, ``inet_diag_req_v2``,
``inet_diag_msg``, ``inet_diag_bc_op``), linux/tcp.h (``tcp_info``).
"""

from __future__ import annotations

import socket
import struct
import sys
from collections.abc import Iterable

from streaming.agent.records import LISTEN, TIME_WAIT, SocketRecord

NETLINK_SOCK_DIAG = 4
TCPDIAG_GETSOCK = 18  # the inet_diag v1 request and its replies: both families in one walk
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_INFO = 2
INET_DIAG_BC_JMP = 1
INET_DIAG_BC_S_EQ = 11
INET_DIAG_BC_D_EQ = 12

# Every state but LISTEN: listeners are not connections.
ALL_BUT_LISTEN = 0xFFFFFFFF & ~(1 << LISTEN)
# The same without TIME_WAIT: for scans that do not need the closed connections' remains.
OPEN_STATES = ALL_BUT_LISTEN & ~(1 << TIME_WAIT)

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_NLA = struct.Struct("=HH")  # rtattr: len, type
_REQ = struct.Struct("=BBBBI48x")  # inet_diag_req_v2 with an all-zero inet_diag_sockid
_REQ_V1 = struct.Struct("=BBBB48xII")  # inet_diag_req: family, lens, ext, sockid, states, dbs
_BC_OP = struct.Struct("=BBH")  # inet_diag_bc_op: code, yes, no
# nlmsghdr (len, type) + inet_diag_msg (family, state, sport, dport, src, dst, cookie, uid,
# inode). The cookie names one socket for as long as it exists (TIME_WAIT included).
_MSG = struct.Struct("=IH10xBB2xHH16s16s4xQ12xII")
_MSG_SIZE = _MSG.size  # 16 + 72
# tcp_info: state@0, last_data_sent@44, last_data_recv@52, last_ack_recv@56, rtt@68,
# bytes_acked@120, bytes_received@128. Kernels before 4.1 lack the byte counters (shorter).
_TCPI_FULL = struct.Struct("=B43xI4xII8xI48xQQ")
_TCPI_FIELDS = "44xI4xII8xI48xQQ"  # the same numbers, tcpi_state skipped
_TCPI_SHORT = struct.Struct("=B43xI4xII8xI")
_ERRNO = struct.Struct("=i")
_SWAP = sys.byteorder == "little"  # ports are big-endian in inet_diag_sockid

_addr_cache: dict[int, dict[bytes, str]] = {socket.AF_INET: {}, socket.AF_INET6: {}}
# Where INET_DIAG_INFO sat in the last message of each (family, length): a kernel lays out the
# attributes of same-sized messages the same way, so one check usually replaces a walk.
_info_at: dict[tuple[int, int], int] = {}


class NetlinkError(OSError):
    """The kernel answered the dump with an error (errno set)."""


def build_port_filter(ports: Iterable[int]) -> bytes:
    """inet_diag bytecode accepting sockets whose local or remote port is in ``ports``.

    Compiled the way ``ss`` compiles ``sport = :a or dport = :a or ...``: each test falls through
    on a match into a JMP that skips to the end (accept); a miss skips over that JMP to the next
    test; the last miss jumps 4 bytes past the end (reject).
    """
    wanted = sorted({int(p) for p in ports})
    if not wanted:
        raise ValueError("port filter needs at least one port")
    for p in wanted:
        if not 0 < p < 65536:
            raise ValueError(f"port {p} out of range")
    tests = [(code, p) for p in wanted for code in (INET_DIAG_BC_S_EQ, INET_DIAG_BC_D_EQ)]
    code: bytes = b""
    for test_code, port in reversed(tests):
        test = _BC_OP.pack(test_code, 8, 12) + _BC_OP.pack(0, 0, port)
        code = test if not code else test + _BC_OP.pack(INET_DIAG_BC_JMP, 4, len(code) + 4) + code
    return code


def build_request(
    family: int, ports: Iterable[int] | None = None, seq: int = 1, states: int = ALL_BUT_LISTEN
) -> bytes:
    """A SOCK_DIAG_BY_FAMILY dump request for TCP sockets of ``family`` asking for tcp_info."""
    payload = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, states)
    if ports:
        bc = build_port_filter(ports)
        payload += _NLA.pack(_NLA.size + len(bc), INET_DIAG_REQ_BYTECODE) + bc
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return (
        _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), SOCK_DIAG_BY_FAMILY, flags, seq, 0) + payload
    )


def build_request_all(
    ports: Iterable[int] | None = None, seq: int = 1, states: int = ALL_BUT_LISTEN
) -> bytes:
    """A TCPDIAG_GETSOCK dump request for TCP sockets of both families, asking for tcp_info.

    The kernel answers it as a v2 dump with the family unspecified (``inet_diag_dump_compat``):
    the same messages, typed TCPDIAG_GETSOCK, from one walk of the hash tables.
    """
    payload = _REQ_V1.pack(socket.AF_UNSPEC, 0, 0, 1 << (INET_DIAG_INFO - 1), states, 0)
    if ports:
        bc = build_port_filter(ports)
        payload += _NLA.pack(_NLA.size + len(bc), INET_DIAG_REQ_BYTECODE) + bc
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), TCPDIAG_GETSOCK, flags, seq, 0) + payload


def _addr(family: int, raw: bytes) -> str:
    cache = _addr_cache[family]
    text = cache.get(raw)
    if text is None:
        if family == socket.AF_INET:
            text = socket.inet_ntop(socket.AF_INET, raw[:4])
        elif raw[:12] == b"\0" * 10 + b"\xff\xff":
            # IPv4-mapped (a Java client on a dual-stack socket): report the IPv4 address.
            text = socket.inet_ntop(socket.AF_INET, raw[12:])
        else:
            text = socket.inet_ntop(socket.AF_INET6, raw)
        if len(cache) > 65536:
            cache.clear()
        cache[raw] = text
    return text


def _find_info(data: bytes | memoryview, off: int, mlen: int) -> tuple[int, int]:
    """(offset of the tcp_info payload, its size) in one message; (0, 0) when absent."""
    a = off + _MSG_SIZE
    mend = off + mlen
    while a + 4 <= mend:
        alen, atype = _NLA.unpack_from(data, a)
        if alen < 4:
            break
        if atype == INET_DIAG_INFO:
            return a + 4, alen - 4
        a += (alen + 3) & ~3
    return 0, 0


class DumpCache:
    """One network namespace's sockets from its last dump, by socket cookie.

    A socket whose state and inode are unchanged keeps its ``SocketRecord``: the next dump
    only writes the new tcp_info numbers into it, so a steady scan creates no objects. Callers
    that hold records between scans (the lifecycle) therefore see those numbers change in place.
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: dict[int, SocketRecord] = {}


_NO_RECORDS: dict[int, SocketRecord] = {}
# Offset of INET_DIAG_INFO in a message -> one struct for the message's length, type, family,
# state, cookie and inode, the attribute's header and the tcp_info numbers.
_layouts: dict[int, struct.Struct] = {}


def _layout(rel: int) -> struct.Struct:
    lay = _layouts.get(rel)
    if lay is None:
        lay = _layouts[rel] = struct.Struct(f"=IH10xBB42xQ16xI{rel - _MSG_SIZE}xHH{_TCPI_FIELDS}")
    return lay


def parse_into(
    data: bytes | memoryview,
    out: list[SocketRecord],
    netns: int = 0,
    cache: DumpCache | None = None,
    seen: dict[int, SocketRecord] | None = None,
) -> bool:
    """Append the sockets in one netlink read to ``out``; True once NLMSG_DONE is seen.

    Records get ``netns``. With ``cache``, a socket found there with the same state and inode
    is taken out of it and updated in place; ``seen`` receives every socket by cookie (the
    cache for the next dump). Raises NetlinkError for an NLMSG_ERROR reply.

    This is the agent's hot loop. A message laid out like the previous one with tcp_info (the
    usual case: every established socket of a family looks alike) is read with one
    ``unpack_from``; a known socket then costs a dict lookup and seven attribute writes.
    """
    end = len(data)
    off = 0
    unpack_msg = _MSG.unpack_from
    unpack_nla = _NLA.unpack_from
    full, short = _TCPI_FULL, _TCPI_SHORT
    full_size, short_size = full.size, short.size
    min_info_len = _MSG_SIZE + 4 + short_size
    caches = _addr_cache
    info_at = _info_at
    append = out.append
    swap = _SWAP
    take = (cache.records if cache is not None else _NO_RECORDS).pop
    keep = seen.__setitem__ if seen is not None else None
    # The layout of the last message with full tcp_info: length, type, family, its struct.
    lay_len = lay_type = lay_fam = lay_alen = -1
    lay_size = end + 1
    lay_unpack = None
    while off + 16 <= end:
        if off + lay_size <= end:
            (mlen, mtype, fam, state, cookie, inode, alen, atype,
             snd, rcv, ack, rtt, acked, received) = lay_unpack(data, off)  # fmt: skip
            if (
                mlen == lay_len
                and mtype == lay_type
                and fam == lay_fam
                and atype == INET_DIAG_INFO
                and alen == lay_alen
            ):
                rec = take(cookie, None)
                if rec is not None and rec.state == state and rec.inode == inode:
                    rec.idle_ms = snd if snd < rcv else rcv
                    rec.last_send_ms = snd
                    rec.last_recv_ms = rcv
                    rec.bytes_acked = acked
                    rec.bytes_received = received
                    rec.rtt_us = rtt
                    rec.last_ack_recv_ms = ack
                    if keep is not None:
                        keep(cookie, rec)
                    append(rec)
                    off += (mlen + 3) & ~3
                    continue
        if off + _MSG_SIZE <= end:
            mlen, mtype, fam, state, sport, dport, src, dst, cookie, uid, inode = unpack_msg(
                data, off
            )
        else:
            mlen, mtype = _NLMSGHDR.unpack_from(data, off)[:2]
        if (mtype != SOCK_DIAG_BY_FAMILY and mtype != TCPDIAG_GETSOCK) or mlen < _MSG_SIZE:
            if mlen < 16:
                raise NetlinkError(0, f"malformed netlink message length {mlen}")
            if mtype == NLMSG_DONE:
                return True
            if mtype == NLMSG_ERROR:
                err = -_ERRNO.unpack_from(data, off + 16)[0]
                raise NetlinkError(err, f"sock_diag dump failed: errno {err}")
            off += (mlen + 3) & ~3
            continue
        if swap:
            sport = ((sport & 0xFF) << 8) | (sport >> 8)
            dport = ((dport & 0xFF) << 8) | (dport >> 8)
        rec = take(cookie, None)
        if rec is not None and (rec.state != state or rec.inode != inode):
            rec = None
        at = size = 0
        if mlen >= min_info_len:  # shorter ones (TIME_WAIT, SYN_RECV) cannot hold tcp_info
            key = (fam, mlen)
            rel = info_at.get(key)
            if rel is not None:
                alen, atype = unpack_nla(data, off + rel)
                if atype == INET_DIAG_INFO:
                    at, size = off + rel + 4, alen - 4
            if not at:
                at, size = _find_info(data, off, mlen)
                if at:
                    rel = info_at[key] = at - 4 - off
            if size >= full_size:
                _, snd, rcv, ack, rtt, acked, received = full.unpack_from(data, at)
                if off + mlen <= end:
                    lay = _layout(rel)
                    lay_unpack, lay_size = lay.unpack_from, lay.size
                    lay_len, lay_type, lay_fam, lay_alen = mlen, mtype, fam, size + 4
            elif size >= short_size:
                _, snd, rcv, ack, rtt = short.unpack_from(data, at)
                acked = received = None
            else:
                at = 0
        if at:
            if rec is None:
                cache_a = caches[fam]
                rec = SocketRecord(
                    fam,
                    state,
                    cache_a.get(src) or _addr(fam, src),
                    sport,
                    cache_a.get(dst) or _addr(fam, dst),
                    dport,
                    inode,
                    uid,
                    snd if snd < rcv else rcv,
                    snd,
                    rcv,
                    acked,
                    received,
                    rtt,
                    ack,
                    netns,
                )  # fmt: skip
            else:
                rec.idle_ms = snd if snd < rcv else rcv
                rec.last_send_ms = snd
                rec.last_recv_ms = rcv
                rec.bytes_acked = acked
                rec.bytes_received = received
                rec.rtt_us = rtt
                rec.last_ack_recv_ms = ack
        elif rec is None or rec.idle_ms is not None:
            # No tcp_info this time: a record that had some is not reused.
            cache_a = caches[fam]
            rec = SocketRecord(
                fam,
                state,
                cache_a.get(src) or _addr(fam, src),
                sport,
                cache_a.get(dst) or _addr(fam, dst),
                dport,
                inode,
                uid,
                netns=netns,
            )
        if keep is not None:
            keep(cookie, rec)
        append(rec)
        off += (mlen + 3) & ~3
    return False


def parse_messages(data: bytes | memoryview) -> list[SocketRecord]:
    """Every socket in a buffer of netlink messages (a capture of one or more reads)."""
    out: list[SocketRecord] = []
    off = 0
    end = len(data)
    # A capture is a concatenation of reads; parse_into stops at NLMSG_DONE, so walk past it.
    while off < end:
        done = parse_into(memoryview(data)[off:], out)
        if not done:
            break
        off += _next_after_done(data, off)
    return out


def _next_after_done(data: bytes | memoryview, start: int) -> int:
    off = start
    while off + 16 <= len(data):
        mlen, mtype = _NLMSGHDR.unpack_from(data, off)[:2]
        off += (mlen + 3) & ~3
        if mtype == NLMSG_DONE:
            return off - start
    return len(data) - start


_BOTH = (socket.AF_INET, socket.AF_INET6)
# False once a kernel refused the compatibility request: ask per family from then on.
_one_walk = True


def dump(
    ports: Iterable[int] | None = None,
    families: tuple[int, ...] = _BOTH,
    capture: list[bytes] | None = None,
    sock: socket.socket | None = None,
    netns: int = 0,
    cache: DumpCache | None = None,
    states: int = ALL_BUT_LISTEN,
) -> list[SocketRecord]:
    """Dump TCP sockets (optionally only those with a port in ``ports``, in ``states``, a
    bitmask of ``1 << state``) from the kernel.

    ``sock``: a NETLINK_SOCK_DIAG socket to ask through (it decides the network namespace);
    by default a new one in the caller's namespace. ``netns`` is written into the records.
    ``cache``: the previous dump of the same namespace, whose unchanged sockets' records are
    reused (see ``DumpCache``); it holds this dump's sockets afterwards. ``capture`` receives a
    copy of every read, for fixture files. Raises OSError (EPERM, EPROTONOSUPPORT, ...) when
    sock_diag is unavailable; a given socket is then in an unknown state and should be closed.
    """
    global _one_walk
    if sock is None:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as s:
            return dump(ports, families, capture, s, netns, cache, states)
    port_list = sorted(set(ports)) if ports else None
    if _one_walk and set(families) == set(_BOTH):
        try:
            req = build_request_all(port_list, states=states)
            return _run(sock, [req], capture, netns, cache)
        except NetlinkError:  # no compatibility request in this kernel: per family
            _one_walk = False
    reqs = [build_request(f, port_list, seq, states) for seq, f in enumerate(families, 1)]
    return _run(sock, reqs, capture, netns, cache)


def _run(
    sock: socket.socket,
    requests: list[bytes],
    capture: list[bytes] | None,
    netns: int,
    cache: DumpCache | None,
) -> list[SocketRecord]:
    out: list[SocketRecord] = []
    seen: dict[int, SocketRecord] | None = {} if cache is not None else None
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    for req in requests:
        sock.sendall(req)
        while True:
            n = sock.recv_into(buf)
            if capture is not None:
                capture.append(bytes(view[:n]))
            if parse_into(view[:n], out, netns, cache, seen):
                break
    if cache is not None and seen is not None:
        cache.records = seen
    return out
