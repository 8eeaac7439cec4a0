"""The real agent under reduced capability sets, as uid 0 (``setpriv --bounding-set``): with
CAP_SYS_ADMIN, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH every feature works; without each one the
feature it enables is reported missing (metric, log line) and the agent goes on.

The workload: a process of another uid (1234) in a network namespace of its own, holding a
client socket in CLOSE_WAIT to a "broker" port in that namespace. Skipped, with the reason,
where the test cannot be root, lacks ``setpriv``/``ip`` or may not create a namespace."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from agent_helpers import REPO, Holder, close_wait_in_netns, events_in
from prometheus_client.parser import text_string_to_metric_families

from streaming.agent import ebpf
from streaming.agent.netns import NamespaceTable
from streaming.agent.procs import ProcessTable
from streaming.stack.ports import free_port

pytestmark = pytest.mark.integration

FULL = ("sys_admin", "sys_ptrace", "dac_read_search")
OTHER_UID = 1234


Workload = Holder


@dataclass
class Run:
    events: list[dict]
    metrics: dict[tuple[str, frozenset], float]
    log: str
    returncode: int

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.get((name, frozenset(labels.items())))

    def holder_sockets(self, w: Workload) -> list[dict]:
        """The events of the workload's CLOSE_WAIT client socket."""
        return [
            e
            for e in self.events
            if e.get("kind") in ("opened", "transition")
            and e.get("side") == "client"
            and e.get("broker_endpoint") == f"127.0.0.1:{w.port}"
            and e.get("state") == "CLOSE_WAIT"
        ]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def workload() -> Iterator[Workload]:
    why = "the agent runs as uid 0 with reduced capabilities"
    with close_wait_in_netns(OTHER_UID, "connmon-priv-holder", why) as holder:
        yield holder


def _metrics(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def run_agent(
    tmp_path: Path,
    w: Workload,
    caps: tuple[str, ...],
    ebpf_mode: str,
    done: Callable[[Run], bool],
    timeout_s: float = 90.0,
) -> Run:
    """The agent as uid 0 holding only ``caps``, until ``done`` says so (at least two scans
    first), then SIGTERM."""
    tag = "-".join(caps)
    cfg, out, log = (tmp_path / f"{tag}.{x}" for x in ("yaml", "events.jsonl", "log"))
    metrics_port = free_port()
    cfg.write_text(
        yaml.safe_dump(
            {
                "host": "privtest",
                "scan_interval_s": 0.5,
                "summary_interval_s": 1,
                "metrics_address": f"127.0.0.1:{metrics_port}",
                "ebpf": ebpf_mode,
                "network_namespaces": "all",
                "kubernetes": {"api": "off"},
                "clusters": [{"name": "local", "endpoints": [f"1@127.0.0.1:{w.port}"]}],
                "apps": [{"match": "connmon-priv-holder", "name": "holder"}],
            }
        )
    )
    bounding = ",".join(["-all", *(f"+{c}" for c in caps)])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CONNMON_AGENT_") and k != "BPFTRACE_BTF"
    }
    with log.open("w") as log_f:
        agent = subprocess.Popen(
            ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", f"--bounding-set={bounding}",
             "--", str(REPO / ".venv" / "bin" / "python"), "-m", "streaming", "agent",
             "--config", str(cfg), "--output", str(out)],
            stdout=log_f, stderr=subprocess.STDOUT, cwd=REPO, env=env,
        )  # fmt: skip
    run = Run([], {}, "", -1)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.3)
            try:
                run.metrics = _metrics(metrics_port)
            except OSError:
                continue  # not serving yet
            run.events, run.log = events_in(out), log.read_text()
            scans = run.sample("connmon_agent_scan_duration_seconds_count") or 0
            if scans >= 2 and done(run):
                break
    finally:
        agent.send_signal(signal.SIGTERM)
        run.returncode = agent.wait(30)
    run.events, run.log = events_in(out), log.read_text()
    assert run.returncode == 0, run.log
    assert "Traceback" not in run.log, run.log
    return run


def _ebpf_running(run: Run) -> bool:
    return run.sample("connmon_agent_collector_info", collector="ebpf") == 1


def _ebpf_settled(run: Run) -> bool:
    return _ebpf_running(run) or "eBPF collector not running" in run.log


