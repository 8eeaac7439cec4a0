"""Telling a paused process from /proc and the cgroup mount (fixture trees; the real kernel's
states are exercised in tests/integration/test_agent_pause.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.agent.pause import PauseProbe, freezer_files, is_frozen
from streaming.agent.procs import parse_state

STAT = "4242 ({comm}) {state} 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123 0 0"


@pytest.mark.parametrize(
    ("comm", "state"),
    [("java", "S"), ("sleep", "T"), ("gdb target", "t"), ("a) T (b", "R"), ("x", "D")],
)
def test_the_state_letter_follows_the_last_parenthesis(comm, state):
    assert parse_state(STAT.format(comm=comm, state=state)) == state


def test_an_empty_stat_has_no_state():
    assert parse_state("") is None


@pytest.mark.parametrize(
    ("cgroup", "files"),
    [
        # cgroup v2 alone, or beside v1 ("unified"): one path, two places to look
        ("0::/system.slice/app.service\n", ["system.slice/app.service/cgroup.events",
                                          "unified/system.slice/app.service/cgroup.events"]),
        # v1 freezer hierarchy
        ("6:freezer:/docker/a\n5:devices:/docker/a\n0::/\n", ["freezer/docker/a/freezer.state"]),
        ("6:cpuacct,freezer:/k/p\n", ["freezer/k/p/freezer.state"]),
        # the root cgroup cannot be frozen; a path outside the reader's cgroup namespace
        ("6:freezer:/\n0::/\n", []),
        ("0::/../../kubepods/pod1\n", []),
        ("", []),
    ],
)  # fmt: skip
def test_freezer_files_per_cgroup_version(cgroup, files):
    assert freezer_files(cgroup) == files


@pytest.mark.parametrize(
    ("name", "text", "frozen"),
    [
        ("freezer/a/freezer.state", "FROZEN\n", True),
        ("freezer/a/freezer.state", "FREEZING\n", True),
        ("freezer/a/freezer.state", "THAWED\n", False),
        ("a/cgroup.events", "populated 1\nfrozen 1\n", True),
        ("a/cgroup.events", "populated 1\nfrozen 0\n", False),
    ],
)
def test_what_a_freezer_file_says(name, text, frozen):
    assert is_frozen(name, text) is frozen


def _tree(tmp: Path, pid: int, state: str, cgroup: str, threads: str = "") -> None:
    base = tmp / "proc" / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(STAT.format(comm="app", state=state))
    (base / "cgroup").write_text(cgroup)
    for tid, thread_state in enumerate(state + threads):
        (base / "task" / str(pid * 100 + tid)).mkdir(parents=True)
        (base / "task" / str(pid * 100 + tid) / "stat").write_text(
            STAT.format(comm="app", state=thread_state)
        )


@pytest.mark.parametrize(
    ("leader", "threads", "how"),
    [
        ("T", "TT", "stopped"),
        ("t", "tt", "traced"),
        ("t", "TT", "traced"),  # a tracer holds one thread, SIGSTOP the others
        ("t", "SR", None),  # a tracer holds one thread, the network threads run
        ("T", "S", None),
    ],
)
def test_a_process_is_paused_only_when_every_thread_is(tmp_path, leader, threads, how):
    _tree(tmp_path, 7, leader, "0::/\n", threads)
    assert PauseProbe(tmp_path / "proc", tmp_path / "cgroup").how(7) == how


def test_the_probe_reads_signal_stops_tracers_and_frozen_cgroups(tmp_path):
    _tree(tmp_path, 1, "S", "0::/running\n")
    _tree(tmp_path, 2, "T", "0::/running\n")
    _tree(tmp_path, 3, "t", "0::/running\n")
    _tree(tmp_path, 4, "S", "0::/paused\n")  # cgroup v2 frozen: the task shows as sleeping
    _tree(tmp_path, 5, "D", "6:freezer:/docker/c1\n0::/\n")  # v1 frozen: disk sleep
    cg = tmp_path / "cgroup"
    for path, text in [
        ("running/cgroup.events", "populated 1\nfrozen 0\n"),
        ("unified/paused/cgroup.events", "populated 1\nfrozen 1\n"),
        ("freezer/docker/c1/freezer.state", "FROZEN\n"),
    ]:
        (cg / path).parent.mkdir(parents=True, exist_ok=True)
        (cg / path).write_text(text)
    probe = PauseProbe(tmp_path / "proc", cg)
    assert [probe.how(pid) for pid in (1, 2, 3, 4, 5, 6)] == [
        None, "stopped", "traced", "frozen", "frozen", None,
    ]  # fmt: skip
