"""Where a steady-state agent scan spends its CPU, user and system time separately.

Opens the same sockets as ``bench_scan.py --cpu-sockets N`` (every connection a Kafka one, both
ends open), builds the agent the way ``connmon agent`` does (default config: every network
namespace, /proc attribution, the CLI's GC threshold), runs a first scan and a few warm-up
scans, then times ``--scans`` steady scans at a fake 5 s clock (summaries every third scan, as
with the default 15 s summary interval) with ``getrusage`` around each piece:

- ``NamespaceTable.refresh`` (list /proc, namespace links), ``netlink.dump`` (request, the
  kernel's walk, reads and parsing), ``ProcessTable.lookup``, ``SocketLifecycles.update``,
  ``Agent.summarize``, and the whole ``Agent.scan`` (the rest is the agent's own loop:
  the fast path for unchanged sockets, classification, metrics);
- for reference, with the same sockets: the dump alone (reads, no parsing) with the agent's
  port filter, the same without tcp_info, and the same walk with a filter no socket matches
  (the kernel's cost of visiting every socket on the host).

``--cprofile`` prints the top functions of the steady scans instead.

Run as root: ``.venv/bin/python benchmarks/agent/profile_scan.py --sockets 5000 --scans 30``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import platform
import pstats
import resource
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scan import REPO, NullSink, Sockets, agent_config_file, read_dump  # noqa: E402

sys.path.insert(0, str(REPO))
from streaming.agent import config, netlink  # noqa: E402
from streaming.agent.metrics import AgentMetrics  # noqa: E402
from streaming.agent.runner import Agent, make_refresher  # noqa: E402


def rusage() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


class Timed:
    """Accumulates user and system time of every call of one function."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.user = self.system = 0.0
        self.calls = 0

    def __call__(self, *a, **kw):
        u0, s0 = rusage()
        try:
            return self.fn(*a, **kw)
        finally:
            u1, s1 = rusage()
            self.user += u1 - u0
            self.system += s1 - s0
            self.calls += 1


def per_call(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    u0, s0 = rusage()
    for _ in range(repeat):
        fn()
    u1, s1 = rusage()
    return {"user_ms": 1000 * (u1 - u0) / repeat, "system_ms": 1000 * (s1 - s0) / repeat}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sockets", type=int, default=5000, help="connections (x2 sockets)")
    ap.add_argument("--scans", type=int, default=30)
    ap.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds to wait between the timed scans (as the agent does: caches go cold)",
    )
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    sk = Sockets(args.sockets, 1.0)
    try:
        with tempfile.TemporaryDirectory() as d:
            data = agent_config_file(sk, Path(d) / "agent.yaml")
        cfg = config.build(data, env={})
        metrics = AgentMetrics()
        agent = Agent(cfg, NullSink(), metrics, make_refresher(cfg, metrics))
        gc.set_threshold(50_000, 20, 20)  # as `connmon agent` sets it
        now = [1_000_000.0]
        agent.clock = lambda: now[0]
        for _ in range(4):  # the first scan, then warm-up
            agent.scan()
            now[0] += 5.0
        pieces: dict[str, Timed] = {}

        def wrap(owner: object, name: str, label: str) -> None:
            pieces[label] = Timed(getattr(owner, name))
            setattr(owner, name, pieces[label])

        if agent.collector.table is not None:
            wrap(agent.collector.table, "refresh", "NamespaceTable.refresh")
        wrap(netlink, "dump", "netlink.dump (kernel walk + reads + parse)")
        wrap(agent.procs, "lookup", "ProcessTable.lookup")
        wrap(agent.lifecycles, "update", "SocketLifecycles.update")
        wrap(agent, "summarize", "Agent.summarize (every 3rd scan)")
        wrap(agent, "scan", "Agent.scan (whole)")
        gc_time = [0.0, 0.0, 0]  # total, start of the current collection, collections

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                gc_time[1] = time.process_time()
            else:
                gc_time[0] += time.process_time() - gc_time[1]
                gc_time[2] += 1

        gc.callbacks.append(on_gc)
        load0 = Path("/proc/loadavg").read_text().split()[:3]
        prof = cProfile.Profile() if args.cprofile else None
        if prof:
            prof.enable()
        for _ in range(args.scans):
            agent.scan()
            now[0] += 5.0
            time.sleep(args.pause)
        if prof:
            prof.disable()
            st = pstats.Stats(prof)
            st.sort_stats("tottime").print_stats(20)
            return 0
        gc.callbacks.remove(on_gc)
        load1 = Path("/proc/loadavg").read_text().split()[:3]
        per_scan = {
            k: {
                "user": round(1000 * p.user / args.scans, 2),
                "system": round(1000 * p.system / args.scans, 2),
            }
            for k, p in pieces.items()
        }
        out: dict = {
            "date": time.strftime("%Y-%m-%d"),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "kafka_sockets": agent.last_socket_count,
            "host_tcp_sockets": len(netlink.dump()),
            "namespaces": agent.collector.namespaces_scanned,
            "scans": args.scans,
            "pause_s": args.pause,
            "load_before": load0,
            "load_after": load1,
            "per_scan_ms": per_scan,
            "gc": {
                "collections": gc_time[2],
                "ms_per_scan": round(1000 * gc_time[0] / args.scans, 2),
            },
        }
        ports = sorted(agent.refresher.current().ports())
        buf = bytearray(1 << 16)
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, netlink.NETLINK_SOCK_DIAG) as s:
            req = netlink.build_request_all(ports)
            no_info = bytearray(req)
            no_info[16 + 3] = 0  # inet_diag_req.idiag_ext: no tcp_info
            nothing = netlink.build_request_all([1])  # no socket on port 1: walk only
            reads = read_dump(s, req, buf)
            out["reference_ms"] = {
                "dump, no parsing (agent's filter)": per_call(
                    lambda: read_dump(s, req, buf), args.scans
                ),
                "dump without tcp_info, no parsing": per_call(
                    lambda: read_dump(s, bytes(no_info), buf), args.scans
                ),
                "walk, filter matching nothing": per_call(
                    lambda: read_dump(s, nothing, buf), args.scans
                ),
            }
            out["reads_per_dump"] = reads
        for v in out["reference_ms"].values():
            for k in v:
                v[k] = round(v[k], 2)
        print(json.dumps(out, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        return 0
    finally:
        sk.close()


if __name__ == "__main__":
    sys.exit(main())