def test_the_three_capabilities_keep_every_feature(tmp_path: Path, workload: Workload) -> None:
    why_not = ebpf.check().why_not
    run = run_agent(
        tmp_path, workload, FULL, "auto" if why_not is None else "off",
        lambda r: bool(r.holder_sockets(workload)) and (why_not is not None or _ebpf_settled(r)),
    )  # fmt: skip
    (sock, *_) = run.holder_sockets(workload) or [None]
    assert sock is not None, run.events
    # Dumped with sock_diag inside the namespace (tcp_info) and attributed to its process.
    assert sock.get("rtt_s") is not None and sock.get("idle_s") is not None, sock
    assert (sock.get("pid"), sock["app"]) == (workload.pid, "holder"), sock
    assert not run.sample("connmon_agent_namespace_errors_total", reason="enter")
    assert run.sample("connmon_agent_network_namespaces") >= 2
    if why_not is not None:
        pytest.skip(f"sockets checked; eBPF not usable on this host: {why_not}")
    assert "eBPF collector attached" in run.log, run.log
    assert _ebpf_running(run)
    assert not [k for k in run.metrics if k[0] == "connmon_agent_ebpf_disabled_info"]


def test_without_sys_admin_namespaces_fall_back_and_ebpf_is_refused(
    tmp_path: Path, workload: Workload
) -> None:
    run = run_agent(
        tmp_path, workload, ("sys_ptrace", "dac_read_search"), "auto",
        lambda r: bool(r.holder_sockets(workload)),
    )  # fmt: skip
    assert run.sample("connmon_agent_namespace_errors_total", reason="enter") >= 1
    assert "cannot enter network namespace" in run.log, run.log
    (sock, *_) = run.holder_sockets(workload)
    # Read from /proc/<pid>/net/tcp: no tcp_info, still attributed.
    assert sock.get("rtt_s") is None and sock.get("idle_s") is None, sock
    assert sock.get("pid") == workload.pid, sock
    reason = "no_bpftrace" if shutil.which("bpftrace") is None else "no_capability"
    assert run.sample("connmon_agent_collector_info", collector="ebpf") == 0
    assert run.sample("connmon_agent_ebpf_disabled_info", reason=reason) == 1, run.metrics
    assert "eBPF collector not used: " in run.log, run.log


def test_bpf_and_perfmon_load_ebpf_without_sys_admin(tmp_path: Path, workload: Workload) -> None:
    why_not = ebpf.check().why_not
    if why_not is not None:
        pytest.skip(f"eBPF not usable on this host: {why_not}")
    run = run_agent(
        tmp_path, workload, ("sys_ptrace", "dac_read_search", "bpf", "perfmon"), "auto",
        _ebpf_settled,
    )  # fmt: skip
    assert f"BPFTRACE_BTF={ebpf.BTF}" in run.log, run.log
    assert "eBPF collector attached" in run.log, run.log
    assert _ebpf_running(run)


def test_without_sys_ptrace_other_namespaces_are_unreadable(
    tmp_path: Path, workload: Workload
) -> None:
    # Processes whose namespace even full root cannot read (a sandbox's own init, say).
    table = NamespaceTable()
    table.refresh()
    run = run_agent(tmp_path, workload, ("sys_admin", "dac_read_search"), "off", lambda r: True)
    assert run.sample("connmon_agent_unreadable_processes") > table.unreadable, run.metrics
    assert not run.holder_sockets(workload), run.events
    warnings = [
        line for line in run.log.splitlines() if "cannot read the network namespace" in line
    ]
    assert len(warnings) == 1, run.log
    assert "WARNING" in warnings[0] and "lacks CAP_SYS_PTRACE" in warnings[0], warnings
    assert run.sample("connmon_agent_collector_info", collector="ebpf") == 0
    assert run.sample("connmon_agent_ebpf_disabled_info", reason="off") == 1


def test_without_dac_read_search_sockets_lose_their_process(
    tmp_path: Path, workload: Workload
) -> None:
    # Processes whose fd table even full root cannot read (a sandbox's own init, say).
    table = ProcessTable(caps=0)
    table.lookup({1})
    run = run_agent(
        tmp_path, workload, ("sys_admin", "sys_ptrace"), "off",
        lambda r: bool(r.holder_sockets(workload)),
    )  # fmt: skip
    (sock, *_) = run.holder_sockets(workload)
    assert sock.get("rtt_s") is not None, sock  # the namespace is still entered
    assert (sock.get("pid"), sock["app"]) == (None, "unknown"), sock
    fd_tables = run.sample("connmon_agent_unreadable_fd_tables")
    assert fd_tables > table.unreadable_fd_tables, run.metrics
    warnings = [line for line in run.log.splitlines() if "cannot read /proc/<pid>/fd" in line]
    assert len(warnings) == 1, run.log
    assert "WARNING" in warnings[0] and "lacks CAP_DAC_READ_SEARCH" in warnings[0], warnings
