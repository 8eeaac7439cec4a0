"""A process's file descriptors: how many are open and its soft limit (RLIMIT_NOFILE).

A process that leaks sockets fails with EMFILE once its open descriptors reach the soft limit:
every socket, file and pipe counts. Both numbers are read per summary for the processes that
own Kafka sockets, from ``<proc_root>/<pid>/fd`` and ``<proc_root>/<pid>/limits``.
"""

from __future__ import annotations

import functools
import os

from streaming.schema.fds import FdUsage


def parse_nofile(limits: str) -> int | None:
    """The soft "Max open files" of a ``/proc/<pid>/limits`` text (None: unlimited or absent)."""
    for line in limits.splitlines():
        if line.startswith("Max open files"):
            fields = line[len("Max open files") :].split()
            if fields and fields[0].isdigit():
                return int(fields[0])
            return None
    return None


@functools.cache
def sized_fd_dirs(proc_root: str) -> bool:
    """Whether ``<proc_root>``'s fd directories give their count as their size (Linux 6.2 and
    later; older kernels report 0, and a directory that is not procfs its blocks' size)."""
    fd_dir = f"{proc_root}/self/fd"
    try:
        size = os.stat(fd_dir).st_size
        listed = len(os.listdir(fd_dir))  # one more while the listing is open
    except OSError:
        return False
    return size > 0 and listed - 1 <= size <= listed


def open_fds(fd_dir: str, sized: bool = False) -> int | None:
    """Open descriptors of a process: the size of its ``fd`` directory when ``sized``
    (``sized_fd_dirs``: no listing of a table that may hold thousands), else the listing's
    length. None when it cannot be read (gone, or another user's without the capabilities)."""
    try:
        return os.stat(fd_dir).st_size if sized else len(os.listdir(fd_dir))
    except OSError:
        return None


def fd_usage(pid: int, proc_root: str = "/proc") -> FdUsage | None:
    """(open descriptors, soft limit) of ``pid``; None when either is unknown or unlimited."""
    n = open_fds(f"{proc_root}/{pid}/fd", sized_fd_dirs(proc_root))
    if n is None:
        return None
    try:
        with open(f"{proc_root}/{pid}/limits") as f:
            limit = parse_nofile(f.read())
    except OSError:
        return None
    if not limit:
        return None
    return n, limit
