"""SIGTERM/SIGINT to a component's whole process group, as systemd (``KillMode=control-group``)
and a terminal's Ctrl-C send them: each component stops cleanly (exit 0, one log line, no
traceback, nothing of it left running) and the job's restart resumes from its saved state.
SIGKILL of the job's driver alone leaves no Spark JVM behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_exporter import Exporter
from test_job_kafka import (
    CONNMON,
    Proc,
    Topics,
    _descendants,
    _start_cli,
    _stat,
    _table,
    consume_all,
    latest_by_key,
    lines,
    produce,
    recording,
    wait_for,
)

from streaming.stack.kafka import create_topics
from streaming.stack.ports import free_port

CLOSE_WAIT = "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"
STOP_WAIT_S = 300  # only so that a hung stop fails the test instead of hanging it


# ---- processes ----------------------------------------------------------------------------
def _running(procs: set[Proc]) -> set[Proc]:
    """Those still running (a zombie waiting for its parent has ended)."""
    return {
        (pid, start)
        for pid, start in procs
        if (st := _stat(pid)) is not None and st[3] == start and st[0] != "Z"
    }


def _group(pgid: int) -> set[int]:
    """Running processes of a process group."""
    return {pid for pid, (state, _, group, _) in _table().items() if group == pgid and state != "Z"}


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def _kill_leftovers(procs: set[Proc]) -> None:
    for pid, _ in _running(procs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# What PySpark's worker daemon prints when the task it serves is cancelled mid-stream (a stop
# that abandons a running batch): Spark's own report of the cancel, not an error of connmon.
_CANCELLED_WORKER = ("pyspark/daemon.py", "pyspark/worker.py", "pyspark/serializers.py")


def _tracebacks(text: str) -> list[str]:
    """The tracebacks in ``text``, except a PySpark worker's EOF on a cancelled task."""
    blocks = re.findall(r"Traceback \(most recent call last\):\n(?:[ \t].*\n)*\S.*", text)
    return [
        b
        for b in blocks
        if not (
            b.rstrip().endswith("EOFError")
            and all(f.endswith(_CANCELLED_WORKER) for f in re.findall(r'File "([^"]+)"', b))
        )
    ]


def _signal_group_and_check(
    p: subprocess.Popen, log: Path, component: str, sig: int = signal.SIGTERM
) -> None:
    """``sig`` to the process group of ``p`` (its own, ``start_new_session``); then: exit 0, one
    stop line, no traceback or Py4J error, no process of the group and none started below it
    left running."""
    below = _descendants(p.pid)
    try:
        os.killpg(p.pid, sig)
        try:
            code = p.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
            raise AssertionError(f"no exit in {STOP_WAIT_S}s:\n{log.read_text()[-5000:]}") from None
        text = log.read_text(errors="replace")
        assert code == 0, text[-5000:]
        assert _tracebacks(text) == [], text[-5000:]
        assert [ln for ln in text.splitlines() if "py4j" in ln.lower()] == []
        stop_lines = [ln for ln in text.splitlines() if f"connmon {component}: stopped on" in ln]
        assert len(stop_lines) == 1, stop_lines
        assert re.search(rf"stopped on {signal.Signals(sig).name}(;|$)", stop_lines[0]), stop_lines
        with pytest.raises(ProcessLookupError):
            os.killpg(p.pid, 0)
        wait_for(
            "every process started below the component to end", lambda: not _running(below), 60
        )
    finally:
        _kill_leftovers(below)


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    """``connmon ARGV`` in a process group of its own, output to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [CONNMON, *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


@pytest.fixture
def reaped() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts: killed with their group at teardown if still running."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)


# ---- the job ---------------------------------------------------------------------------------
def _newest(folder: Path) -> int:
    """The newest batch id in a Spark commit or offset log folder; -1 when it has none."""
    return max((int(f.name) for f in folder.glob("*") if f.name.isdigit()), default=-1)


def _leak(kafka_cluster, unique_name: str, tmp_path: Path) -> tuple[Topics, list[str], Path]:
    """Topics holding a leak whose last events are 450 s old (its finding fires), and the job's
    arguments with a checkpoint folder."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    leak = recording("close_wait_leak", end=time.time() - 450)
    produce(t.bootstrap, t.events, lines(leak), key="app-7")
    ckpt = tmp_path / "ckpt"
    return t, [*t.cli_args(), "--checkpoint", str(ckpt)], ckpt


def _finding(t: Topics, status: str) -> dict | None:
    f = latest_by_key(consume_all(t.bootstrap, t.findings)).get(CLOSE_WAIT)
    return f if f is not None and f["status"] == status else None


