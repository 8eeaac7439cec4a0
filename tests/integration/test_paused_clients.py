"""A paused client is told apart from a leaking one: the real agent reads a process stopped by
SIGSTOP, one held by a tracer (ptrace) and one whose cgroup is frozen, against a real broker
that reaps their idle connections; a Spark replay of its events says the process was paused,
and calls the re-opens after SIGCONT recovery, not a storm."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_helpers import agent_config, agent_writing, events_in
from job_helpers import wait_for

from streaming.detectors.config import DetectorConfig
from streaming.job.pipeline import replay
from streaming.schema.times import epoch

REPO = Path(__file__).parents[2]
CLIENT = REPO / "tests" / "fixtures" / "agent" / "busy_producers.py"
FREEZER = Path("/sys/fs/cgroup/freezer")
PRODUCERS = 8
WINDOW_S = 10.0


def _wait(what: str, cond: Callable[[], object], out: Path) -> object:
    """``wait_for`` with the agent's last events in its message."""
    return wait_for(what, cond, 90.0, detail=lambda: events_in(out)[-5:], poll_s=0.5)


@contextlib.contextmanager
def _setup(cluster, tmp_path: Path, apps: list[str]) -> Iterator[tuple[Path, dict]]:
    """One busy-producers client per app name and the real agent writing to a file."""
    cfg = agent_config(
        tmp_path / "agent.yaml",
        "pause-host",
        cluster,
        [{"match": rf"busy_producers\.py \S+ \S+ \d+ ({a})", "name": a} for a in apps],
    )
    out = tmp_path / "events.jsonl"
    topic = f"pause-{uuid.uuid4().hex[:8]}"
    clients = {
        a: subprocess.Popen(
            [sys.executable, str(CLIENT), cluster.bootstrap_servers, topic, str(PRODUCERS), a],
            stdout=subprocess.PIPE,
            text=True,
        )
        for a in apps
    }
    agent = agent_writing(cfg, out)
    try:
        for c in clients.values():
            assert c.stdout.readline().strip() == "ready"
        yield out, clients
    finally:
        for c in clients.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(c.pid, signal.SIGCONT)
            c.kill()
            c.wait()
        agent.send_signal(signal.SIGTERM)
        log, _ = agent.communicate(timeout=60)
        assert agent.returncode == 0, log[-3000:]


def _paused_cw(out: Path, app: str, how: str) -> Callable[[], dict | None]:
    """A CLOSE_WAIT summary of ``app`` whose processes the agent saw paused ``how``."""

    def find() -> dict | None:
        for e in events_in(out):
            if (
                e.get("app") == app
                and e["kind"] == "summary"
                and e["state"] == "CLOSE_WAIT"
                and e["count"] >= 1
                and e.get("paused_how") == how
                and e["oldest_state_age_s"] >= 4.0
            ):
                return e
        return None

    return find


def test_a_stopped_client_is_said_stopped_and_its_resume_is_recovery(
    kafka_cluster_factory, spark, tmp_path
):
    cluster = kafka_cluster_factory(brokers=1, overrides={"connections.max.idle.ms": "3000"})
    with _setup(cluster, tmp_path, ["stopped-app"]) as (out, clients):
        client = clients["stopped-app"]
        os.kill(client.pid, signal.SIGSTOP)
        cw = _wait("a paused CLOSE_WAIT summary", _paused_cw(out, "stopped-app", "stopped"), out)
        assert cw["paused_processes"] == 1
        # Stopped past the end of a window of the replay below, so a window ends with it.
        _wait(
            "the pause to outlast a window",
            lambda: any(
                e.get("app") == "stopped-app"
                and e["kind"] == "summary"
                and e.get("paused_how") == "stopped"
                and epoch(e["event_time"]) >= epoch(cw["event_time"]) + WINDOW_S
                for e in events_in(out)
            ),
            out,
        )
        resumed_at = time.time()
        os.kill(client.pid, signal.SIGCONT)

        def reopened() -> bool:
            return (
                sum(
                    1
                    for e in events_in(out)
                    if e.get("app") == "stopped-app"
                    and e["kind"] == "opened"
                    and e.get("open_reason") == "new"
                    and e["event_time"]
                    >= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(resumed_at))
                )
                >= PRODUCERS
            )

        _wait("the producers' re-opens after SIGCONT", reopened, out)
        # A running summary after the resume: the pause is over.
        _wait(
            "a summary without the pause",
            lambda: any(
                e.get("app") == "stopped-app"
                and e["kind"] == "summary"
                and e["state"] == "ESTABLISHED"
                and e["event_time"] > cw["event_time"]
                and "paused_how" not in e
                for e in events_in(out)
            ),
            out,
        )

    # Timings of the test, not of the product: short windows, so eight producers' re-opens
    # within seconds are a burst at the default storm threshold (30/min).
    cfg = DetectorConfig().replace(close_wait_grace_s=3.0, window_s=WINDOW_S)
    result = replay(spark, str(out), cfg)
    mine = [f for f in result.findings if f["app"] == "stopped-app"]
    cws = [f for f in mine if f["kind"] == "close_wait_buildup"]
    assert cws, [(f["kind"], f["status"], f["summary"]) for f in mine]
    assert cws[0]["recommendation"].startswith("The client process was paused")
    assert "stopped by a signal" in cws[0]["recommendation"]
    assert "librdkafka" not in cws[0]["recommendation"]
    storms = [f for f in mine if f["kind"] == "connection_storm" and f["status"] == "firing"]
    assert storms, [(f["kind"], f["status"], f["summary"]) for f in mine]
    for f in storms:
        assert f["severity"] == "info", f
        assert (
            "resumed from a pause" in f["summary"] and "new client per request" not in f["summary"]
        )


PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def test_traced_and_frozen_clients_are_told_apart(kafka_cluster_factory, tmp_path):
    if not os.access(FREEZER, os.W_OK):
        pytest.skip(f"no writable cgroup v1 freezer at {FREEZER} to freeze a client with")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    cluster = kafka_cluster_factory(brokers=1, overrides={"connections.max.idle.ms": "3000"})
    group = FREEZER / f"connmon-test-{uuid.uuid4().hex[:8]}"
    with _setup(cluster, tmp_path, ["traced-app", "frozen-app"]) as (out, clients):
        traced, frozen = clients["traced-app"].pid, clients["frozen-app"].pid
        for app in ("traced-app", "frozen-app"):  # running: no pause
            _wait(
                f"a summary of {app} running",
                lambda app=app: any(
                    e.get("app") == app and e["kind"] == "summary" and e["count"] >= 1
                    for e in events_in(out)
                ),
                out,
            )
        assert not any("paused_how" in e for e in events_in(out))
        # As a debugger does: every thread (librdkafka's network threads run on otherwise).
        tids = [int(t) for t in os.listdir(f"/proc/{traced}/task")]
        for tid in tids:
            if libc.ptrace(PTRACE_ATTACH, tid, None, None) != 0:
                pytest.skip(f"ptrace attach refused: errno {ctypes.get_errno()}")
        group.mkdir()
        try:
            (group / "cgroup.procs").write_text(str(frozen))
            (group / "freezer.state").write_text("FROZEN")
            _wait("a traced client", _paused_cw(out, "traced-app", "traced"), out)
            _wait("a frozen client", _paused_cw(out, "frozen-app", "frozen"), out)
        finally:
            for tid in tids:
                libc.ptrace(PTRACE_DETACH, tid, None, None)
            (group / "freezer.state").write_text("THAWED")
            clients["frozen-app"].kill()
            clients["frozen-app"].wait()
            with contextlib.suppress(OSError):
                group.rmdir()
