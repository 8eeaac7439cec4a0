"""eBPF collector: every Kafka connection's open and close, from the kernel's TCP state tracepoint.

A scan every few seconds misses what happens between two scans: a connection opened and closed
in between is first seen in TIME_WAIT, without an inode, so without its process, and a refused
connect leaves no socket at all. This collector attaches ``bpftrace`` (Debian's package; its
JSON output is a stable, documented interface) to the ``sock:inet_sock_set_state`` tracepoint,
filtered in the kernel to the Kafka ports, in every network namespace.

What the kernel side does, per connection:

- at ``connect()`` (CLOSE -> SYN_SENT) it records the time and the calling process (pid, comm):
  later transitions run in softirq context, where the current process is not the owner; a
  process's first connect of an interval is printed at once, so the agent reads what it needs to
  name it (command line, container, pod) before a short-lived process exits;
  on a listener (LISTEN -> SYN_RECV) it records the time only;
- on the first transition out of ESTABLISHED it records who began the close;
- at CLOSE it either counts the connection in per-interval maps keyed by process, addresses
  (without the ephemeral port), how it ended, its errno and a lifetime class, or, when the
  socket was ever dumped by sock_diag (its cookie is set: the agent's scan saw it and tracks it
  itself) or opened before the collector started, prints one line for it.

So the work in user space follows the number of (process, broker) groups, not the connection
rate: at 1,000 connections per second the maps are printed once per interval. Connections the
scans see keep going through the scan path (idle times, CLOSE_WAIT ages, re-open pairing).
Needs: euid 0 (bpftrace refuses to run otherwise, whatever the capabilities) with CAP_SYS_ADMIN,
or CAP_BPF + CAP_PERFMON with ``BPFTRACE_BTF`` pointing at the kernel's BTF (without
CAP_SYS_ADMIN bpftrace cannot find it itself; the agent sets it for bpftrace when the file
exists); kernel BTF (``/sys/kernel/btf/vmlinux``, kernel 5.8+ for the fields read here) and
tracefs, which the collector mounts when it may. ``check`` says which of these is missing.
CAP_SYS_RESOURCE is not needed: Linux 5.11+ charges BPF memory to the cgroup, not to
RLIMIT_MEMLOCK.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from streaming.agent.procs import effective_caps
from streaming.agent.records import CLOSE_WAIT, ESTABLISHED, FIN_WAIT1, SYN_RECV, SYN_SENT

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
TRACEFS = "/sys/kernel/tracing"
BTF = "/sys/kernel/btf/vmlinux"
TRACEPOINT = "sock/inet_sock_set_state"
# Lifetime classes (ms): a window's short-lived count needs only to know which side of the job's
# threshold a connection fell on, so the kernel keeps one count per class.
LIFETIME_EDGES_MS = (100, 1000, 2000, 5000, 10000)
# How a connection ended, as the kernel program encodes it: the first state after ESTABLISHED
# (FIN_WAIT1: this side closed; CLOSE_WAIT: the peer did; CLOSE: a reset), or the state a
# connection that never got established left (SYN_SENT: a failed connect; SYN_RECV: a
# handshake the listener dropped), 0 when the collector saw no transition out of ESTABLISHED.
_ERRNO_NAMES = {111: "refused", 110: "timeout", 113: "unreachable", 101: "unreachable"}
ECONNRESET, EPIPE = 104, 32
# Linux capabilities (include/uapi/linux/capability.h).
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
# Why the collector is not used, as a bounded label: ``off`` by configuration, else ``check``'s.
REASONS = (
    "off", "no_bpftrace", "not_root", "no_capability", "no_btf", "no_tracefs", "no_tracepoint",
)  # fmt: skip
# What ``tracefs_state`` finds.
TRACEFS_STATES = ("ok", "unmounted", "unreadable", "no_tracepoint")
# Printed by the program's BEGIN probe, which bpftrace runs once every probe is attached (its
# own "attached_probes" message comes earlier, while the first events may still be missed).
READY = "R connmon-ebpf ready"
# Entries per kernel map: concurrent connections tracked, (process, broker) groups per interval.
MAP_KEYS_MAX = 65536
# A start that failed is tried again after this long (or at once when the ports change).
RETRY_S = 300.0


def closed_by(how: int, err: int) -> str:
    """Who closed first, from the kernel program's ``how`` and the socket's errno."""
    if how == FIN_WAIT1:
        return "local"
    if how == CLOSE_WAIT:
        return "peer"
    if how == 7:  # ESTABLISHED -> CLOSE: a reset, received (errno set) or sent (abort, linger 0)
        return "peer" if err in (ECONNRESET, EPIPE) else "local"
    return "unknown"


def connect_error(how: int, err: int) -> str | None:
    """Why a connect failed (SYN_SENT -> CLOSE); None for a connection that was established."""
    if how != SYN_SENT:
        return None
    if err == 0:
        return "aborted"  # the client closed it while connecting: its own connect timeout
    return _ERRNO_NAMES.get(err, "error")


def lifetime_class(ms: float) -> int:
    return sum(ms >= edge for edge in LIFETIME_EDGES_MS)


def _port_test(field: str, ports: Iterable[int]) -> str:
    return "(" + " || ".join(f"{field} == {int(p)}" for p in sorted(set(ports))) + ")"


def program(ports: Iterable[int], interval_s: int) -> str:
    """The bpftrace program for these Kafka ports, printing its counts every ``interval_s``."""
    ports = sorted(set(ports))
    if not ports:
        raise ValueError("the eBPF program needs at least one Kafka port")
    client = _port_test("args->dport", ports)
    server = _port_test("args->sport", ports)
    edges = LIFETIME_EDGES_MS
    cls = "5"
    for i in range(len(edges) - 1, -1, -1):
        cls = f"($ms < {edges[i]} ? {i} : {cls})"
    blocks = []
    for fam, saddr, daddr in (
        (2, "args->saddr", "args->daddr"),
        (10, "args->saddr_v6", "args->daddr_v6"),
    ):
        key = f"$ns, ntop({saddr}), $cp, ntop({daddr}), $sp, $how, $err, $cls, $o.1, @comm[$sk]"
        blocks.append(
            f"""    if (args->family == {fam}) {{
      if ($o.0 == 0 || $s->__sk_common.skc_cookie.counter != 0) {{
        printf("C %llu %u %s %u %s %u %d %d %llu %llu %s\\n", nsecs, $ns, ntop({saddr}),
               args->sport, ntop({daddr}), args->dport, $how, $err, $o.0, $o.1, @comm[$sk]);
      }} else {{
        $ms = (nsecs - $o.0) / 1000000;
        $cls = {cls};
        if (@gen == 0) {{
          @n0[{key}] = count();
          @sum0[{key}] = sum(nsecs - $o.0);
          @max0[{key}] = max(nsecs - $o.0);
        }} else {{
          @n1[{key}] = count();
          @sum1[{key}] = sum(nsecs - $o.0);
          @max1[{key}] = max(nsecs - $o.0);
        }}
      }}
    }}"""
        )
    body = "\n".join(blocks)
    return f"""// connmon eBPF collector: Kafka connections' opens and closes (generated)
