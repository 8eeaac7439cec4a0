"""Benchmark: the agent's socket scan against ``ss -tani`` on the same sockets, in one run.

Opens N loopback connections (both ends in this process, so 2N sockets), spread over
127.0.0.1..127.0.0.K so ephemeral ports do not run out; a fraction of them go to a "Kafka"
port, the rest to another port. Then times, median of ``--repeat`` runs each:

- ``ss -tani`` (output to /dev/null) and ``ss -tani '( sport = :P or dport = :P )'``;
- the agent's netlink dump + parse, without and with the in-kernel port filter;
- the agent's whole steady-state scan (dump, classify, attribute, lifecycle) with the filter;
- the /proc/net/tcp fallback, for reference.

``--cpu-seconds S`` also runs ``connmon agent`` as a child process at a 5 s interval against
the Kafka sockets for S seconds and reports its CPU share of one core (from /proc/<pid>/stat,
excluding start-up and the first scan).

Run as root (or raise ``ulimit -n`` first): ``.venv/bin/python benchmarks/agent/bench_scan.py
--sockets 20000 100000 --cpu-sockets 10000``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from streaming.agent import config, netlink, procnet  # noqa: E402
from streaming.agent.metrics import AgentMetrics  # noqa: E402
from streaming.agent.runner import Agent, make_refresher  # noqa: E402


class NullSink:
    def __init__(self) -> None:
        self.n = 0

    def send(self, e: dict) -> None:
        self.n += 1

    def pump(self) -> None:
        pass


def raise_nofile(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if n > hard:
        raise RuntimeError(f"need {n} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, n), hard))


def pick_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(conn, ip: str, ports: tuple[int, int], n: int, every: int) -> None:
    """Hold ``n`` connections to listeners on ``ip`` (both ends) until told to stop."""
    try:
        raise_nofile(2 * n + 64)
        listeners = []
        for port in ports:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
            s.listen(4096)
            s.setblocking(False)
            listeners.append(s)
        held: list[socket.socket] = []

        def drain() -> None:
            for s in listeners:
                while True:
                    try:
                        a, _ = s.accept()
                    except BlockingIOError:
                        break
                    held.append(a)

        for j in range(n):
            c = socket.socket()
            c.connect((ip, ports[0] if every and j % every == 0 else ports[1]))
            held.append(c)
            if j % 512 == 511:
                drain()
        drain()
        conn.send(len(held))
        conn.recv()
        for s in held + listeners:
            s.close()
    except Exception as exc:  # report, do not hang the parent
        conn.send(f"error: {exc!r}")


class Sockets:
    """N client->server connections, both ends open, held by worker processes (each under the
    RLIMIT_NOFILE hard limit), each worker on its own loopback address 127.0.1.<w>."""

    PER_WORKER = 8000

    def __init__(self, n: int, kafka_fraction: float, addrs: int = 0) -> None:
        import multiprocessing as mp

        self.kafka_port, self.other_port = pick_port(), pick_port()
        workers = max(1, -(-n // self.PER_WORKER))
        self.addrs = [f"127.0.1.{w + 1}" for w in range(workers)]
        every = max(1, round(1 / kafka_fraction)) if kafka_fraction > 0 else 0
        ctx = mp.get_context("fork")
        self.procs = []
        self.pipes = []
        for w, ip in enumerate(self.addrs):
            share = n // workers + (1 if w < n % workers else 0)
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=_worker, args=(child, ip, (self.kafka_port, self.other_port), share, every)
            )
            p.start()
            self.procs.append(p)
            self.pipes.append(parent)
        held = [pipe.recv() for pipe in self.pipes]
        errors = [h for h in held if isinstance(h, str)]
        if errors:
            self.close()
            raise RuntimeError(errors[0])
        self.sockets = sum(held)

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send("stop")
        for p in self.procs:
            p.join(30)


def medians(fns: dict, repeat: int) -> dict[str, float]:
    """Median wall time of each function, run round-robin so they share the machine's load."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def run_ss(args: list[str]) -> None:
    subprocess.run(["ss", *args], stdout=subprocess.DEVNULL, check=True)


def agent_config_file(sk: Sockets, path: Path) -> dict:
    data = {
        "host": "bench",
        "clusters": [
            {
                "name": "bench",
                "endpoints": [f"{ip}:{sk.kafka_port}" for ip in sk.addrs],
                "listener_ports": [sk.kafka_port],
            }
        ],
        "metrics_address": "",
    }
    path.write_text(json.dumps(data))  # JSON is valid YAML
    return data


