"""Benchmark: the agent's scan of every network namespace against ``ss`` run in each, in one run.

For each count N in ``--namespaces`` it creates network namespaces ``cmbench0..N-1`` (lo up),
each with one small worker process (started with ``ip netns exec``) that listens on
127.0.0.1:9092 inside the namespace and holds ``--sockets-per-ns`` / 2 loopback connections to
it (both ends open, both ends Kafka sockets). Namespaces are added as N grows and all are
removed at the end, also on failure, Ctrl-C or SIGTERM. Then it times, median of ``--repeat``
round-robin repetitions (wall time, and CPU time of each repetition, median too):

- the ``ss`` baseline, once per namespace the agent dumps (the N bench namespaces through
  ``ip netns exec cmbenchI ss ...``, plus the host's own namespace with plain ``ss``): ``ss -tani``
  and ``ss -tani '( sport = :9092 or dport = :9092 )'``, stdout to /dev/null. Its CPU is the
  children's (``RUSAGE_CHILDREN`` deltas), which includes ``ip netns exec``'s own work (it
  enters the namespace, makes a mount namespace, remounts /sys, then execs ss);
- ``ip netns exec cmbenchI true`` per namespace, to show what ``ip netns exec`` alone costs;
- ``Collector("netlink", namespaces="all").scan([9092])``: steady state (a kept collector, one
  open sock_diag socket per namespace) and first scan (a new collector: every pid's namespace
  read from /proc, one setns thread per namespace); CPU is ``time.process_time`` (all threads);
- parts of it: ``NamespaceTable.refresh()`` (steady state, the per-scan namespace discovery),
  ``open_netlink_in`` once per bench namespace (the setns part of a first scan), and one
  ``netlink.dump([9092])`` in the host's namespace (few sockets of its own, but the kernel walks
  the established hash it shares with every namespace unless ``tcp_child_ehash_entries`` is set);
- the whole agent (``Agent.scan``: collect, classify, attribute with ``ProcessTable``,
  lifecycle, metrics), steady state and first scan (a new ``Agent``: every socket's owner found
  in /proc/*/fd, an ``opened`` event per socket). Summaries are out of it (summary interval 1 h).

The process's GC thresholds are set as ``connmon agent`` sets them. Run as root:
``.venv/bin/python benchmarks/agent/bench_netns.py --namespaces 1 10 50 --sockets-per-ns 1000
--repeat 9 --json benchmarks/agent/results-netns-2026-11-23.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench_scan import NullSink  # noqa: E402

from streaming.agent import config, netlink, netns  # noqa: E402
from streaming.agent.collector import Collector  # noqa: E402
from streaming.agent.metrics import AgentMetrics  # noqa: E402
from streaming.agent.procs import ProcessTable  # noqa: E402
from streaming.agent.runner import Agent, make_refresher  # noqa: E402

PREFIX = "cmbench"
PORT = 9092
_OURS = re.compile(rf"{PREFIX}\d+")
LOCK = "/run/connmon-bench-netns.lock"  # one run at a time: the namespace names are fixed

# Runs inside a namespace (python -S: stdlib only). argv: connections, port. Prints the number
# of sockets it holds once they are all open, then holds them until stdin closes.
WORKER = r"""
import resource, socket, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if 2 * n + 64 > hard:
    sys.exit(f"need {2 * n + 64} file descriptors, the hard limit is {hard}")
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2 * n + 64), hard))
lis = socket.socket()
lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lis.bind(("127.0.0.1", port))
lis.listen(4096)
held = []
accepted = 0
for j in range(n):
    c = socket.socket()
    c.connect(("127.0.0.1", port))
    held.append(c)
    if j % 512 == 511 or j == n - 1:
        while accepted < j + 1:
            held.append(lis.accept()[0])
            accepted += 1