BEGIN
{{
  printf("{READY}\\n");
}}

tracepoint:sock:inet_sock_set_state
/args->protocol == 6 && ({client} || {server}) && args->newstate != 10 &&
 (args->oldstate != 10 || args->newstate == {SYN_RECV})/
{{
  $sk = (uint64)args->skaddr;
  if (args->newstate == {SYN_SENT}) {{
    @open[$sk] = (nsecs, (uint64)pid);
    @comm[$sk] = comm;
    if (@procs[pid] == 0) {{
      @procs[pid] = 1;
      printf("P %d\\n", pid);
    }}
  }}
  if (args->oldstate == 10) {{
    @open[$sk] = (nsecs, (uint64)0);
  }}
  if (args->oldstate == {ESTABLISHED} && @closing[$sk] == 0) {{
    @closing[$sk] = args->newstate;
  }}
  if (args->newstate == 7) {{
    $o = @open[$sk];
    $s = (struct sock *)args->skaddr;
    $ns = $s->__sk_common.skc_net.net->ns.inum;
    $err = $s->sk_err;
    $how = args->oldstate == {SYN_SENT} ? {SYN_SENT} :
           (args->oldstate == {SYN_RECV} ? {SYN_RECV} : @closing[$sk]);
    $cp = {client} ? (uint16)0 : args->sport;
    $sp = {client} ? args->dport : (uint16)0;
{body}
    delete(@open[$sk]);
    delete(@comm[$sk]);
    delete(@closing[$sk]);
  }}
}}

