"""Pick the socket collector: netlink sock_diag, or /proc/net/tcp when netlink is unavailable."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from streaming.agent import netlink, procnet
from streaming.agent.records import SocketRecord

log = logging.getLogger(__name__)

COLLECTORS = ("auto", "netlink", "proc")


class Collector:
    """``scan(ports)`` returns TCP sockets; ``name`` says which collector produced them.

    ``auto`` tries netlink and switches to /proc for good on the first OSError (EPERM in a
    locked-down container, EPROTONOSUPPORT without inet_diag, ...).
    """

    def __init__(
        self,
        mode: str = "auto",
        proc_root: str = "/proc",
        netlink_dump: Callable[..., list[SocketRecord]] = netlink.dump,
    ) -> None:
        if mode not in COLLECTORS:
            raise ValueError(f"collector must be one of {COLLECTORS}, not {mode!r}")
        self.mode = mode
        self.proc_root = proc_root
        self._netlink_dump = netlink_dump
        self.name = "proc" if mode == "proc" else "netlink"
        self.fallback_reason: str | None = None

    def scan(self, ports: Iterable[int] | None = None) -> list[SocketRecord]:
        port_list = sorted(set(ports)) if ports else None
        if self.name == "netlink":
            try:
                return self._netlink_dump(port_list)
            except OSError as exc:
                if self.mode == "netlink":
                    raise
                self.name = "proc"
                self.fallback_reason = f"{type(exc).__name__}: {exc}"
                log.warning("netlink sock_diag unavailable (%s); using /proc/net/tcp", exc)
        return procnet.read_sockets(self.proc_root, port_list)
