"""The host's network namespaces, and a sock_diag socket inside each.

sock_diag answers for the network namespace of the netlink socket that asks, so an agent in the
host's namespace sees none of the sockets of a Kubernetes pod (each pod has a namespace of its
own). The agent finds every namespace that has a process in it from ``/proc/<pid>/ns/net`` and
opens one netlink socket inside each: a short-lived thread enters the namespace with setns(2),
creates the socket and ends. The socket stays bound to that namespace; the agent keeps it while
a process still lives there, so a scan costs one dump per namespace and no setns.

Entering another namespace needs CAP_SYS_ADMIN; opening ``/proc/<pid>/ns/net`` of another user's
process needs CAP_SYS_PTRACE. Without them a namespace is read from ``/proc/<pid>/net/tcp``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable

from streaming.agent.procs import CAP_SYS_PTRACE, effective_caps

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
NETLINK_SOCK_DIAG = 4
_NS_LINK = re.compile(r"net:\[(\d+)\]")

_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def parse_ns_link(link: str) -> int | None:
    """The namespace inode in a ``/proc/<pid>/ns/net`` link ("net:[4026531840]")."""
    m = _NS_LINK.fullmatch(link)
    return int(m.group(1)) if m else None


def read_ns(proc_root: str, pid: int | str) -> int | None:
    """Network namespace inode of ``pid``; None when it is gone or not ours to read."""
    try:
        return parse_ns_link(os.readlink(f"{proc_root}/{pid}/ns/net"))
    except OSError:
        return None


def open_netlink_in(ns_path: str) -> socket.socket:
    """A NETLINK_SOCK_DIAG socket that lives in the network namespace at ``ns_path``.

    The calling thread stays where it is: a helper thread enters the namespace, creates the
    socket and exits (a thread that entered another namespace is never reused).
    """
    result: list[socket.socket | BaseException] = []

    def enter() -> None:
        try:
            fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            result.append(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG))
        except BaseException as exc:  # handed to the caller
            result.append(exc)

    t = threading.Thread(target=enter, name="connmon-setns", daemon=True)
    t.start()
    t.join()
    out = result[0] if result else OSError(errno.EIO, "setns thread returned nothing")
    if isinstance(out, BaseException):
        raise out
    return out


class NamespaceTable:
    """Every network namespace with a process in it: inode -> one pid inside.

    A pid's namespace is read when the pid is first seen and again every ``recheck_s`` seconds
    (a runtime moves a new container's first process into its namespace just after starting
    it, so a first reading can be stale).
    """

    def __init__(
        self,
        proc_root: str = "/proc",
        recheck_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = proc_root
        self.recheck_s = recheck_s
        self.clock = clock
        self.own = read_ns(proc_root, "self")
        self._pid_ns: dict[int, int] = {}
        self._checked_at = clock()
        # The last /proc listing and its answer, returned again while the listing is the same.
        self._names: list[str] = []
        self._spaces: dict[int, int] = {}
        # Processes whose namespace could not be read (another user's, without CAP_SYS_PTRACE):
        # their sockets are invisible unless they share a namespace with a readable one.
        self.unreadable = 0
        self._warned = False

    def _warn(self, pid: int) -> None:
        """Once per agent: a live process's namespace was refused, so it is never scanned."""
        self._warned = True
        cause = (
            "the agent lacks CAP_SYS_PTRACE"
            if not effective_caps() >> CAP_SYS_PTRACE & 1
            else "the agent holds CAP_SYS_PTRACE, so a security module or another user "
            "namespace denies it"
        )
        log.warning(
            "cannot read the network namespace of pid %d (/proc/%d/ns/net): sockets only such "
            "processes hold are not seen; %s. connmon_agent_unreadable_processes counts them; "
            "this is logged once",
            pid,
            pid,
            cause,
        )

    def refresh(self) -> dict[int, int]:
        """Namespace inode -> a pid in it (the lowest), for every namespace with a process.

        The same dict as last time when the process list is unchanged, every namespace was
        readable and no recheck is due; callers must not modify it.
        """
        try:
            names = os.listdir(self.proc_root)
        except OSError:
            names = []
        now = self.clock()
        recheck = now - self._checked_at >= self.recheck_s
        if recheck:
            self._checked_at = now
        elif names == self._names and not self.unreadable:
            return self._spaces
        known = self._pid_ns
        fresh: dict[int, int] = {}
        unreadable = 0
        for pid in [int(n) for n in names if n.isdigit()]:
            ns = known.get(pid)
            if ns is None or recheck:
                ns = read_ns(self.proc_root, pid)
                if ns is None:
                    unreadable += 1
                    if not self._warned and os.path.isdir(f"{self.proc_root}/{pid}"):
                        self._warn(pid)
                    continue
            fresh[pid] = ns
        self._pid_ns = fresh
        self.unreadable = unreadable
        out: dict[int, int] = {}
        for pid in sorted(fresh):
            out.setdefault(fresh[pid], pid)
        self._names, self._spaces = names, out
        return out