interval:s:{int(interval_s)}
{{
  if (@gen == 0) {{
    @gen = 1;
    print(@n0); print(@sum0); print(@max0);
    clear(@n0); clear(@sum0); clear(@max0);
  }} else {{
    @gen = 0;
    print(@n1); print(@sum1); print(@max1);
    clear(@n1); clear(@sum1); clear(@max1);
  }}
  clear(@procs);
}}

END
{{
  print(@n0); print(@sum0); print(@max0);
  print(@n1); print(@sum1); print(@max1);
  clear(@n0); clear(@sum0); clear(@max0); clear(@n1); clear(@sum1); clear(@max1);
  clear(@open); clear(@comm); clear(@closing); clear(@procs); clear(@gen);
}}
"""


def _addr(a: str) -> str:
    # A dual-stack socket's IPv4 peer, as the scans report it.
    return a[7:] if a.startswith("::ffff:") and "." in a else a


@dataclass(frozen=True, slots=True)
class _Ending:
    """A connection's addresses, how it ended (the kernel program's ``how`` and the socket's
    errno) and the process that opened it."""

    netns: int
    src: str
    sport: int
    dst: str
    dport: int
    how: int
    err: int
    pid: int
    comm: str

    @property
    def closed_by(self) -> str:
        return closed_by(self.how, self.err)

    @property
    def connect_error(self) -> str | None:
        return connect_error(self.how, self.err)


@dataclass(frozen=True, slots=True)
class ConnectionCount(_Ending):
    """Connections of one group that closed within one interval, counted in the kernel (or one
    connection printed on its own: ``count`` 1). ``sport`` is 0 for a client side (ephemeral
    port), ``dport`` 0 for a broker side. Lifetimes are None when the open was not seen."""

    count: int
    lifetime_sum_s: float | None
    lifetime_max_s: float | None


@dataclass(frozen=True, slots=True)
class Closed(_Ending):
    """One connection printed on its own at CLOSE: a scan may have seen it (its cookie was set)
    or it opened before the collector started (``opened_ns`` 0). Times are CLOCK_MONOTONIC ns."""

    at_ns: int
    opened_ns: int

    @property
    def key(self) -> tuple[int, str, int, str, int]:
        return (self.netns, self.src, self.sport, self.dst, self.dport)

    def as_count(self, client_ports: frozenset[int]) -> ConnectionCount:
        client = self.dport in client_ports
        life = (self.at_ns - self.opened_ns) / 1e9 if self.opened_ns else None
        return ConnectionCount(
            self.netns, self.src, 0 if client else self.sport, self.dst,
            self.dport if client else 0, self.how, self.err, self.pid, self.comm, 1, life, life,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Connecting:
    """A process connects to a Kafka port (printed once per process and interval)."""

    pid: int


def parse_closed(text: str) -> Closed | None:
    """A ``C ...`` printf line, None when it is not one."""
    parts = text.rstrip("\n").split(" ", 11)
    if len(parts) < 11 or parts[0] != "C":
        return None
    try:
        return Closed(
            int(parts[2]), _addr(parts[3]), int(parts[4]), _addr(parts[5]), int(parts[6]),
            int(parts[7]), int(parts[8]), int(parts[10]), parts[11] if len(parts) > 11 else "",
            at_ns=int(parts[1]), opened_ns=int(parts[9]),
        )  # fmt: skip
    except ValueError:
        return None


def parse_counts(
    n: Mapping[str, int], sums: Mapping[str, int], maxes: Mapping[str, int]
) -> list[ConnectionCount]:
    """The three printed maps (keys ``ns,src,sport,dst,dport,how,err,class,pid,comm``; sums and
    maxima in ns) -> one ConnectionCount per key. Lifetime classes fold together."""
    acc: dict[tuple, list] = {}
    for key, count in n.items():
        parts = key.split(",", 9)
        if len(parts) != 10:
            continue
        try:
            ident = (
                int(parts[0]), _addr(parts[1]), int(parts[2]), _addr(parts[3]), int(parts[4]),
                int(parts[5]), int(parts[6]), int(parts[8]), parts[9],
            )  # fmt: skip
        except ValueError:
            continue
        total = sums.get(key, 0) / 1e9
        top = maxes.get(key, 0) / 1e9
        slot = acc.get(ident)
        if slot is None:
            acc[ident] = [int(count), total, top]
        else:
            slot[0] += int(count)
            slot[1] += total
            slot[2] = max(slot[2], top)
    return [
        ConnectionCount(*ident, count=c, lifetime_sum_s=s, lifetime_max_s=m)
        for ident, (c, s, m) in acc.items()
    ]


class OutputParser:
    """bpftrace's JSON lines -> ConnectionCount and Closed items; counts lost events.

    The three maps of one interval arrive one after the other (``@n``, ``@sum``, ``@max``)."""

    def __init__(self) -> None:
        self.lost = 0
        self.attached = False
        self.errors = 0  # lines that were not what this program prints
        self._maps: dict[str, Mapping[str, int]] = {}

    def feed(self, line: str) -> list[ConnectionCount | Closed | Connecting]:
        if not line.strip():
            return []  # bpftrace ends a map print with an empty line
        try:
            msg = json.loads(line)
            kind, data = msg["type"], msg.get("data")
        except (ValueError, KeyError, TypeError):
            self.errors += 1
            return []
        if kind == "printf":
            text = str(data)
            if text.rstrip("\n") == READY:
                self.attached = True
                return []
            if text.startswith("P "):
                try:
                    return [Connecting(int(text[2:]))]
                except ValueError:
                    self.errors += 1
                    return []
            c = parse_closed(text)
            if c is None:
                self.errors += 1
                return []
            return [c]
        if kind == "map" and isinstance(data, dict):
            for name, values in data.items():
                # Two sets of maps (@n0.., @n1..) take turns: one counts while the other is
                # printed and cleared, so no count falls between a print and its clear.
                self._maps[name.rstrip("01")] = values if isinstance(values, dict) else {}
            if "@max" in self._maps:
                maps, self._maps = self._maps, {}
                return list(parse_counts(maps.get("@n", {}), maps.get("@sum", {}), maps["@max"]))
            return []
        if kind == "lost_events" and isinstance(data, dict):
            self.lost += int(data.get("events", 0))
        return []


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether eBPF can run here. When it cannot: ``reason`` (one of ``REASONS``) and ``why``;
    when it can: ``env``, variables bpftrace needs on top of the agent's environment, and
    ``why`` says why they are set (None when there are none)."""

    reason: str | None = None
    why: str | None = None
    env: tuple[tuple[str, str], ...] = ()

    @property
    def why_not(self) -> str | None:
        """Why eBPF cannot run (None: it can)."""
        return self.why if self.reason is not None else None