def test_job_stops_cleanly_on_sigterm_to_its_group_and_resumes(
    kafka_cluster, unique_name, tmp_path, reaped
):
    t, args, ckpt = _leak(kafka_cluster, unique_name, tmp_path)
    log1 = tmp_path / "job-1.log"
    p = _start_cli(args, log1)
    reaped.append(p)
    wait_for(
        "the close_wait finding and a committed batch of the state query",
        lambda: _finding(t, "firing") and _newest(ckpt / "state" / "commits") >= 0,
    )
    jvms = [pid for pid, _ in _descendants(p.pid) if " org.apache.spark" in _cmdline(pid)]
    assert jvms, "Spark's JVM runs below the driver"

    _signal_group_and_check(p, log1, "job")
    state_commit = _newest(ckpt / "state" / "commits")
    assert state_commit >= 0

    # Newer events of another series: the fleet's event time moves on by more than
    # finding_stale_s, so the restarted job resolves the leak's finding. Only a job that
    # restored the leak's series from the checkpoint knows there is something to resolve.
    produce(t.bootstrap, t.events, lines(recording("idle_zombie")), key="app-6")
    log2 = tmp_path / "job-2.log"
    p = _start_cli(args, log2)
    reaped.append(p)
    resolved = wait_for(
        "the restarted job to resolve the leak's finding", lambda: _finding(t, "resolved")
    )
    # The evidence of its last firing record: published on doubling, so more than half of 7.
    assert 2 * resolved["evidence"]["close_wait_count"] > 7, resolved
    assert resolved["change"] == "resolved" and resolved["last_seen_at"], resolved
    assert f"series state resumes after batch {state_commit} " in log2.read_text()
    _signal_group_and_check(p, log2, "job", signal.SIGINT)


def test_job_abandons_a_running_batch_cleanly_and_runs_it_again_on_restart(
    kafka_cluster, unique_name, tmp_path, reaped
):
    t, args, ckpt = _leak(kafka_cluster, unique_name, tmp_path)
    log1 = tmp_path / "job-1.log"
    p = _start_cli([*args, "--stop-timeout", "0"], log1)
    reaped.append(p)
    offsets, commits = ckpt / "ingest" / "offsets", ckpt / "ingest" / "commits"
    wait_for(
        "the first batch of the events to start",
        lambda: _newest(offsets) == 0 or _newest(commits) >= 0,
    )
    assert _newest(commits) < 0, "the first batch ended before the test could stop it"
    _signal_group_and_check(p, log1, "job")
    assert "a running batch was abandoned" in log1.read_text()
    assert (_newest(offsets), _newest(commits)) == (0, -1)  # Spark runs batch 0 again

    log2 = tmp_path / "job-2.log"
    p = _start_cli(args, log2)
    reaped.append(p)
    wait_for("the finding from the batch run again", lambda: _finding(t, "firing"))
    _signal_group_and_check(p, log2, "job")


def test_sigkill_of_the_job_driver_leaves_no_spark_jvm(
    kafka_cluster, unique_name, tmp_path, reaped
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    log = tmp_path / "job.log"
    p = _start_cli([*t.cli_args(), "--checkpoint", str(tmp_path / "ckpt")], log)
    reaped.append(p)
    wait_for("the job to start its queries", lambda: "running on" in log.read_text())
    below = _descendants(p.pid)
    try:
        assert any(" org.apache.spark" in _cmdline(pid) for pid, _ in below), below
        os.kill(p.pid, signal.SIGKILL)  # the driver alone, as the OOM killer would
        p.wait(30)
        wait_for("Spark's JVM and its workers to exit", lambda: not _running(below), 60)
    finally:
        _kill_leftovers(below)


# ---- agent and exporter ----------------------------------------------------------------------
def _metric(address: str, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_agent_flushes_and_stops_cleanly_on_sigterm_to_its_group(
    kafka_cluster, unique_name, tmp_path, reaped
):
    bootstrap = kafka_cluster.bootstrap_servers
    create_topics(bootstrap, {unique_name: 1})
    cfg = tmp_path / "agent.yaml"
    # Nothing leaves the producer's buffer on its own before the stop: only the flush at
    # shutdown delivers the events.
    kafka = {"bootstrap.servers": bootstrap, "linger.ms": 600000, "message.timeout.ms": 1200000}
    cfg.write_text(
        yaml.safe_dump(
            {"host": "stop-host", "clusters": [{"name": "local", "bootstrap_servers": bootstrap}],
             "kafka": kafka}
        )
    )  # fmt: skip
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "agent.log"
    p = _spawn(
        ["agent", "--config", str(cfg), "--topic", unique_name, "--interval", "0.5",
         "--network-namespaces", "own", "--metrics-address", address],
        log,
    )  # fmt: skip
    reaped.append(p)
    queued = wait_for(
        "events waiting in the agent's producer",
        lambda: (n := _metric(address, "connmon_agent_queue_events")) and n > 0 and n,
        60,
    )
    assert consume_all(bootstrap, unique_name) == []
    _signal_group_and_check(p, log, "agent")
    events = consume_all(bootstrap, unique_name)
    assert len(events) >= queued and any(e["kind"] == "heartbeat" for _, e in events)


def test_exporter_stops_cleanly_on_sigterm_to_its_group(
    kafka_cluster, unique_name, tmp_path, reaped
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    topics = {"aggregates": t.aggregates, "findings": t.findings, "job_status": t.status}
    log = tmp_path / "exporter.log"
    exporter = Exporter(t.bootstrap, topics, log)
    reaped.append(exporter.proc)
    exporter.wait_for("connmon_exporter_series_limit")
    _signal_group_and_check(exporter.proc, log, "exporter")
