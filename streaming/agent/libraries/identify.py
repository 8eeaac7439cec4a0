"""``LibraryIdentifier``: the order evidence is tried in, per-process caching, and the
runtime a process runs its code in."""

from __future__ import annotations

import os
import re
import threading

from streaming.agent.libraries.evidence import ProcessEvidence
from streaming.agent.libraries.maps import MapsEvidence, from_maps
from streaming.agent.libraries.model import MAX_CACHE, MAX_MAPS, UNKNOWN, ClientLibrary
from streaming.agent.libraries.packages import dist_info_version
from streaming.agent.procs import ProcInfo, parse_start_time

_NODE_NAMES = ("node", "nodejs")


def runtime_of(info: ProcInfo, maps: MapsEvidence) -> str:
    """``java``, ``node``, ``python`` or ``""``: the runtime a process runs its code in."""
    names = (os.path.basename(info.exe or ""), info.comm,
             os.path.basename(info.cmdline[0]) if info.cmdline else "")  # fmt: skip
    if maps.jvm or "java" in names:
        return "java"
    if any(n in _NODE_NAMES for n in names):
        return "node"
    if maps.python or any(re.fullmatch(r"python[\d.]*", n) for n in names):
        return "python"
    return ""


class LibraryIdentifier(ProcessEvidence):
    """Identify the Kafka client library of processes under ``proc_root`` (a fixture tree in
    tests); results are cached per (pid, start time), at most ``max_cache`` of them."""

    max_cache = MAX_CACHE

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = str(proc_root)
        self._cache: dict[tuple[int, int], ClientLibrary] = {}
        # The eBPF reader thread identifies a process at its first connect (the scan, later):
        # the cache is shared. Identification itself runs outside the lock.
        self._lock = threading.Lock()
        self.identified = 0  # processes actually examined, for tests

    def identify(self, info: ProcInfo) -> ClientLibrary:
        """Cached by (pid, process start time), so a reused pid is identified again; bounded
        cache; never raises (OSError/parse errors -> UNKNOWN). The start time comes with
        ``info`` (the process table read it); /proc is read for it only when it did not."""
        start = info.start_time
        if start is None:
            try:
                start = parse_start_time(self._read_text(info.pid, "stat", 4096))
            except OSError:
                return UNKNOWN
        if start is None:
            return UNKNOWN
        key = (info.pid, start)
        found = self._cache.get(key)
        if found is not None:
            return found
        self.identified += 1
        try:
            found = self._identify(info)
        except Exception:  # a malformed file of one process must not stop the agent's scan
            found = UNKNOWN
        with self._lock:
            while len(self._cache) >= self.max_cache:
                del self._cache[next(iter(self._cache))]
            self._cache[key] = found
        return found

    def forget(self, pid: int) -> None:
        """Drop the cached results of a pid (the process ended)."""
        with self._lock:
            for key in [k for k in self._cache if k[0] == pid]:
                del self._cache[key]

    def _identify(self, info: ProcInfo) -> ClientLibrary:
        pid = info.pid
        try:
            maps = from_maps(self._read_text(pid, "maps", MAX_MAPS))
        except OSError:
            maps = MapsEvidence({})
        if maps.librdkafka or maps.rdkafka_binding:
            return ClientLibrary("librdkafka", self._rdkafka_version(pid, maps), "maps")
        if maps.aiokafka:
            site = maps.aiokafka.split("/aiokafka/", 1)[0]
            version = dist_info_version(self._listdir(pid, site), "aiokafka")
            return ClientLibrary("aiokafka", version, "maps")
        runtime = runtime_of(info, maps)
        found = self._executable(pid, scan_rodata=not runtime)
        if found is not None:
            return found
        if runtime == "java":
            return self._java(info)
        if runtime == "node":
            return self._node(info) or UNKNOWN
        if runtime == "python":
            return self._python(info, maps) or UNKNOWN
        return UNKNOWN