def privilege_verdict(
    euid: int,
    caps: int,
    env: Mapping[str, str],
    exists: Callable[[str], bool],
    bpftrace: str | None = "bpftrace",
    btf: str = BTF,
) -> Verdict:
    """What bpftrace 0.17 needs of the agent: a pure function of its effective uid and
    capabilities, its environment and which paths exist."""
    if not bpftrace:
        return Verdict("no_bpftrace", "bpftrace is not installed (Debian package bpftrace)")
    if euid != 0:
        return Verdict(
            "not_root",
            f"the agent runs as uid {euid}, and bpftrace runs only as root (euid 0), whatever "
            "its capabilities",
        )
    has = lambda bit: bool(caps >> bit & 1)  # noqa: E731
    admin, bpf = has(CAP_SYS_ADMIN), has(CAP_BPF) and has(CAP_PERFMON)
    if not (admin or bpf):
        return Verdict(
            "no_capability",
            "no CAP_SYS_ADMIN, nor CAP_BPF with CAP_PERFMON: eBPF programs cannot be loaded",
        )
    given = env.get("BPFTRACE_BTF")
    path = given or btf
    if not exists(path):
        if given:
            return Verdict("no_btf", f"BPFTRACE_BTF names {given}, which does not exist")
        return Verdict("no_btf", f"the kernel has no BTF ({btf}): bpftrace cannot read struct sock")
    if admin or given:
        return Verdict()
    # Without CAP_SYS_ADMIN bpftrace cannot walk the kernel's BTF objects to find vmlinux's.
    return Verdict(
        why=f"no CAP_SYS_ADMIN: bpftrace is pointed at the kernel's BTF (BPFTRACE_BTF={btf})",
        env=(("BPFTRACE_BTF", btf),),
    )


def tracefs_verdict(state: str, tracefs: str = TRACEFS) -> Verdict:
    """What the tracefs state (``TRACEFS_STATES``, from ``tracefs_state``) allows."""
    if state == "unmounted":
        return Verdict("no_tracefs", f"tracefs is not mounted at {tracefs} (and mounting failed)")
    if state == "unreadable":
        return Verdict(
            "no_tracefs", f"tracefs at {tracefs} is mounted but the agent may not read it"
        )
    if state == "no_tracepoint":
        return Verdict("no_tracepoint", f"the kernel has no {TRACEPOINT} tracepoint (Linux 4.16+)")
    return Verdict()


