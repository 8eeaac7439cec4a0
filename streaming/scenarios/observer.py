"""An independent observer of what each client library does on the wire.

Every second it runs ``ss -tanie`` filtered to the broker ports (state, inode and the kernel's
``lastsnd``/``lastrcv`` per socket), finds the owners through ``/proc/<pid>/fd`` of the
workload processes only, keeps their sockets toward known broker ports, and records per
client x broker: sockets by state over time and each connection's life
(opened, who closed first, lifetime, idle). It shares no code with the agent on purpose: it is
the yardstick the scenarios check docs/kafka-connections.md (and the agent) against.

Parsing and summarising are pure functions; ``Observer`` is the thin sampling loop around them.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

# ss prints these state names; the kernel's names are used in reports.
SS_STATES = {
    "ESTAB": "ESTABLISHED",
    "SYN-SENT": "SYN_SENT",
    "SYN-RECV": "SYN_RECV",
    "FIN-WAIT-1": "FIN_WAIT1",
    "FIN-WAIT-2": "FIN_WAIT2",
    "TIME-WAIT": "TIME_WAIT",
    "CLOSE-WAIT": "CLOSE_WAIT",
    "LAST-ACK": "LAST_ACK",
    "CLOSING": "CLOSING",
    "CLOSE": "CLOSE",
    "UNCONN": "CLOSE",
    "LISTEN": "LISTEN",
}
# States on the path where this side closed first, and where the peer did.
LOCAL_CLOSE = {"FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSING"}
PEER_CLOSE = {"CLOSE_WAIT", "LAST_ACK"}
SHOWN_STATES = ("ESTABLISHED", "CLOSE_WAIT", "TIME_WAIT", "SYN_SENT")
UNATTRIBUTED = "(no pid)"

_PID = re.compile(r"pid=(\d+)")
_INO = re.compile(r"\bino:(\d+)")
_KV_MS = re.compile(r"\b(lastsnd|lastrcv):(\d+)")


@dataclass(frozen=True)
class SockRow:
    """One socket from one ``ss`` sample."""

    state: str
    local: tuple[str, int]
    peer: tuple[str, int]
    pid: int | None
    idle_ms: int | None  # min(lastsnd, lastrcv): time since the last data either way
    inode: int = 0

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (*self.local, *self.peer)


def _split_addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if host.startswith("::ffff:"):
        host = host[7:]
    return host, int(port) if port.isdigit() else 0


def parse_ss(text: str) -> list[SockRow]:
    """Parse ``ss -H -t -a -n -i -e -O`` output, one socket per line (``-p``'s ``pid=`` is read
    too when present)."""
    rows: list[SockRow] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[0] not in SS_STATES:
            continue
        state = SS_STATES[parts[0]]
        pid_m = _PID.search(line)
        ino_m = _INO.search(line)
        times = {k: int(v) for k, v in _KV_MS.findall(line)}
        idle = min(times.values()) if times else None
        rows.append(
            SockRow(
                state=state,
                local=_split_addr(parts[3]),
                peer=_split_addr(parts[4]),
                pid=int(pid_m.group(1)) if pid_m else None,
                idle_ms=idle,
                inode=int(ino_m.group(1)) if ino_m else 0,
            )
        )
    return rows


def with_owners(rows: list[SockRow], owners: Mapping[int, int]) -> list[SockRow]:
    """Fill ``pid`` from an inode -> pid map (sockets of other processes keep None)."""
    return [
        dataclasses.replace(r, pid=owners[r.inode]) if r.pid is None and r.inode in owners else r
        for r in rows
    ]


@dataclass
class Conn:
    """One connection's life as the observer saw it."""

    app: str
    broker: str
    first_seen: float
    last_seen: float
    states: list[str] = field(default_factory=list)
    max_idle_s: float = 0.0
    # Seconds the connection had been idle when the first closing state was seen.
    idle_at_close_s: float | None = None
    state_since: float = 0.0
    max_close_wait_s: float = 0.0

    @property
    def closed_by(self) -> str | None:
        for s in self.states:
            if s in LOCAL_CLOSE:
                return "local"
            if s in PEER_CLOSE:
                return "peer"
        return None


