"""Loopback port helpers for the local stack and the tests."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the kernel's choice, so parallel runs rarely collide)."""
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
