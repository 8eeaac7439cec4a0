"""Socket inode -> owning process, from ``<proc_root>/<pid>/fd``, cached between scans.

A full walk of every process's fds is what ``ss -p`` does on each call and costs far more than
the socket dump. Here each pid's socket inodes are remembered; a scan reads only pids that are
new, and rereads the known ones only when a socket inode appears that no cached pid owns.

Another user's ``/proc/<pid>/fd`` needs CAP_DAC_READ_SEARCH to list and CAP_SYS_PTRACE to read
its links, even as root. A process the agent cannot read is counted (``unreadable_fd_tables``)
and logged once; its sockets are reported without a process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from streaming.agent.pods import PodDirectory, PodRef, parse_cgroup

log = logging.getLogger(__name__)

# How long details read at a process's first connect outlive the process (``remember``).
REMEMBER_S = 60.0
# Linux capabilities (include/uapi/linux/capability.h) that reading /proc/<pid>/fd needs.
CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE = 2, 19
FD_CAPS = ((CAP_SYS_PTRACE, "CAP_SYS_PTRACE"), (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"))


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    comm: str
    cmdline: tuple[str, ...]
    exe: str | None
    container: str | None  # "<pod-uid>/<short-id>", the short id, or None (see pods.ContainerRef)
    pod: PodRef | None = None  # Kubernetes namespace, name (and labels from the API server)
    ppid: int | None = None
    start_time: int | None = None  # clock ticks since boot: tells a reused pid apart


def stat_fields(stat: str) -> list[str]:
    """The fields of /proc/<pid>/stat after the parenthesised comm (which may itself hold
    spaces and parentheses), from field 3, the state."""
    return stat[stat.rfind(")") + 2 :].split()


def parse_state(stat: str) -> str | None:
    """The state letter of /proc/<pid>/stat (``R``, ``S``, ``T``: stopped, ``t``: traced...)."""
    fields = stat_fields(stat)
    return fields[0] if fields else None


def parse_ppid(stat: str) -> int | None:
    """The parent pid from /proc/<pid>/stat."""
    fields = stat_fields(stat)
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def parse_start_time(stat: str) -> int | None:
    """Field 22 of /proc/<pid>/stat, the process start time in clock ticks since boot."""
    fields = stat_fields(stat)
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """NUL-separated argv from /proc/<pid>/cmdline."""
    return tuple(a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0") if a)


def effective_caps(proc_root: str = "/proc") -> int:
    """This process's effective capability set (0 when it cannot be read)."""
    try:
        with open(f"{proc_root}/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def fd_access_hint(caps: int) -> str:
    """Why other users' /proc/<pid>/fd may be unreadable, given the agent's capabilities."""
    missing = [name for bit, name in FD_CAPS if not caps >> bit & 1]
    if missing:
        return (
            f"the agent lacks {' and '.join(missing)} (other users' processes need "
            "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)"
        )
    return (
        "the agent holds CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, so a security module "
        "(AppArmor, SELinux) or another user namespace denies it"
    )


def socket_inodes(fd_dir: str) -> tuple[set[int], OSError | None]:
    """The socket inodes among a process's open files, and the permission error that hid some
    or all of them (None when nothing was denied: every link read, or the process is gone)."""
    try:
        names = os.listdir(fd_dir)
    except PermissionError as exc:  # another user's, without CAP_DAC_READ_SEARCH
        return set(), exc
    except OSError:  # gone
        return set(), None
    inodes: set[int] = set()
    denied: OSError | None = None
    for name in names:
        try:
            link = os.readlink(f"{fd_dir}/{name}")
        except PermissionError as exc:  # the ptrace read check: CAP_SYS_PTRACE
            denied = exc
            continue
        except OSError:  # closed since the listing
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes, denied


class ProcessTable:
    """Map socket inodes to processes; ``proc_root`` may point at a fixture tree. ``pods``
    names the Kubernetes pod of a process in one (None: no pod lookup)."""

    def __init__(
        self,
        proc_root: str | Path = "/proc",
        pods: PodDirectory | None = None,
        caps: int | None = None,
    ) -> None:
        self.proc_root = str(proc_root)
        self.pods = pods
        self.caps = caps  # the agent's effective capabilities, for the log (None: read them)
        self._pid_inodes: dict[int, frozenset[int]] = {}
        self._owner: dict[int, int] = {}
        self._info: dict[int, ProcInfo | None] = {}
        self._pod_uids: dict[int, str] = {}  # pid -> pod uid from its cgroup
        self._unresolvable: set[int] = set()
        self._early: dict[int, tuple[ProcInfo | None, float]] = {}  # see ``remember``
        self.pid_scans = 0  # fd directories read, for tests and benchmarks
        self._fd_denied: dict[int, OSError] = {}  # pid -> why its fd table could not be read
        self._fd_warned = False

    @property
    def unreadable_fd_tables(self) -> int:
        """Live processes whose fd table could not be read when last looked at."""
        return len(self._fd_denied)

    def lookup(self, inodes: set[int]) -> dict[int, ProcInfo]:
        """Owners of the given socket inodes (inode 0 and unowned inodes are left out)."""
        wanted = {i for i in inodes if i}
        pids = self._list_pids()
        alive = set(pids)
        for gone in [p for p in self._pid_inodes if p not in alive]:
            self._forget(gone)
        horizon = time.monotonic() - REMEMBER_S
        for pid in [p for p, (_, at) in list(self._early.items()) if at < horizon]:
            self._early.pop(pid, None)
        fresh = [pid for pid in pids if pid not in self._pid_inodes]
        for pid in fresh:
            self._scan_pid(pid)
        missing = wanted - self._owner.keys() - self._unresolvable
        if missing:
            # Processes that already own a wanted socket are the likeliest to have opened more.
            pids.sort(key=lambda p: self._pid_inodes.get(p, frozenset()).isdisjoint(wanted))
            done = set(fresh)
            for pid in pids:
                if pid in done:
                    continue
                self._scan_pid(pid)
                missing -= self._pid_inodes.get(pid, frozenset())
                if not missing:
                    break
            # Sockets of other network namespaces' processes we cannot see, or orphans:
            # do not walk everything again for them on every scan.
            self._unresolvable |= missing
        self._unresolvable &= wanted
        if self._fd_denied and not self._fd_warned:
            self._warn_fd_denied()
        out: dict[int, ProcInfo] = {}
        for inode in wanted:
            pid = self._owner.get(inode)
            if pid is None:
                continue
            info = self.info(pid)
            if info is not None:
                out[inode] = info
        return out

    def info(self, pid: int) -> ProcInfo | None:
        if pid not in self._info:
            self._info[pid] = self._read_info(pid)
        info = self._info[pid]
        if info is None and pid in self._early:
            info = self._early[pid][0]  # exited since it connected
        uid = self._pod_uids.get(pid)
        if info is not None and uid is not None and self.pods is not None:
            # The pod may have become known (the API's first list came after this process was
            # read) or changed (labels) since: a cached lookup, so asked every time.
            pod = self.pods.lookup(uid)
            if pod is not None and pod != info.pod:
                info = self._info[pid] = dataclasses.replace(info, pod=pod)
        return info

    def remember(self, pid: int) -> ProcInfo | None:
        """Read a process's details now, before it may exit; ``info`` answers from them for
        ``REMEMBER_S`` after it is gone. Returns what it read, None when it read them recently
        (or the process is gone). Safe from another thread (one dict assignment)."""
        now = time.monotonic()
        if pid in self._early and self._early[pid][1] >= now - REMEMBER_S / 2:
            return None
        info = self._read_info(pid)
        self._early[pid] = (info, now)
        return info

    def _list_pids(self) -> list[int]:
        try:
            return [int(n) for n in os.listdir(self.proc_root) if n.isdigit()]
        except OSError:
            return []

    def _warn_fd_denied(self) -> None:
        self._fd_warned = True
        pid, exc = next(iter(self._fd_denied.items()))
        caps = effective_caps() if self.caps is None else self.caps
        log.warning(
            "cannot read /proc/<pid>/fd of %d process(es) (pid %d: %s): their sockets are "
            "reported without a process (app unknown); %s. "
            "connmon_agent_unreadable_fd_tables counts them; this is logged once",
            len(self._fd_denied), pid, exc.strerror or exc, fd_access_hint(caps),
        )  # fmt: skip

    def _forget(self, pid: int) -> None:
        for inode in self._pid_inodes.pop(pid, ()):
            if self._owner.get(inode) == pid:
                del self._owner[inode]
        self._info.pop(pid, None)
        self._pod_uids.pop(pid, None)
        self._fd_denied.pop(pid, None)

    def _scan_pid(self, pid: int) -> None:
        self.pid_scans += 1
        inodes, denied = socket_inodes(f"{self.proc_root}/{pid}/fd")
        if denied is None:
            self._fd_denied.pop(pid, None)
        else:
            self._fd_denied[pid] = denied
        old = self._pid_inodes.get(pid, frozenset())
        for inode in old - inodes:
            if self._owner.get(inode) == pid:
                del self._owner[inode]
        for inode in inodes:
            self._owner.setdefault(inode, pid)
        self._pid_inodes[pid] = frozenset(inodes)

    def _read_info(self, pid: int) -> ProcInfo | None:
        base = Path(self.proc_root) / str(pid)
        try:
            comm = (base / "comm").read_text().strip()
        except OSError:
            return None
        try:
            cmdline = parse_cmdline((base / "cmdline").read_bytes())
        except OSError:
            cmdline = ()
        try:
            exe: str | None = os.readlink(base / "exe")
        except OSError:
            exe = None
        try:
            ref = parse_cgroup((base / "cgroup").read_text())
        except OSError:
            ref = None
        pod = None
        if ref is not None and ref.pod_uid and self.pods is not None:
            self._pod_uids[pid] = ref.pod_uid
            pod = self.pods.lookup(ref.pod_uid)
        try:
            stat = (base / "stat").read_text()
        except OSError:
            stat = ""
        return ProcInfo(
            pid, comm, cmdline, exe, ref.label if ref else None, pod, parse_ppid(stat),
            parse_start_time(stat),
        )  # fmt: skip
