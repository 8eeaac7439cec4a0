"""The /proc fallback: ``/proc/net/tcp{,6}`` (no idle times) and ``/proc/net/snmp`` counters.

Pure parsers take the file text; ``read_sockets`` / ``read_snmp`` do the I/O.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from pathlib import Path

from streaming.agent.records import LISTEN, SocketRecord

_U32 = struct.Struct("=I")
_U32X4 = struct.Struct("=IIII")


def _addr4(hexaddr: str) -> str:
    return socket.inet_ntop(socket.AF_INET, _U32.pack(int(hexaddr, 16)))


def _addr6(hexaddr: str) -> str:
    words = [int(hexaddr[i : i + 8], 16) for i in range(0, 32, 8)]
    raw = _U32X4.pack(*words)
    if raw[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, raw[12:])
    return socket.inet_ntop(socket.AF_INET6, raw)


def parse_proc_net_tcp(
    text: str, family: int = socket.AF_INET, ports: Iterable[int] | None = None
) -> list[SocketRecord]:
    """Sockets in a /proc/net/tcp (``family`` AF_INET) or tcp6 (AF_INET6) file, LISTEN excluded.

    Addresses are hex words in host byte order, ports hex big-endian numbers. Lines that do not
    parse are skipped (the kernel writes a fixed format; a torn read at the end is possible).
    """
    conv = _addr4 if family == socket.AF_INET else _addr6
    wanted = set(ports) if ports else None
    out: list[SocketRecord] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        try:
            local, remote, st = parts[1], parts[2], int(parts[3], 16)
            if st == LISTEN:
                continue
            lhost, lport = local.split(":")
            rhost, rport = remote.split(":")
            sport, dport = int(lport, 16), int(rport, 16)
            if wanted is not None and sport not in wanted and dport not in wanted:
                continue
            out.append(
                SocketRecord(
                    family, st, conv(lhost), sport, conv(rhost), dport, int(parts[9]), int(parts[7])
                )
            )
        except (ValueError, OSError):
            continue
    return out


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp as {"Tcp": {"ActiveOpens": n, ...}, ...} (header line + value line pairs)."""
    out: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        hname, _, hfields = head.partition(":")
        vname, _, vfields = vals.partition(":")
        if hname != vname:
            continue
        try:
            out[hname] = {k: int(v) for k, v in zip(hfields.split(), vfields.split(), strict=True)}
        except ValueError:
            continue
    return out


def read_sockets(proc_root: str | Path = "/proc", ports: Iterable[int] | None = None) -> list:
    """TCP sockets from ``<proc_root>/net/tcp`` and ``tcp6`` (a missing tcp6 is fine)."""
    out: list[SocketRecord] = []
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path(proc_root) / "net" / name
        try:
            text = path.read_text()
        except FileNotFoundError:
            if family == socket.AF_INET:
                raise
            continue
        out.extend(parse_proc_net_tcp(text, family, ports))
    return out


def read_tcp_counters(proc_root: str | Path = "/proc") -> tuple[int | None, int | None]:
    """(ActiveOpens, AttemptFails) from /proc/net/snmp, None when unreadable."""
    try:
        tcp = parse_snmp((Path(proc_root) / "net" / "snmp").read_text()).get("Tcp", {})
    except OSError:
        return None, None
    return tcp.get("ActiveOpens"), tcp.get("AttemptFails")
