"""Loopback port helpers for the local stack and the tests.

Listening ports are chosen below the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``). A port the kernel hands out for ``bind(0)`` comes from that
range, and so does the source port of every outgoing connection: a host holding thousands of
client sockets could take such a port between the moment it was chosen and the moment a
broker binds it. Ports below the range are only ever taken by another listener.
"""

from __future__ import annotations

import random
import socket
import threading

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000  # above the ports services usually own
_given: set[int] = set()
_lock = threading.Lock()


def ephemeral_range(path: str = RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range, ``(first, last)``; Linux's default when unreadable."""
    try:
        with open(path) as f:
            first, last = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999
    return first, last


def listen_range(path: str = RANGE_FILE) -> tuple[int, int]:
    """Ports to choose listeners from, ``[first, last]``: below the ephemeral range, or above it
    when the range starts too low to leave room below."""
    first, last = ephemeral_range(path)
    if first - LOWEST >= 2000:
        return LOWEST, first - 1
    if 65535 - last >= 2000:
        return last + 1, 65535
    return first, last  # no room outside it: pick inside, as bind(0) would


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, outside the ephemeral range when there is room;
    never the same one twice in this process."""
    lo, hi = listen_range()
    rng = random.SystemRandom()
    with _lock:
        for _ in range(200):
            port = rng.randint(lo, hi)
            if port not in _given and not port_in_use(port, host):
                _given.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on host:port (or it cannot be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
