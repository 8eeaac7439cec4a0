"""Pick the socket collector (netlink sock_diag, or /proc/net/tcp when netlink is unavailable)
and run it in every network namespace on the host, or only in the agent's own."""

from __future__ import annotations

import errno
import logging
import socket
from collections import Counter
from collections.abc import Callable, Iterable

from streaming.agent import netlink, netns, procnet
from streaming.agent.records import TIME_WAIT, SocketRecord

log = logging.getLogger(__name__)

COLLECTORS = ("auto", "netlink", "proc")
# all: every network namespace on the host that has a process; own: only the agent's.
NAMESPACE_MODES = ("all", "own")
# The process that held the namespace's handle exited between listing and opening it.
_GONE = (errno.ENOENT, errno.ESRCH)


def _open_netlink() -> socket.socket:
    return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, netlink.NETLINK_SOCK_DIAG)


class Collector:
    """``scan(ports)`` returns TCP sockets; ``name`` says which collector produced them.

    ``auto`` tries netlink and switches to /proc for good on the first OSError (EPERM in a
    locked-down container, EPROTONOSUPPORT without inet_diag, ...). With ``namespaces="all"``
    every network namespace that has a process is dumped, each record carrying its namespace
    inode; a namespace the agent may not enter is read from ``/proc/<pid>/net/tcp`` instead.

    Each namespace keeps its netlink socket and a ``netlink.DumpCache``, so a socket whose
    state and inode did not change comes back as the same record, its tcp_info numbers updated
    in place. ``netlink_dump`` replaces that dump (tests): called as ``(ports)`` for the agent's
    own namespace and ``(ports, sock=...)`` for the others. ``open_in`` and ``open_own`` open
    the netlink sockets (another namespace's, the agent's own).
    """

    def __init__(
        self,
        mode: str = "auto",
        proc_root: str = "/proc",
        netlink_dump: Callable[..., list[SocketRecord]] | None = None,
        namespaces: str = "own",
        table: netns.NamespaceTable | None = None,
        open_in: Callable[[str], socket.socket] = netns.open_netlink_in,
        open_own: Callable[[], socket.socket] = _open_netlink,
    ) -> None:
        if mode not in COLLECTORS:
            raise ValueError(f"collector must be one of {COLLECTORS}, not {mode!r}")
        if namespaces not in NAMESPACE_MODES:
            raise ValueError(f"namespaces must be one of {NAMESPACE_MODES}, not {namespaces!r}")
        self.mode = mode
        self.proc_root = proc_root
        self._netlink_dump = netlink_dump
        self.name = "proc" if mode == "proc" else "netlink"
        self.fallback_reason: str | None = None
        self.table = table or (netns.NamespaceTable(proc_root) if namespaces == "all" else None)
        self._open_in = open_in
        self._open_own = open_own
        self._own_sock: socket.socket | None = None
        self._socks: dict[int, socket.socket] = {}
        self._caches: dict[int, netlink.DumpCache] = {}
        self._proc_only: dict[int, str] = {}  # namespace -> why netlink cannot be used there
        self.namespaces_scanned = 1
        self.errors: Counter[str] = Counter()  # reason -> count, since start
        self._states = netlink.ALL_BUT_LISTEN  # what the current scan dumps

    def scan(
        self, ports: Iterable[int] | None = None, time_wait: bool = True
    ) -> list[SocketRecord]:
        """Sockets with a port in ``ports``; without TIME_WAIT ones when ``time_wait`` is
        False (a dump of the open connections only, much shorter at high connection rates)."""
        port_list = sorted(set(ports)) if ports else None
        self._states = netlink.ALL_BUT_LISTEN if time_wait else netlink.OPEN_STATES
        if self.table is None:
            return self._only(self._scan_own(port_list, 0), time_wait)
        spaces = self.table.refresh()
        own = self.table.own
        out = self._scan_own(port_list, 0) if own is None or own not in spaces else []
        for ns, pid in spaces.items():
            if ns == own:
                out.extend(self._scan_own(port_list, ns))
            else:
                out.extend(self._scan_other(ns, pid, port_list))
        out = self._only(out, time_wait)
        for ns in [n for n in self._socks if n not in spaces]:
            self._socks.pop(ns).close()  # the namespace is gone; do not keep it alive
        for ns in [n for n in self._proc_only if n not in spaces]:
            del self._proc_only[ns]
        for ns in [n for n in self._caches if n and n not in spaces]:
            del self._caches[ns]
        self.namespaces_scanned = len(spaces)
        return out

    @staticmethod
    def _only(records: list[SocketRecord], time_wait: bool) -> list[SocketRecord]:
        # The /proc fallback and test dumps cannot filter by state.
        return records if time_wait else [r for r in records if r.state != TIME_WAIT]

    def close(self) -> None:
        if self._own_sock is not None:
            self._own_sock.close()
            self._own_sock = None
        for s in self._socks.values():
            s.close()
        self._socks.clear()
        self._caches.clear()

    def _cache(self, ns: int) -> netlink.DumpCache:
        cache = self._caches.get(ns)
        if cache is None:
            cache = self._caches[ns] = netlink.DumpCache()
        return cache

    def _scan_own(self, ports: list[int] | None, ns: int) -> list[SocketRecord]:
        if self.name == "netlink":
            try:
                if self._netlink_dump is not None:
                    return _tag(self._netlink_dump(ports), ns)
                if self._own_sock is None:
                    self._own_sock = self._open_own()
                return netlink.dump(
                    ports, sock=self._own_sock, netns=ns, cache=self._cache(ns), states=self._states
                )
            except Exception as exc:
                # A dump that failed half-way may leave replies queued: start afresh.
                self._caches.pop(ns, None)
                if self._own_sock is not None:
                    self._own_sock.close()
                    self._own_sock = None
                if self.mode == "netlink" or not isinstance(exc, OSError):
                    raise
                self.name = "proc"
                self.fallback_reason = f"{type(exc).__name__}: {exc}"
                self.close()
                log.warning("netlink sock_diag unavailable (%s); using /proc/net/tcp", exc)
        return _tag(procnet.read_sockets(self.proc_root, ports), ns)

    def _scan_other(self, ns: int, pid: int, ports: list[int] | None) -> list[SocketRecord]:
        if self.name == "netlink" and ns not in self._proc_only:
            sock = self._socks.get(ns)
            try:
                if sock is None:
                    sock = self._socks[ns] = self._open_in(f"{self.proc_root}/{pid}/ns/net")
                if self._netlink_dump is not None:
                    return _tag(self._netlink_dump(ports, sock=sock), ns)
                return netlink.dump(
                    ports, sock=sock, netns=ns, cache=self._cache(ns), states=self._states
                )
            except Exception as exc:
                self._caches.pop(ns, None)
                if sock is not None:
                    self._socks.pop(ns, None)
                    sock.close()
                if not isinstance(exc, OSError):
                    raise
                if sock is not None:
                    self.errors["dump"] += 1
                elif exc.errno in _GONE:
                    return []
                else:
                    self.errors["enter"] += 1
                    self._proc_only[ns] = f"{type(exc).__name__}: {exc}"
                    log.warning(
                        "cannot enter network namespace %d of pid %d (%s); reading "
                        "/proc/%d/net/tcp for it (no idle times). The agent needs "
                        "CAP_SYS_ADMIN and CAP_SYS_PTRACE to use sock_diag there, and no "
                        "seccomp filter against setns(2) (systemd: RestrictNamespaces=net).",
                        ns, pid, exc, pid,
                    )  # fmt: skip
        try:
            return _tag(procnet.read_sockets(f"{self.proc_root}/{pid}", ports), ns)
        except OSError as exc:
            if exc.errno not in _GONE:
                self.errors["proc"] += 1
            return []


def _tag(records: list[SocketRecord], ns: int) -> list[SocketRecord]:
    """Give records the namespace they were read in (0: the agent's own, in ``own`` mode)."""
    if ns:
        for r in records:
            r.netns = ns
    return records
