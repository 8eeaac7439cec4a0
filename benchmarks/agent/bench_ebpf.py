"""Agent CPU and exactness at a high rate of short connections: eBPF collector vs scans alone.

A client process (comm ``bench-client``) opens and closes loopback connections to a listener
at a fixed rate; the agent runs from this checkout with its output in a file, once with
``--ebpf on`` and once with ``--ebpf off`` (sock_diag scans only), at 1 s scans. Per run:

- agent CPU: utime + stime of the agent and of its children (bpftrace, also shown apart) from
  the first connection to a few seconds after the last, as a share of one core;
- the kernel program's own run time (``kernel.bpf_stats_enabled``: the time the tracepoint
  program ran, charged to whichever process was on the CPU at each state change);
- counted: client connections the agent reported (``short_lived`` counts plus ``opened``
  events), and attributed: those carrying the client's pid; against the client's own count.

Each run first waits for the previous run's TIME_WAIT sockets to expire, so that every run
starts on the same socket table.

Run as root from the repository root: ``.venv/bin/python benchmarks/agent/bench_ebpf.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import multiprocessing as mp
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streaming.agent import ebpf, netlink
from streaming.agent.records import TIME_WAIT

REPO = Path(__file__).resolve().parents[2]
CLIENT_ADDRS = [f"127.0.2.{i}" for i in range(1, 9)]  # spread ephemeral ports over 8 sources
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def _set_comm(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME


def _listener(sock: socket.socket) -> None:
    """Accept, read the client's byte (so the close sends no reset), close."""
    _set_comm("bench-broker")
    while True:
        conn, _ = sock.accept()
        try:
            conn.recv(16)
        finally:
            conn.close()


def _client(port: int, rate: float, seconds: float, out) -> None:
    """Paced connect, one byte, close; reports (ok, failed, first, last) to ``out``."""
    _set_comm("bench-client")
    n = int(rate * seconds)
    ok = failed = 0
    t0 = time.monotonic()
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        s = socket.socket()
        try:
            s.bind((CLIENT_ADDRS[i % len(CLIENT_ADDRS)], 0))
            s.connect(("127.0.0.1", port))
            s.sendall(b"x")
            ok += 1
        except OSError:
            failed += 1
        finally:
            s.close()
    out.send((ok, failed, t0, time.monotonic()))


def ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (0 once it is gone)."""
    return sum(user_system(pid))


def user_system(pid: int) -> tuple[int, int]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0
    return int(fields[11]), int(fields[12])


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def bpf_prog_stats(pid: int) -> tuple[int, int, int]:
    """(run_time_ns, run_cnt, recursion_misses) over the BPF programs a process holds open. A
    miss is a run the kernel skipped: the program fired while a BPF program already ran there."""
    s = ebpf.prog_stats(pid) or {"run_time_ns": 0, "run_cnt": 0, "recursion_misses": 0}
    return s["run_time_ns"], s["run_cnt"], s["recursion_misses"]


def count_reported(path: Path, client_pid: int, port: int) -> dict:
    """Client-side connections to the listener the agent reported, and those with the pid."""
    counted = attributed = events = 0
    endpoint = f"127.0.0.1:{port}"
    with path.open() as f:
        for line in f:
            e = json.loads(line)
            if e.get("side") != "client" or e.get("broker_endpoint") != endpoint:
                continue
            if e["kind"] == "short_lived":
                n = e["count"]
            elif e["kind"] == "opened" and e.get("open_reason") == "new":
                n = 1
            else:
                continue
            events += 1
            counted += n
            if e.get("pid") == client_pid:
                attributed += n
    return {"counted": counted, "attributed": attributed, "events": events}


def time_wait_left(port: int) -> int:
    return len(netlink.dump([port], states=1 << TIME_WAIT))


def wait_for_time_wait(port: int, timeout_s: float = 90.0) -> None:
    """Let a previous run's TIME_WAIT sockets expire: each run starts on the same table."""
    deadline = time.monotonic() + timeout_s
    while time_wait_left(port) and time.monotonic() < deadline:
        time.sleep(2.0)


