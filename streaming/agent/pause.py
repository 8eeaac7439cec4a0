"""Whether a process is paused: stopped by a signal, stopped under a tracer, or frozen by its
cgroup's freezer.

A paused process runs none of its threads, so it closes no socket the broker closed and sends
nothing on its connections: CLOSE_WAIT piles up and connections idle out, as in a leak, though
the cause is whoever paused it (SIGSTOP or job control, a debugger, ``docker pause``, a frozen
container or a checkpoint). The kernel tells the three apart:

- ``/proc/<pid>/stat`` state ``T``: stopped by a signal; ``t``: stopped by its tracer. Only
  when every thread is (``task/<tid>/stat``): a tracer may hold one thread while the client's
  network threads go on, and a debugger attached to all of them stops the process;
- the process's cgroup is frozen: ``freezer.state`` ``FROZEN`` (cgroup v1, the task shows as
  ``D``) or ``frozen 1`` in ``cgroup.events`` (cgroup v2, the task shows as ``S``).
"""

from __future__ import annotations

import os
from pathlib import Path

from streaming.agent.procs import parse_state
from streaming.schema.events import PAUSES

STOPPED, TRACED, FROZEN = PAUSES
_BY_STATE = {"T": STOPPED, "t": TRACED}


def freezer_files(cgroup: str) -> list[str]:
    """Files, relative to the cgroup mount root, that say whether a /proc/<pid>/cgroup's cgroup
    is frozen: v1's ``freezer/<path>/freezer.state``, v2's ``<path>/cgroup.events`` both where
    v2 is mounted alone and where it sits beside v1 (``unified/``). The root cgroup cannot be
    frozen; a path outside the reader's cgroup namespace (``/../..``) cannot be read."""
    out: list[str] = []
    for line in cgroup.splitlines():
        _hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        path = path.strip().strip("/")
        if not path or ".." in path.split("/"):
            continue
        if "freezer" in controllers.split(","):
            out.append(f"freezer/{path}/freezer.state")
        elif controllers == "":
            out += [f"{path}/cgroup.events", f"unified/{path}/cgroup.events"]
    return out


def is_frozen(name: str, text: str) -> bool:
    """What one of ``freezer_files`` says."""
    if name.endswith("freezer.state"):
        return text.strip() in ("FROZEN", "FREEZING")
    return any(line.split() == ["frozen", "1"] for line in text.splitlines())


class PauseProbe:
    """Reads whether a process is paused, from ``proc_root`` and the cgroup mount at
    ``cgroup_root`` (the host's, for processes of other containers)."""

    def __init__(self, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> None:
        self.proc_root = Path(proc_root)
        self.cgroup_root = Path(cgroup_root)

    def how(self, pid: int) -> str | None:
        """``stopped``, ``traced``, ``frozen``, or None: running, or gone."""
        base = self.proc_root / str(pid)
        try:
            paused = _BY_STATE.get(parse_state((base / "stat").read_text()) or "")
        except OSError:
            return None
        if paused is not None:
            return self._all_threads(base, paused)
        try:
            files = freezer_files((base / "cgroup").read_text())
        except OSError:
            return None
        for name in files:
            try:
                text = (self.cgroup_root / name).read_text()
            except OSError:
                continue
            if is_frozen(name, text):
                return FROZEN
        return None

    @staticmethod
    def _all_threads(base: Path, leader: str) -> str | None:
        """``traced`` if every thread is stopped and one by a tracer, ``stopped`` if every
        thread is stopped by a signal, None if any runs (or the threads cannot be read: the
        leader's state then stands)."""
        try:
            tids = os.listdir(base / "task")
        except OSError:
            return leader
        seen = {leader}
        for tid in tids:
            try:
                how = _BY_STATE.get(parse_state((base / "task" / tid / "stat").read_text()) or "")
            except OSError:
                continue  # exited meanwhile
            if how is None:
                return None
            seen.add(how)
        return TRACED if TRACED in seen else STOPPED
