"""A real process leaking CLOSE_WAIT sockets toward a real broker until it runs out of file
descriptors, watched by the real agent, and the job's prediction of when that happens.

Shared by the accuracy test and ``benchmarks/agent/bench_fd_prediction.py``."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_helpers import agent_config, agent_writing, events_in

APP = "fd-leaker"
# Broker setting that reaps the leaker's idle connections: the client never closes its end,
# so each one stays in CLOSE_WAIT and holds its descriptor.
BROKER_OVERRIDES = {"connections.max.idle.ms": "2000"}

# Lowers its soft open-files limit, then opens one connection to the broker every 1/rate s and
# never reads or closes any; prints the time socket() first fails with EMFILE.
_LEAKER = """
import errno, resource, socket, sys, time
host, port, rate, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
start = time.time()
while True:
    try:
        held.append(socket.create_connection((host, port)))
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        print("emfile", time.time(), flush=True)
        time.sleep(3600)
    start += 1.0 / rate
    time.sleep(max(start - time.time(), 0.0))
"""


@dataclass
class Run:
    events: list[dict[str, Any]]
    emfile_at: float  # when the leaker's socket() first failed, epoch seconds
    limit: int


def leak_until_emfile(
    cluster: Any, tmp: Path, rate_per_s: float, limit: int, after_s: float = 6.0
) -> Run:
    """Run the agent and the leaker until the leaker hits EMFILE (plus ``after_s`` so the
    agent reports it); the agent's events and the moment of EMFILE."""
    out = tmp / "events.jsonl"
    cfg = agent_config(
        tmp / "agent.yaml", "fd-host", cluster,
        [{"match": r"--app (\S+)", "name": r"\1", "on": "cmdline"}],
    )  # fmt: skip
    agent = agent_writing(cfg, out)
    leaker = None
    try:
        time.sleep(3)  # the agent's first scan and metadata
        host, port = cluster.nodes[0].endpoint.rsplit(":", 1)
        leaker = subprocess.Popen(
            [sys.executable, "-c", _LEAKER, host, port, str(rate_per_s), str(limit),
             "--app", APP],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert leaker.stdout is not None
        line = leaker.stdout.readline()  # blocks until EMFILE (or the leaker dies)
        if not line.startswith("emfile"):
            raise AssertionError(f"the leaker ended before EMFILE: {leaker.stderr.read()}")
        emfile_at = float(line.split()[1])
        time.sleep(after_s)
    finally:
        if leaker is not None:
            leaker.kill()
            leaker.wait()
        agent.terminate()
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    if agent.returncode not in (0, -15):
        raise AssertionError(f"agent exited {agent.returncode}: {agent.stdout.read()}")
    return Run(events_in(out), emfile_at, limit)


@dataclass
class Prediction:
    made_at: float  # event time of the window's latest summary (epoch seconds)
    fds_open: int
    left_s: float  # the detector's time to exhaustion then
    actual_left_s: float  # from then to the real EMFILE

    @property
    def error(self) -> float:
        """Relative error of the predicted time left."""
        return abs(self.left_s - self.actual_left_s) / self.actual_left_s


def prediction_at_half(aggregates: list[dict[str, Any]], run: Run, cfg: Any) -> Prediction:
    """The close_wait_buildup detector's time to exhaustion in the first window of the leaker
    whose descriptors passed half the headroom it started with, given the windows before it
    as history (as the job's tracker gives them)."""
    from streaming.detectors import close_wait_buildup
    from streaming.schema.aggregates import Aggregate
    from streaming.schema.times import epoch

    mine = [
        Aggregate.from_dict(a)
        for a in sorted(aggregates, key=lambda a: a["window_end"])
        if a["app"] == APP and a["side"] == "client" and a.get("fds_open") is not None
    ]
    assert mine, f"no window of {APP} carries fds_open"
    base = mine[0].fds_open
    assert base is not None
    half = base + (run.limit - base) / 2
    for i, agg in enumerate(mine):
        if agg.fds_open is not None and agg.fds_open >= half:
            (finding,) = close_wait_buildup.detect(agg, cfg, mine[:i])
            left = finding.evidence["fd_exhaustion_in_s"]
            assert left is not None, finding
            made_at = epoch(agg.window_start) + agg.covered_s()
            return Prediction(made_at, agg.fds_open, left, run.emfile_at - made_at)
    raise AssertionError(f"no window passed half the headroom: {[a.fds_open for a in mine]}")