print(len(held), flush=True)
sys.stdin.read()
"""


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def our_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [w.split()[0] for w in out.splitlines() if w and _OURS.fullmatch(w.split()[0])]


class Namespaces:
    """``cmbench<i>`` namespaces, each with a worker holding its sockets; ``close()`` undoes all."""

    def __init__(self, sockets_per_ns: int) -> None:
        self.conns = sockets_per_ns // 2
        self.names: list[str] = []
        self.workers: list[subprocess.Popen] = []
        self.sockets: list[int] = []

    def grow(self, n: int) -> None:
        new = [f"{PREFIX}{i}" for i in range(len(self.names), n)]
        for name in new:
            self.names.append(name)  # before creating it, so close() removes a half-made one
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        started = []
        for name in new:
            p = subprocess.Popen(
                ["ip", "netns", "exec", name, sys.executable, "-S", "-c", WORKER]
                + [str(self.conns), str(PORT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.workers.append(p)
            started.append((name, p))
        for name, p in started:
            line = p.stdout.readline().strip() if p.stdout else ""
            if not line.isdigit():
                raise RuntimeError(f"worker in {name} failed (exit {p.wait()})")
            self.sockets.append(int(line))

    def close(self) -> None:
        for p in self.workers:
            if p.stdin:
                with contextlib.suppress(OSError):
                    p.stdin.close()
        deadline = time.monotonic() + 10
        for p in self.workers:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.workers.clear()
        for name in set(self.names) | set(our_namespaces()):
            sh("ip", "netns", "del", name, check=False)
        self.names.clear()


def raise_nofile(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, n), hard), hard))


def children_cpu() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime


def self_cpu() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def run_all(cmds: list[list[str]]) -> None:
    for cmd in cmds:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)


def measure(fns: dict[str, tuple[Callable[[], object], str]], repeat: int) -> dict[str, float]:
    """Median wall time and CPU of each function, run round-robin so they share the load.

    Each entry is (function, "self" | "children"): whose CPU to count. ``self`` is
    ``time.process_time`` (with the user/system split from getrusage); ``children`` is the
    RUSAGE_CHILDREN delta (children waited for during the call).
    """
    rows: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, (fn, whose) in fns.items():
            if whose == "self":
                r0, c0, t0 = self_cpu(), time.process_time(), time.perf_counter()
                fn()
                t1, c1, r1 = time.perf_counter(), time.process_time(), self_cpu()
                cpu = c1 - c0
            else:
                r0, t0 = children_cpu(), time.perf_counter()
                fn()
                t1, r1 = time.perf_counter(), children_cpu()
                cpu = (r1[0] - r0[0]) + (r1[1] - r0[1])
            rows[k].append((t1 - t0, cpu, r1[0] - r0[0], r1[1] - r0[1]))
    out: dict[str, float] = {}
    for k, v in rows.items():
        out[f"{k}_s"] = statistics.median(x[0] for x in v)
        out[f"{k}_cpu_s"] = statistics.median(x[1] for x in v)
        out[f"{k}_cpu_user_s"] = statistics.median(x[2] for x in v)
        out[f"{k}_cpu_sys_s"] = statistics.median(x[3] for x in v)
    return out


def agent_config() -> config.AgentConfig:
    return config.build(
        {
            "host": "bench",
            "collector": "netlink",
            "network_namespaces": "all",
            "summary_interval_s": 3600,
            "metrics_address": "",
            "clusters": [
                {"name": "bench", "endpoints": [f"127.0.0.1:{PORT}"], "listener_ports": [PORT]}
            ],
        },
        env={},
    )


def new_agent(cfg: config.AgentConfig) -> tuple[Agent, NullSink]:
    """An agent as ``connmon agent`` builds it: its own Collector (namespaces from the config)
    and ProcessTable (socket owners from /proc/*/fd, pods from cgroups)."""
    metrics = AgentMetrics()
    sink = NullSink()
    agent = Agent(cfg, sink, metrics, make_refresher(cfg, metrics))
    if agent.collector.table is None or not isinstance(agent.procs, ProcessTable):
        raise RuntimeError("the agent does not scan every namespace or attribute with ProcessTable")
    return agent, sink


def load3() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def bench_one(ns: Namespaces, n: int, repeat: int, cfg: config.AgentConfig) -> dict:
    t0 = time.perf_counter()
    ns.grow(n)
    setup_s = time.perf_counter() - t0
    names = ns.names[:n]
    load_before = load3()

    # The namespaces the agent dumps: the bench ones plus the host's own (and any other).
    probe = Collector("netlink", namespaces="all")
    all_records = probe.scan()
    kafka_records = probe.scan([PORT])
    scanned = probe.namespaces_scanned
    probe.close()
    own = netns.read_ns("/proc", "self")
    others = scanned - n - 1
    if others:
        print(f"note: {others} namespace(s) besides the host's and ours", file=sys.stderr)

    filt = f"( sport = :{PORT} or dport = :{PORT} )"

    def per_ns(*cmd: str) -> list[list[str]]:
        return [list(cmd)] + [["ip", "netns", "exec", name, *cmd] for name in names]

    ss_all = per_ns("ss", "-tani")
    ss_filter = per_ns("ss", "-tani", filt)
    exec_true = [["ip", "netns", "exec", name, "true"] for name in names]
    for cmds in (ss_all, ss_filter):  # warm up (page cache, binaries)
        run_all(cmds)

    steady = Collector("netlink", namespaces="all")
    steady.scan([PORT])
    table = netns.NamespaceTable()
    table.refresh()
    agent, sink = new_agent(cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    agent.scan()
    first_once = (time.perf_counter() - t0, time.process_time() - c0, sink.n)
    sink.n = 0
    attributed = sum(1 for t in agent.lifecycles.sockets.values() if t.meta.pid is not None)
    first_events: list[int] = []
    pids = [p.pid for p in ns.workers[:n]]  # ip netns exec execs the worker: same pid

    def collector_first() -> None:
        c = Collector("netlink", namespaces="all")
        c.scan([PORT])
        c.close()

    def open_all() -> None:
        for pid in pids:
            netns.open_netlink_in(f"/proc/{pid}/ns/net").close()

    def agent_first() -> None:
        a, s = new_agent(cfg)
        a.scan()
        first_events.append(s.n)
        a.collector.close()

    res: dict = {
        "namespaces": n,
        "namespaces_scanned": scanned,
        "sockets_per_ns": ns.sockets[0] if ns.sockets else 0,
        "bench_sockets": sum(ns.sockets[:n]),
        "tcp_sockets_all_namespaces": len(all_records),
        "tcp_sockets_host_ns": sum(1 for r in all_records if r.netns == own),
        "kafka_sockets_seen": len(kafka_records),
        # Namespaces (with a process) neither ours nor the host's: the agent dumps them too, the
        # ss baseline does not, so a non-zero count makes the ratios unfavourable to the agent.
        "other_namespaces": others,
        "setup_s": round(setup_s, 2),
    }
    res.update(
        measure(
            {
                "ss_tani": (lambda: run_all(ss_all), "children"),
                "collector_scan": (lambda: steady.scan([PORT]), "self"),
                "ss_tani_filter": (lambda: run_all(ss_filter), "children"),
                "agent_scan": (agent.scan, "self"),
                "ip_netns_exec_true": (lambda: run_all(exec_true), "children"),
                "ns_table_refresh": (table.refresh, "self"),
                "netlink_dump_host_ns": (lambda: netlink.dump([PORT]), "self"),
                "open_netlink_in_each": (open_all, "self"),
                "collector_first_scan": (collector_first, "self"),
                "agent_first_scan": (agent_first, "self"),
            },
            repeat,
        )
    )
    res["collector_errors"] = dict(steady.errors)
    res["agent_scan_events_per_scan"] = sink.n / repeat
    res["agent_sockets_seen"] = agent.last_socket_count
    res["agent_sockets_attributed"] = attributed
    res["agent_first_scan_events"] = statistics.median(first_events)
    res["agent_first_scan_once_s"] = first_once[0]
    res["agent_first_scan_once_cpu_s"] = first_once[1]
    steady.close()
    agent.collector.close()
    res["loadavg_before"] = load_before
    res["loadavg_after"] = load3()
    for k in list(res):
        if k.endswith("_s") and isinstance(res[k], float):
            res[k] = round(res[k], 5)
    for what in ("collector_scan", "agent_scan", "collector_first_scan", "agent_first_scan"):
        for base in ("ss_tani", "ss_tani_filter"):
            for unit in ("", "_cpu"):
                a, b = res[f"{what}{unit}_s"], res[f"{base}{unit}_s"]
                res[f"ratio{unit or '_wall'}_{what}_vs_{base}"] = round(a / b, 4) if b else None
    return res


def machine() -> dict:
    os_name = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])

    def sysctl(name: str) -> int | None:
        try:
            return int(Path(f"/proc/sys/net/ipv4/{name}").read_text())
        except (OSError, ValueError):
            return None

    orphans = sysctl("tcp_max_orphans")
    return {
        "os": os_name,
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "ss": sh("ss", "-V", check=False).stdout.strip(),
        # 0: every namespace shares the host's TCP established hash, and each sock_diag dump
        # walks all of its buckets (once per address family).
        "tcp_child_ehash_entries": sysctl("tcp_child_ehash_entries"),
        # The kernel sets tcp_max_orphans to half the established hash's bucket count.
        "tcp_ehash_buckets_derived": 2 * orphans if orphans else None,
        "loadavg_start": load3(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--namespaces", type=int, nargs="+", default=[1, 10, 50])
    ap.add_argument("--sockets-per-ns", type=int, default=1000, help="2 per connection")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (ip netns, setns)", file=sys.stderr)
        return 2
    counts = sorted(set(args.namespaces))
    if counts[0] < 1 or args.sockets_per_ns < 2:
        ap.error("--namespaces and --sockets-per-ns must be positive (sockets >= 2)")

    def on_term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    # Ctrl-C must clean up even when started in the background (where SIGINT is inherited as
    # ignored); the workers end when their stdin closes, whatever happens to this process.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    lock = open(LOCK, "w")  # noqa: SIM115 (held until exit)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another run holds {LOCK}", file=sys.stderr)
        return 2
    gc.set_threshold(50_000, 20, 20)  # as `connmon agent` does
    raise_nofile(4096)
    stale = our_namespaces()
    if stale:
        print(f"removing namespaces left by an earlier run: {' '.join(stale)}", file=sys.stderr)
        for name in stale:
            sh("ip", "netns", "del", name, check=False)
    out: dict = {
        "machine": machine(),
        "options": {
            "namespaces": counts,
            "sockets_per_ns": args.sockets_per_ns,
            "repeat": args.repeat,
            "port": PORT,
        },
        "runs": [],
    }
    cfg = agent_config()
    ns = Namespaces(args.sockets_per_ns)
    try:
        for n in counts:
            r = bench_one(ns, n, args.repeat, cfg)
            print(json.dumps(r), flush=True)
            out["runs"].append(r)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not stop the clean-up
        ns.close()
    out["machine"]["loadavg_end"] = load3()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