@dataclass
class Sample:
    t: float
    counts: dict[tuple[str, str], Counter]  # (app, broker) -> Counter(state)
    max_idle_s: dict[tuple[str, str], float]


class ObservedConnections:
    """Folds successive ``ss`` samples into per-connection lives and per-pair timelines. Pure:
    the caller supplies rows, the time, the pid -> app map and the port -> broker map."""

    def __init__(self, brokers: Mapping[tuple[str, int], str]) -> None:
        self.brokers = dict(brokers)
        self.conns: dict[tuple, Conn] = {}
        self.samples: list[Sample] = []
        self.host: list[tuple[float, dict[str, int]]] = []  # /proc/net/snmp Tcp counters
        self._gen: dict[tuple, int] = {}

    def update(self, t: float, rows: Iterable[SockRow], apps: Mapping[int, str]) -> Sample:
        counts: dict[tuple[str, str], Counter] = {}
        idles: dict[tuple[str, str], float] = {}
        seen: set[tuple] = set()
        for r in rows:
            broker = self.brokers.get(r.peer)
            if broker is None:
                continue
            conn = self.conns.get(self._conn_id(r.key))
            if r.pid is not None and r.pid in apps:
                app = apps[r.pid]
            elif r.pid is None and conn is not None:
                app = conn.app  # TIME_WAIT / orphaned sockets keep the 4-tuple: match it
            elif r.pid is None and r.state in LOCAL_CLOSE | PEER_CLOSE:
                app = UNATTRIBUTED
            else:
                continue  # another process's socket
            if conn is None or (
                conn.states and conn.states[-1] == "TIME_WAIT" and r.state != "TIME_WAIT"
            ):
                conn = self._new_conn(r.key, app, broker, t)
            if not conn.states or conn.states[-1] != r.state:
                if r.state in LOCAL_CLOSE | PEER_CLOSE and conn.idle_at_close_s is None:
                    conn.idle_at_close_s = conn.max_idle_s if conn.states else None
                conn.states.append(r.state)
                conn.state_since = t
            conn.last_seen = t
            if r.idle_ms is not None and r.state == "ESTABLISHED":
                conn.max_idle_s = r.idle_ms / 1000
            if r.state == "CLOSE_WAIT":
                conn.max_close_wait_s = max(conn.max_close_wait_s, t - conn.state_since)
            seen.add(self._conn_id(r.key))
            pair = (app, broker)
            counts.setdefault(pair, Counter())[r.state] += 1
            if r.idle_ms is not None and r.state == "ESTABLISHED":
                idles[pair] = max(idles.get(pair, 0.0), r.idle_ms / 1000)
        sample = Sample(t, counts, idles)
        self.samples.append(sample)
        return sample

    def _conn_id(self, key: tuple) -> tuple:
        return (*key, self._gen.get(key, 0))

    def _new_conn(self, key: tuple, app: str, broker: str, t: float) -> Conn:
        if self._conn_id(key) in self.conns:
            self._gen[key] = self._gen.get(key, 0) + 1  # the 4-tuple was reused
        conn = Conn(app=app, broker=broker, first_seen=t, last_seen=t, state_since=t)
        self.conns[self._conn_id(key)] = conn
        return conn


def parse_snmp(text: str) -> dict[str, int]:
    """The ``Tcp:`` counters of ``/proc/net/snmp`` (header line, then values)."""
    rows = [ln.split() for ln in text.splitlines() if ln.startswith("Tcp:")]
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:], strict=False)}