def run_once(
    mode: str,
    rate: float,
    seconds: float,
    interval: float,
    port: int,
    keep: Path | None = None,
    profile: Path | None = None,
) -> dict:
    hz = os.sysconf("SC_CLK_TCK")
    wait_for_time_wait(port)
    with tempfile.TemporaryDirectory() as d:
        cfg, out = Path(d) / "agent.yaml", Path(d) / "events.jsonl"
        cfg.write_text(
            json.dumps(
                {
                    "host": "bench",
                    "clusters": [
                        {
                            "name": "bench",
                            "endpoints": [f"127.0.0.1:{port}"],
                            "listener_ports": [port],
                        }
                    ],
                    "metrics_address": "",
                }
            )
        )
        prof = ["-m", "cProfile", "-o", str(profile)] if profile and mode != "floor" else []
        cmd = [
            sys.executable, *prof, "-m", "streaming", "--log-level", "WARNING", "agent",
            "--config", str(cfg), "--output", str(out), "--interval", str(interval),
            "--ebpf", mode,
        ]  # fmt: skip
        if mode == "floor":  # one filtered dump read to the end per interval, nothing parsed
            cmd = [sys.executable, __file__, "--dump-loop", str(port), "--interval", str(interval)]
        agent = subprocess.Popen(cmd, cwd=REPO)
        try:
            time.sleep(8.0)  # start-up, first scan, bpftrace attached
            if agent.poll() is not None:
                raise RuntimeError(f"the agent exited ({agent.returncode}) in mode {mode}")
            kids = children(agent.pid)
            stats0 = {k: bpf_prog_stats(k) for k in kids}
            recv, send = mp.Pipe(duplex=False)
            client = mp.Process(target=_client, args=(port, rate, seconds, send))
            k0 = sum(ticks(k) for k in kids)
            c0 = ticks(agent.pid) + k0
            us0 = user_system(agent.pid)
            w0 = time.monotonic()
            load0 = os.getloadavg()
            client.start()
            client_pid = client.pid
            ok, failed, first, last = recv.recv()
            client.join()
            # The counts of the last interval come out with the next print and scan.
            time.sleep(2 * interval + 1.0)
            k1 = sum(ticks(k) for k in kids)
            c1 = ticks(agent.pid) + k1
            us1 = user_system(agent.pid)
            w1 = time.monotonic()
            load1 = os.getloadavg()
            stats1 = {k: bpf_prog_stats(k) for k in kids}
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(60)
        if keep is not None and out.exists():
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"events-{mode}-{int(time.time())}.jsonl").write_bytes(out.read_bytes())
        run_ns = sum(stats1[k][0] - stats0[k][0] for k in kids)
        run_cnt = sum(stats1[k][1] - stats0[k][1] for k in kids)
        run_misses = sum(stats1[k][2] - stats0[k][2] for k in kids)
        reported = (
            count_reported(out, client_pid, port)
            if out.exists()
            else {"counted": 0, "attributed": 0, "events": 0}
        )
    cpu_s = (c1 - c0) / hz
    return {
        "mode": mode,
        "connections_true": ok,
        "connects_failed": failed,
        "achieved_rate_per_s": round(ok / (last - first), 1),
        **reported,
        "counted_share": round(reported["counted"] / ok, 5) if ok else None,
        "attributed_share": round(reported["attributed"] / ok, 5) if ok else None,
        "agent_cpu_s": cpu_s,
        "measured_s": round(w1 - w0, 1),
        "agent_share_of_one_core": round(cpu_s / (w1 - w0), 5),
        "bpftrace_cpu_s": (k1 - k0) / hz,
        "agent_user_s": (us1[0] - us0[0]) / hz,
        "agent_system_s": (us1[1] - us0[1]) / hz,
        "bpf_run_time_s": round(run_ns / 1e9, 4),
        "bpf_runs": run_cnt,
        "bpf_recursion_misses": run_misses,
        "bpf_ns_per_run": round(run_ns / run_cnt) if run_cnt else None,
        "bpf_share_of_one_core": round(run_ns / 1e9 / (w1 - w0), 5),
        "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in load1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="connections per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0, help="the agent's scan interval")
    ap.add_argument("--runs", type=int, default=1, help="interleaved pairs of runs")
    ap.add_argument(
        "--modes", default="on,off", help="--ebpf values to run, in order; floor: the dump alone"
    )
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--keep-events", type=Path, metavar="DIR", help="keep each run's events here")
    ap.add_argument("--profile", type=Path, metavar="FILE", help="run the agent under cProfile")
    ap.add_argument("--dump-loop", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dump_loop:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_scan import dump_loop

        dump_loop([args.dump_loop], args.interval)
        return 0
    if os.geteuid() != 0:
        print("bench_ebpf: run as root (the eBPF collector needs it)", file=sys.stderr)
        return 2
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4096)
    port = lsock.getsockname()[1]
    listener = mp.Process(target=_listener, args=(lsock,), daemon=True)
    listener.start()
    stats_before = BPF_STATS.read_text().strip() if BPF_STATS.exists() else None
    if stats_before is not None:
        BPF_STATS.write_text("1")
    results: list[dict] = []
    try:
        for _ in range(args.runs):
            for mode in args.modes.split(","):
                r = run_once(
                    mode, args.rate, args.seconds, args.interval, port, args.keep_events,
                    args.profile,
                )  # fmt: skip
                print(json.dumps(r), flush=True)
                results.append(r)
    finally:
        if stats_before is not None:
            BPF_STATS.write_text(stats_before)
        listener.kill()
    doc = {
        "machine": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "rate_per_s": args.rate,
        "seconds": args.seconds,
        "interval_s": args.interval,
        "runs": results,
    }
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