def tracefs_state(tracefs: str = TRACEFS) -> str:
    """Whether the tracepoint's directory can be read under ``tracefs`` (``TRACEFS_STATES``)."""
    try:
        os.stat(f"{tracefs}/events/{TRACEPOINT}")
        return "ok"
    except PermissionError:
        return "unreadable"
    except OSError:
        pass
    try:
        os.stat(f"{tracefs}/events")
    except PermissionError:
        return "unreadable"
    except OSError:
        return "unmounted"
    return "no_tracepoint"


def _mount_tracefs(tracefs: str) -> None:
    try:
        subprocess.run(
            ["mount", "-t", "tracefs", "nodev", tracefs], check=True, capture_output=True,
            timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("mounting tracefs at %s failed: %s", tracefs, exc)


def check(
    bpftrace: str | None = None,
    caps: int | None = None,
    btf: str = BTF,
    tracefs: str = TRACEFS,
    euid: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Verdict:
    """Whether eBPF can run here, from this process's facts (arguments replace them). Mounts
    tracefs when it is not mounted and the privileges allow everything else."""
    verdict = privilege_verdict(
        os.geteuid() if euid is None else euid,
        effective_caps() if caps is None else caps,
        os.environ if env is None else env,
        os.path.exists,
        bpftrace or shutil.which("bpftrace"),
        btf,
    )
    if verdict.reason is not None:
        return verdict
    state = tracefs_state(tracefs)
    if state == "unmounted":
        _mount_tracefs(tracefs)
        state = tracefs_state(tracefs)
    return tracefs_verdict(state, tracefs) if state != "ok" else verdict


def prog_stats(pid: int, proc_root: str = "/proc") -> dict[str, int] | None:
    """The kernel's counters (``run_time_ns``, ``run_cnt``, ``recursion_misses``) summed over
    the BPF programs process ``pid`` holds; None when its file descriptors cannot be read."""
    try:
        names = os.listdir(f"{proc_root}/{pid}/fdinfo")
    except OSError:
        return None
    total: dict[str, int] = {"run_time_ns": 0, "run_cnt": 0, "recursion_misses": 0}
    for name in names:
        try:
            with open(f"{proc_root}/{pid}/fdinfo/{name}") as f:
                text = f.read()
        except OSError:
            continue
        if "prog_type:" not in text:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in total:
                total[key] += int(value)
    return total


class EbpfCollector:
    """Runs bpftrace for the current Kafka ports; ``drain()`` returns what it counted since.

    ``ensure(ports)`` starts it, in the background, and restarts it when a new Kafka port
    appears; a restart misses the connections that close while it runs (a second or two).
    Output is read by a thread into a queue, so the agent's scan loop never blocks on it."""

    def __init__(
        self,
        interval_s: int,
        bpftrace: str = "bpftrace",
        start_timeout_s: float = 60.0,
        on_lost: Callable[[int], None] | None = None,
        on_process: Callable[[int], None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.interval_s = max(1, int(interval_s))
        self.bpftrace = bpftrace
        self.env = dict(env or {})  # on top of the agent's environment (``Verdict.env``)
        self.start_timeout_s = start_timeout_s
        self.on_lost = on_lost
        self.on_process = on_process  # called from the reader thread
        self.ports: frozenset[int] = frozenset()
        self.attached_at: float | None = None  # time.time() when the probes were attached
        self.restarts = 0
        self.failure: str | None = None
        self._failed_at = -RETRY_S
        self._proc: subprocess.Popen | None = None
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._ready = threading.Event()
        self._stderr: list[str] = []
        self._reader: threading.Thread | None = None
        self._starter: threading.Thread | None = None
        self._closing = False
        self._misses_pid, self._misses = 0, 0  # runs the kernel skipped, as last read

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._ready.is_set()

    def ensure(self, ports: Iterable[int]) -> bool:
        """Run for these ports and every Kafka port asked for before (a broker that is down
        and leaves the metadata keeps its filter, so its return costs no restart); True when
        the probes are attached. A (re)start runs in the background: the scan that asks for it
        never waits for bpftrace to compile and attach. A failed start is logged, remembered in
        ``failure`` and retried after ``RETRY_S`` or when a new port appears."""
        wanted = self.ports | frozenset(ports)
        if not wanted or self._closing:
            return False
        if self._starter is not None and self._starter.is_alive():
            return False
        if wanted == self.ports:
            if self._proc is None and time.monotonic() < self._failed_at + RETRY_S:
                return False
            if self._proc is not None:
                if self._proc.poll() is None:
                    return self._ready.is_set()
                self.failure = f"bpftrace exited ({self._proc.returncode}): {self._last_error()}"
                log.warning("eBPF collector stopped: %s; restarting it", self.failure)
        self._starter = threading.Thread(
            target=self._restart, args=(wanted,), name="connmon-ebpf-start", daemon=True
        )
        self._starter.start()
        return False

    def _restart(self, wanted: frozenset[int]) -> None:
        self._stop_proc()
        self.ports = wanted
        if self._closing:
            return
        self._start()
        self._ready.wait(self.start_timeout_s)
        if self._closing:
            self._stop_proc()
            return
        if self.running:
            log.info("eBPF collector attached for Kafka ports %s", sorted(wanted))
            return
        if self.failure is None:
            self.failure = f"bpftrace did not attach: {self._last_error()}"
        log.warning("eBPF collector not running: %s (retried in %.0f s)", self.failure, RETRY_S)
        self._stop_proc()
        self._failed_at = time.monotonic()

    def _start(self) -> None:
        env = {**os.environ, **self.env, "BPFTRACE_MAP_KEYS_MAX": str(MAP_KEYS_MAX)}
        self._ready = threading.Event()
        self._stderr = []
        parser = OutputParser()
        try:
            text = program(self.ports, self.interval_s)
            self._proc = proc = subprocess.Popen(
                [self.bpftrace, "-f", "json", "-B", "line", "-e", text],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            self.failure = f"cannot run {self.bpftrace}: {exc}"
            self._proc = None
            return
        self.restarts += 1
        self._reader = threading.Thread(
            target=self._read, args=(proc, parser), name="connmon-ebpf", daemon=True
        )
        self._reader.start()
        threading.Thread(
            target=self._read_errors, args=(proc,), name="connmon-ebpf-err", daemon=True
        ).start()

    def _read(self, proc: subprocess.Popen, parser: OutputParser) -> None:
        assert proc.stdout is not None
        lost = 0
        for line in proc.stdout:
            for item in parser.feed(line):
                if isinstance(item, Connecting):
                    if self.on_process is not None:
                        self.on_process(item.pid)
                else:
                    self._items.put(item)
            if parser.attached and not self._ready.is_set():
                self.attached_at = time.time()
                self.failure = None
                self._ready.set()
            if parser.lost != lost and self.on_lost is not None:
                self.on_lost(parser.lost - lost)
                lost = parser.lost
        self._ready.set()  # exited: wake a waiting start

    def _read_errors(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            # bpftrace warns when it cannot raise RLIMIT_MEMLOCK; newer kernels do not need it.
            if "RLIMIT_MEMLOCK" not in line:
                self._stderr = (self._stderr + [line.strip()])[-20:]

    def _last_error(self) -> str:
        return "; ".join(self._stderr[-3:]) or "no message"

    def drain(self) -> list[ConnectionCount | Closed]:
        """What was counted since the last call; runs the kernel skipped are reported lost."""
        self._count_misses()
        out: list[ConnectionCount | Closed] = []
        while True:
            try:
                out.append(self._items.get_nowait())
            except queue.Empty:
                return out

    def _count_misses(self) -> None:
        # The kernel skips a tracepoint program that fires while a BPF program already runs on
        # that CPU (a softirq that interrupts one); it counts those runs per program.
        proc = self._proc
        if proc is None or self.on_lost is None:
            return
        stats = prog_stats(proc.pid)
        if stats is None:
            return
        misses = stats["recursion_misses"]
        if proc.pid != self._misses_pid:
            self._misses_pid, self._misses = proc.pid, 0
        if misses > self._misses:
            self.on_lost(misses - self._misses)
            self._misses = misses

    def stop(self) -> None:
        """Stop for good (a start under way is waited for); the last counts, printed at
        bpftrace's exit, stay queued for ``drain``."""
        self._closing = True
        self._ready.set()  # a start that waits for the probes gives up
        starter = self._starter
        if starter is not None:
            starter.join(30.0)
        self._stop_proc()

    def _stop_proc(self) -> None:
        proc, self._proc = self._proc, None
        self.attached_at = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(2)  # SIGINT: bpftrace prints its maps in END and exits
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(5)  # the last counts, printed at exit