def host_rates(counters: list[tuple[float, dict[str, int]]], name: str) -> tuple[int, float]:
    """(total increase, peak per-minute rate between consecutive samples) of one counter."""
    pts = [(t, c[name]) for t, c in counters if name in c]
    if len(pts) < 2:
        return 0, 0.0
    peak = max(
        (
            (v1 - v0) * 60 / (t1 - t0)
            for (t0, v0), (t1, v1) in zip(pts, pts[1:], strict=False)
            if t1 > t0
        ),
        default=0.0,
    )
    return pts[-1][1] - pts[0][1], peak


# ---- summaries (pure) -----------------------------------------------------------------------
@dataclass(frozen=True)
class PairSummary:
    app: str
    broker: str
    connections: int  # distinct connections seen
    max_established: int  # most ESTABLISHED sockets at once
    closed_local: int
    closed_peer: int
    max_close_wait: int
    max_close_wait_age_s: float
    max_time_wait: int
    max_idle_s: float
    median_lifetime_s: float | None


def summarise(observed: ObservedConnections) -> list[PairSummary]:
    """One row per client x broker over the whole observation."""
    pairs: dict[tuple[str, str], list[Conn]] = {}
    for c in observed.conns.values():
        pairs.setdefault((c.app, c.broker), []).append(c)
    peak: dict[tuple[str, str], Counter] = {}
    for s in observed.samples:
        for pair, cnt in s.counts.items():
            p = peak.setdefault(pair, Counter())
            for state, n in cnt.items():
                p[state] = max(p[state], n)
    out = []
    for pair in sorted(set(pairs) | set(peak)):
        conns = pairs.get(pair, [])
        lifetimes = sorted(c.last_seen - c.first_seen for c in conns if c.closed_by is not None)
        out.append(
            PairSummary(
                app=pair[0],
                broker=pair[1],
                connections=len(conns),
                max_established=peak.get(pair, Counter())["ESTABLISHED"],
                closed_local=sum(1 for c in conns if c.closed_by == "local"),
                closed_peer=sum(1 for c in conns if c.closed_by == "peer"),
                max_close_wait=peak.get(pair, Counter())["CLOSE_WAIT"],
                max_close_wait_age_s=max((c.max_close_wait_s for c in conns), default=0.0),
                max_time_wait=peak.get(pair, Counter())["TIME_WAIT"],
                max_idle_s=max((c.max_idle_s for c in conns), default=0.0),
                median_lifetime_s=lifetimes[len(lifetimes) // 2] if lifetimes else None,
            )
        )
    return out


def summary_table(rows: list[PairSummary]) -> str:
    header = (
        f"{'app':<28} {'broker':<9} {'conns':>5} {'maxEST':>6} {'cl.loc':>6} {'cl.peer':>7} "
        f"{'maxCW':>5} {'CWage':>6} {'maxTW':>5} {'maxIdle':>7} {'medLife':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        life = "-" if r.median_lifetime_s is None else f"{r.median_lifetime_s:.1f}"
        lines.append(
            f"{r.app[:28]:<28} {r.broker:<9} {r.connections:>5} {r.max_established:>6} "
            f"{r.closed_local:>6} {r.closed_peer:>7} {r.max_close_wait:>5} "
            f"{r.max_close_wait_age_s:>6.0f} {r.max_time_wait:>5} {r.max_idle_s:>7.1f} {life:>7}"
        )
    return "\n".join(lines)


def timeline_table(
    observed: ObservedConnections,
    t0: float,
    apps: Iterable[str] | None = None,
    max_per_pair: int = 25,
) -> str:
    """Sockets per client x broker over time, one line per change (compact: at most
    ``max_per_pair`` lines per pair, then a count of the changes left out)."""
    wanted = set(apps) if apps is not None else None
    head = f"{'t_s':>6}  {'app':<28} {'broker':<9} " + " ".join(f"{s[:5]:>5}" for s in SHOWN_STATES)
    lines = [head]
    last: dict[tuple[str, str], tuple[int, ...]] = {}
    shown: Counter = Counter()
    for s in observed.samples:
        for pair in sorted(set(s.counts) | set(last)):
            if wanted is not None and pair[0] not in wanted:
                continue
            cnt = s.counts.get(pair, Counter())
            vec = tuple(cnt[st] for st in SHOWN_STATES)
            if last.get(pair) == vec:
                continue
            last[pair] = vec
            shown[pair] += 1
            if shown[pair] > max_per_pair:
                continue
            lines.append(
                f"{s.t - t0:>6.0f}  {pair[0][:28]:<28} {pair[1]:<9} "
                + " ".join(f"{v:>5}" for v in vec)
            )
    for pair, n in sorted(shown.items()):
        if n > max_per_pair:
            lines.append(f"   ...  {pair[0][:28]:<28} {pair[1]:<9} {n - max_per_pair} more changes")
    return "\n".join(lines)


# ---- the sampling loop (I/O) ----------------------------------------------------------------
def read_snmp() -> str:
    with open("/proc/net/snmp") as f:
        return f.read()


def run_ss(ports: Iterable[int] = ()) -> str:
    """``ss`` without ``-p`` (which walks every process's fds: slow on a busy host), filtered
    in the kernel to the broker ports; owners come from ``socket_owners``."""
    ss = shutil.which("ss") or "/usr/bin/ss"
    cmd = [ss, "-H", "-t", "-a", "-n", "-i", "-e", "-O"]
    ports = sorted(set(ports))
    if ports:
        cmd.append("( " + " or ".join(f"dport = :{p}" for p in ports) + " )")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout


def socket_owners(pids: Iterable[int], proc: str = "/proc") -> dict[int, int]:
    """inode -> pid for the sockets of just these processes."""
    owners: dict[int, int] = {}
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # exited
        for fd in fds:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                owners[int(link[8:-1])] = pid
    return owners


class Observer:
    """Samples ``ss`` every ``interval_s`` in a thread until ``stop()``."""

    def __init__(
        self,
        brokers: Mapping[tuple[str, int], str],
        apps: Callable[[], Mapping[int, str]],
        interval_s: float = 1.0,
        sampler: Callable[[Iterable[int]], str] = run_ss,
        snmp: Callable[[], str] = read_snmp,
    ) -> None:
        self.observed = ObservedConnections(brokers)
        self._apps, self._interval, self._sampler, self._snmp = apps, interval_s, sampler, snmp
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="observer", daemon=True)
        self.t0 = time.time()

    def start(self) -> Observer:
        self.t0 = time.time()
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                t = time.time()
                apps = self._apps()
                ports = [port for _, port in self.observed.brokers]
                rows = parse_ss(self._sampler(ports))
                rows = with_owners(rows, socket_owners(apps))
                self.observed.host.append((t, parse_snmp(self._snmp())))
                self.observed.update(t, rows, apps)
            except (OSError, subprocess.SubprocessError):
                pass  # one missed sample is fine; the next one catches up
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)

    def report(self, apps: Iterable[str] | None = None) -> str:
        rows = summarise(self.observed)
        if apps is not None:
            keep = set(apps)
            rows = [r for r in rows if r.app in keep]
        host = self.observed.host
        span = host[-1][0] - host[0][0] if len(host) > 1 else 0.0
        opens, opens_peak = host_rates(host, "ActiveOpens")
        fails, fails_peak = host_rates(host, "AttemptFails")
        return (
            f"host TCP over {span:.0f}s: ActiveOpens +{opens} (peak {opens_peak:.0f}/min), "
            f"AttemptFails +{fails} (peak {fails_peak:.0f}/min)\n"
            "connections per client x broker (observer, ss every "
            f"{self._interval:g}s)\n{summary_table(rows)}\n\n"
            f"timeline (one line per change)\n{timeline_table(self.observed, self.t0, apps)}"
        )
