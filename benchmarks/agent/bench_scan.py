"""Benchmark: the agent's socket scan against ``ss -tani`` on the same sockets, in one run.

Opens N loopback connections (both ends held by worker processes, so 2N sockets), spread over
127.0.1.1..127.0.1.K so ephemeral ports do not run out; a fraction of them go to a "Kafka"
port, the rest to another port. Then times, median of ``--repeat`` runs each:

- ``ss -tani`` (output to /dev/null) and ``ss -tani '( sport = :P or dport = :P )'``;
- the agent's netlink dump + parse, without and with the in-kernel port filter;
- the agent's whole steady-state scan (dump, classify, attribute, lifecycle) with the filter;
- the /proc/net/tcp fallback, for reference.

``--cpu-seconds S`` also runs the agent (``python -m streaming agent``, the repository's code,
default settings: every network namespace) as a child process at a 5 s interval against
``--cpu-sockets`` connections whose both ends are Kafka sockets, for S seconds, and reports its
CPU share of one core, user and system (from /proc/<pid>/stat, excluding start-up and the first
scan), ``--cpu-runs`` times. After each run, the same way and on the same sockets:
``--cpu-baseline DIR`` runs the agent of another checkout (the code before a change), and
``--cpu-floor`` a process that only sends the agent's dump request every 5 s and reads the
replies without parsing them: the kernel's share, which no change to the agent can remove.

Run as root (or raise ``ulimit -n`` first): ``.venv/bin/python benchmarks/agent/bench_scan.py
--sockets 20000 100000 --cpu-sockets 5000 --cpu-seconds 120 --cpu-runs 2 --cpu-floor``.
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
import struct
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
            "load_before": loadavg(),
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
        res["load_after"] = loadavg()
        return res
    finally:
        sk.close()


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) clock ticks of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


_DONE = struct.pack("=IHH", 20, netlink.NLMSG_DONE, 2)  # NLMSG_DONE with NLM_F_MULTI


def read_dump(sock: socket.socket, request: bytes, buf: bytearray) -> int:
    """Send one dump request and read the replies to the end without parsing them (only the
    last 20 bytes of each read are looked at: NLMSG_DONE ends the last one). Returns the reads."""
    sock.sendall(request)
    reads = 0
    while True:
        n = sock.recv_into(buf)
        reads += 1
        if n >= 20 and buf[n - 20 : n - 12] == _DONE:
            return reads
        if n >= 20 and struct.unpack_from("=H", buf, 4)[0] == netlink.NLMSG_ERROR:
            raise OSError("sock_diag dump failed")


def dump_loop(ports: list[int], interval: float) -> None:
    """The floor: what the agent cannot avoid, one filtered dump read to the end every
    ``interval`` seconds, nothing parsed. Runs until killed."""
    req = netlink.build_request_all(ports)
    buf = bytearray(1 << 16)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, netlink.NETLINK_SOCK_DIAG) as s:
        next_at = time.monotonic()
        while True:
            read_dump(s, req, buf)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))


def measure_child(cmd: list[str], seconds: float, cwd: Path = REPO, settle: float = 8.0) -> dict:
    """CPU of a child process over ``seconds``, after ``settle`` seconds of start-up (and, for
    the agent, its first scan)."""
    proc = subprocess.Popen(cmd, cwd=cwd)
    try:
        time.sleep(settle)
        hz = os.sysconf("SC_CLK_TCK")
        load0 = loadavg()
        c0, w0 = cpu_ticks(proc.pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = cpu_ticks(proc.pid), time.monotonic()
        load1 = loadavg()
    finally:
        proc.terminate()
        proc.wait(30)
    user, system = (c1[0] - c0[0]) / hz, (c1[1] - c0[1]) / hz
    return {
        "measured_s": round(w1 - w0, 1),
        "cpu_user_s": user,
        "cpu_system_s": system,
        "cpu_share_of_one_core": round((user + system) / (w1 - w0), 5),
        "load_before": load0,
        "load_after": load1,
    }


def bench_cpu(
    n: int, seconds: float, runs: int = 1, floor: bool = False, baseline: Path | None = None
) -> dict:
    """The agent (default config: every network namespace) at a 5 s interval against ``n``
    connections whose both ends are Kafka sockets, ``runs`` times. After each run, with
    ``baseline`` the agent of that other checkout on the same sockets, with ``floor`` the dump
    alone: runs of each kind alternate, so they share the machine's load."""
    sk = Sockets(n, 1.0)  # every connection is a Kafka connection
    host_sockets = len(netlink.dump())  # the kernel walks all of them on every dump
    out: dict = {
        "kafka_sockets": 2 * n,
        "host_sockets": host_sockets,
        "interval_s": 5,
        "agent": [],
        "baseline": [],
        "floor": [],
    }
    try:
        with tempfile.TemporaryDirectory() as d:
            cfg = Path(d) / "agent.yaml"
            agent_config_file(sk, cfg)
            agent_cmd = [
                sys.executable, "-m", "streaming", "--log-level", "WARNING", "agent",
                "--config", str(cfg), "--output", os.devnull,
                "--interval", "5", "--summary-interval", "15",
            ]  # fmt: skip
            floor_cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--dump-loop",
                str(sk.kafka_port),
            ]
            children: list[tuple[str, list[str], Path, float]] = [("agent", agent_cmd, REPO, 8.0)]
            if baseline is not None:
                children.append(("baseline", agent_cmd, baseline, 8.0))
            if floor:
                children.append(("floor", floor_cmd, REPO, 2.0))
            for _ in range(runs):
                for kind, cmd, cwd, settle in children:
                    r = measure_child(cmd, seconds, cwd, settle)
                    print(json.dumps({kind: r}), flush=True)
                    out[kind].append(r)
        return out
    finally:
        sk.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sockets", type=int, nargs="*", default=[20000, 100000])
    ap.add_argument("--kafka-fraction", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--cpu-sockets", type=int, default=5000, help="connections (x2 sockets)")
    ap.add_argument("--cpu-seconds", type=float, default=60.0, help="0 skips the CPU run")
    ap.add_argument("--cpu-runs", type=int, default=1, help="CPU runs, one after the other")
    ap.add_argument(
        "--cpu-floor",
        action="store_true",
        help="after each agent run, measure a process that only dumps (the kernel's share)",
    )
    ap.add_argument(
        "--cpu-baseline",
        type=Path,
        metavar="DIR",
        help="another checkout of the repository: after each run, its agent on the same sockets",
    )
    ap.add_argument("--dump-loop", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.dump_loop:
        dump_loop([args.dump_loop], 5.0)
        return 0
    out: dict = {
        "machine": {
            "date": time.strftime("%Y-%m-%d"),
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
        out["cpu"] = bench_cpu(
            args.cpu_sockets, args.cpu_seconds, args.cpu_runs, args.cpu_floor, args.cpu_baseline
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