def bench_one(n: int, repeat: int, kafka_fraction: float) -> dict:
    t0 = time.perf_counter()
    sk = Sockets(n, kafka_fraction)
    setup_s = time.perf_counter() - t0
    kp = sk.kafka_port
    try:
        total = len(netlink.dump())
        filtered = len(netlink.dump([kp]))
        res: dict = {
            "connections": n,
            "sockets_total": total,
            "sockets_kafka": filtered,
            "setup_s": round(setup_s, 1),
        }
        res.update(
            medians(
                {
                    "ss_tani_s": lambda: run_ss(["-tani"]),
                    "agent_dump_s": lambda: netlink.dump(),
                    "ss_tani_filter_s": lambda: run_ss(
                        ["-tani", f"( sport = :{kp} or dport = :{kp} )"]
                    ),
                    "agent_dump_filter_s": lambda: netlink.dump([kp]),
                    "proc_fallback_s": lambda: procnet.read_sockets("/proc"),
                },
                repeat,
            )
        )
        with tempfile.TemporaryDirectory() as d:
            data = agent_config_file(sk, Path(d) / "agent.yaml")
        cfg = config.build(data, env={})
        metrics = AgentMetrics()
        sink = NullSink()
        agent = Agent(cfg, sink, metrics, make_refresher(cfg, metrics))
        t0 = time.perf_counter()
        agent.scan()
        res["agent_first_scan_s"] = time.perf_counter() - t0
        res["agent_first_scan_events"] = sink.n
        sink.n = 0
        res["agent_scan_filter_s"] = medians({"scan": agent.scan}, repeat)["scan"]
        res["agent_scan_events_per_scan"] = sink.n / repeat
        res["agent_sockets_seen"] = agent.last_socket_count
        for k in list(res):
            if k.endswith("_s") and isinstance(res[k], float):
                res[k] = round(res[k], 4)
        res["ratio_dump_vs_ss"] = round(res["agent_dump_s"] / res["ss_tani_s"], 3)
        res["ratio_dump_filter_vs_ss"] = round(res["agent_dump_filter_s"] / res["ss_tani_s"], 3)
        res["ratio_dump_filter_vs_ss_filter"] = round(
            res["agent_dump_filter_s"] / res["ss_tani_filter_s"], 3
        )
        res["ratio_scan_filter_vs_ss"] = round(res["agent_scan_filter_s"] / res["ss_tani_s"], 3)
        return res
    finally:
        sk.close()


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) clock ticks of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def bench_cpu(n: int, seconds: float) -> dict:
    sk = Sockets(n, 1.0)  # every connection is a Kafka connection
    host_sockets = len(netlink.dump())  # the kernel walks all of them on every dump
    try:
        with tempfile.TemporaryDirectory() as d:
            cfg = Path(d) / "agent.yaml"
            agent_config_file(sk, cfg)
            proc = subprocess.Popen(
                [
                    str(REPO / ".venv" / "bin" / "connmon"),
                    "--log-level",
                    "WARNING",
                    "agent",
                    "--config",
                    str(cfg),
                    "--output",
                    os.devnull,
                    "--interval",
                    "5",
                    "--summary-interval",
                    "15",
                ]
            )
            try:
                time.sleep(8)  # start-up and the first (initial) scan
                hz = os.sysconf("SC_CLK_TCK")
                c0, w0 = cpu_ticks(proc.pid), time.monotonic()
                time.sleep(seconds)
                c1, w1 = cpu_ticks(proc.pid), time.monotonic()
            finally:
                proc.terminate()
                proc.wait(30)
        user, system = (c1[0] - c0[0]) / hz, (c1[1] - c0[1]) / hz
        return {
            "kafka_sockets": 2 * n,
            "host_sockets": host_sockets,
            "interval_s": 5,
            "measured_s": round(w1 - w0, 1),
            "cpu_user_s": user,
            "cpu_system_s": system,
            "cpu_share_of_one_core": round((user + system) / (w1 - w0), 5),
        }
    finally:
        sk.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sockets", type=int, nargs="*", default=[20000, 100000])
    ap.add_argument("--kafka-fraction", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--cpu-sockets", type=int, default=5000, help="connections (x2 sockets)")
    ap.add_argument("--cpu-seconds", type=float, default=60.0, help="0 skips the CPU run")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    out: dict = {
        "machine": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "scan": [],
    }
    for n in args.sockets:
        r = bench_one(n, args.repeat, args.kafka_fraction)
        print(json.dumps(r), flush=True)
        out["scan"].append(r)
    if args.cpu_seconds > 0:
        out["cpu"] = bench_cpu(args.cpu_sockets, args.cpu_seconds)
        print(json.dumps(out["cpu"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
