"""The eBPF collector's pure parts and the agent's use of its counts.

``data/bpftrace-output.jsonl`` is real output of ``ebpf.program([19092], 2)`` under bpftrace
0.17, captured while one Python process (pid 23731) on 127.0.0.1 did, in this order:
3 connects to 19092 with nothing listening (refused); then, with a listener on 127.0.0.1:19092
and one on [::1]:19092 in the same process: 4 connections it closed first after 120 ms, 1 the
listener side closed first, 1 over IPv6 that the client closed first, and 1 that ``ss`` dumped
(so its cookie was set) before the client closed it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streaming.agent import config, ebpf
from streaming.agent.collector import Collector
from streaming.agent.lifecycle import Meta, SocketLifecycles
from streaming.agent.metrics import AgentMetrics
from streaming.agent.procs import ProcessTable
from streaming.agent.records import ESTABLISHED, TIME_WAIT, SocketRecord
from streaming.agent.runner import Agent, make_ebpf, make_refresher
from streaming.schema.validate import validate

pytestmark = pytest.mark.unit

CAPTURE = Path(__file__).parent / "data" / "bpftrace-output.jsonl"
PID = 23731
NS = 4026531833


def _items() -> tuple[ebpf.OutputParser, list]:
    parser = ebpf.OutputParser()
    items: list = []
    for line in CAPTURE.read_text().splitlines():
        items.extend(parser.feed(line))
    return parser, items


def test_capture_parses_into_what_the_process_did() -> None:
    parser, items = _items()
    assert parser.attached and parser.errors == 0 and parser.lost == 0
    counts = [i for i in items if isinstance(i, ebpf.ConnectionCount)]
    closed = [i for i in items if isinstance(i, ebpf.Closed)]
    assert {i.pid for i in items if isinstance(i, ebpf.Connecting)} == {PID}
    client: dict[tuple, int] = {}
    for c in counts:
        if c.dport == 19092:  # client side: the ephemeral port is not kept
            assert c.sport == 0 and c.pid == PID and c.comm == "python3" and c.netns == NS
            key = (c.src, c.closed_by, c.connect_error)
            client[key] = client.get(key, 0) + c.count
    assert client == {
        ("127.0.0.1", "unknown", "refused"): 3,
        ("127.0.0.1", "local", None): 4,
        ("127.0.0.1", "peer", None): 1,
        ("::1", "local", None): 1,
    }
    # Broker side of the same connections: one per accepted one, no process (softirq).
    server = sum(c.count for c in counts if c.sport == 19092)
    assert server == 6 + 1 and all(c.pid == 0 and c.dport == 0 for c in counts if c.sport)
    # The dumped one comes on its own, with its 4-tuple and open time.
    (one,) = closed
    assert (one.src, one.dst, one.dport, one.pid, one.closed_by) == (
        "127.0.0.1", "127.0.0.1", 19092, PID, "local",
    )  # fmt: skip
    assert one.sport > 0 and 0 < one.at_ns - one.opened_ns < 1_000_000_000


def test_lifetimes_are_seconds() -> None:
    _, items = _items()
    slow = [
        c
        for c in items
        if isinstance(c, ebpf.ConnectionCount) and c.dport and c.closed_by == "local"
        and c.src == "127.0.0.1"
    ]  # fmt: skip
    assert sum(c.count for c in slow) == 4  # over two intervals
    assert all(0.12 <= c.lifetime_max_s < 1.0 for c in slow)  # held 120 ms
    assert 4 * 0.12 <= sum(c.lifetime_sum_s for c in slow) < 4 * 1.0


def test_lifetime_classes_of_one_group_fold() -> None:
    key = "1,10.0.0.5,0,10.0.0.1,9092,4,0,{},42,java"
    (c,) = ebpf.parse_counts(
        {key.format(0): 2, key.format(3): 1},
        {key.format(0): 100_000_000, key.format(3): 3_000_000_000},
        {key.format(0): 60_000_000, key.format(3): 3_000_000_000},
    )
    assert (c.count, c.lifetime_sum_s, c.lifetime_max_s, c.comm) == (3, 3.1, 3.0, "java")


@pytest.mark.parametrize(
    ("how", "err", "by", "error"),
    [
        (4, 0, "local", None),  # FIN_WAIT1 first
        (8, 0, "peer", None),  # CLOSE_WAIT first
        (7, 104, "peer", None),  # reset received
        (7, 0, "local", None),  # reset sent (linger 0)
        (2, 111, "unknown", "refused"),
        (2, 110, "unknown", "timeout"),
        (2, 113, "unknown", "unreachable"),
        (2, 0, "unknown", "aborted"),
        (2, 5, "unknown", "error"),
        (3, 0, "unknown", None),  # a handshake the listener dropped
        (0, 0, "unknown", None),
    ],
)
def test_how_a_connection_ended(how: int, err: int, by: str, error: str | None) -> None:
    assert ebpf.closed_by(how, err) == by
    assert ebpf.connect_error(how, err) == error


def test_program_filters_on_the_ports_and_needs_one() -> None:
    text = ebpf.program([9093, 9092, 9092], 5)
    assert "args->dport == 9092 || args->dport == 9093" in text
    assert "interval:s:5" in text
    with pytest.raises(ValueError):
        ebpf.program([], 5)


def test_unexpected_lines_are_counted_not_raised() -> None:
    p = ebpf.OutputParser()
    assert p.feed("not json") == []
    assert p.feed('{"type": "printf", "data": "C 1 2"}') == []
    assert p.feed('{"type": "lost_events", "data": {"events": 7}}') == []
    assert (p.errors, p.lost) == (2, 7)


def test_no_bpftrace_no_privilege_no_btf_each_say_why(tmp_path) -> None:
    why = ebpf.check(bpftrace="/bin/true", caps=0, euid=0).why_not
    assert why is not None and "CAP_BPF" in why
    why = ebpf.check(
        bpftrace="/bin/true", caps=1 << ebpf.CAP_SYS_ADMIN, btf=str(tmp_path / "x"), euid=0
    ).why_not
    assert why is not None and "BTF" in why


ADMIN = 1 << ebpf.CAP_SYS_ADMIN
BPF_PERFMON = 1 << ebpf.CAP_BPF | 1 << ebpf.CAP_PERFMON
ALL_CAPS = (1 << 41) - 1


@pytest.mark.parametrize(
    ("euid", "caps", "env", "bpftrace", "reason", "env_set"),
    [
        (0, ADMIN, {}, "bpftrace", None, ()),
        (0, ADMIN | BPF_PERFMON, {}, "bpftrace", None, ()),
        # bpftrace 0.17 cannot find the kernel's BTF without CAP_SYS_ADMIN: the agent names it.
        (0, BPF_PERFMON, {}, "bpftrace", None, (("BPFTRACE_BTF", ebpf.BTF),)),
        (0, BPF_PERFMON, {"BPFTRACE_BTF": "/btf/mine"}, "bpftrace", None, ()),
        (0, BPF_PERFMON, {"BPFTRACE_BTF": "/btf/absent"}, "bpftrace", "no_btf", ()),
        (0, 1 << ebpf.CAP_BPF, {}, "bpftrace", "no_capability", ()),
        (0, 1 << ebpf.CAP_PERFMON, {}, "bpftrace", "no_capability", ()),
        (0, 0, {}, "bpftrace", "no_capability", ()),
        # bpftrace checks its euid whatever the capabilities.
        (2000, ALL_CAPS, {}, "bpftrace", "not_root", ()),
        (2000, 0, {}, "bpftrace", "not_root", ()),
        (0, ALL_CAPS, {}, None, "no_bpftrace", ()),
    ],
)
def test_privileges_decide_whether_and_how_bpftrace_can_run(
    euid: int, caps: int, env: dict, bpftrace: str | None, reason: str | None, env_set: tuple
) -> None:
    exists = {ebpf.BTF, "/btf/mine"}.__contains__
    v = ebpf.privilege_verdict(euid, caps, env, exists, bpftrace)
    assert (v.reason, v.env) == (reason, env_set)
    assert v.reason is None or v.reason in ebpf.REASONS
    assert (v.why is not None) == (reason is not None or bool(env_set))
    if env_set:
        assert "BPFTRACE_BTF" in v.why


def test_each_refusal_names_its_cause() -> None:
    def why(euid: int, caps: int, env: dict | None = None, exists=lambda p: True) -> str:
        return str(ebpf.privilege_verdict(euid, caps, env or {}, exists).why)

    assert "uid 2000" in why(2000, ALL_CAPS) and "root" in why(2000, ALL_CAPS)
    assert "CAP_SYS_ADMIN" in why(0, 0) and "CAP_PERFMON" in why(0, 0)
    assert ebpf.BTF in why(0, ADMIN, exists=lambda p: False)
    assert "BPFTRACE_BTF" in why(0, ADMIN, {"BPFTRACE_BTF": "/x"}, lambda p: False)


def test_check_asks_for_privileges_first_and_keeps_their_env(tmp_path) -> None:
    btf = tmp_path / "vmlinux"
    btf.touch()
    (tmp_path / "events" / ebpf.TRACEPOINT).mkdir(parents=True)
    ok = ebpf.check("/bin/true", BPF_PERFMON, str(btf), str(tmp_path), euid=0, env={})
    assert ok.env == (("BPFTRACE_BTF", str(btf)),) and ok.reason is None
    # Refused before tracefs is looked at (or mounted).
    nowhere = str(tmp_path / "no-tracefs")
    assert ebpf.check("/bin/true", ALL_CAPS, str(btf), nowhere, euid=2000).reason == "not_root"
    assert not os.path.exists(nowhere)


@pytest.mark.parametrize(
    ("state", "reason", "words"),
    [
        ("ok", None, None),
        ("unmounted", "no_tracefs", "not mounted"),
        ("unreadable", "no_tracefs", "may not read"),
        ("no_tracepoint", "no_tracepoint", ebpf.TRACEPOINT),
    ],
)
def test_tracefs_unreadable_is_told_apart_from_unmounted(state, reason, words) -> None:
    v = ebpf.tracefs_verdict(state)
    assert v.reason == reason
    assert v.why is None if words is None else words in v.why


def test_tracefs_state_reads_the_tracepoints_directory(tmp_path, monkeypatch) -> None:
    assert ebpf.tracefs_state(str(tmp_path)) == "unmounted"
    (tmp_path / "events").mkdir()
    assert ebpf.tracefs_state(str(tmp_path)) == "no_tracepoint"
    (tmp_path / "events" / ebpf.TRACEPOINT).mkdir(parents=True)
    assert ebpf.tracefs_state(str(tmp_path)) == "ok"
    real_stat = ebpf.os.stat

    def denied(path, *a, **kw):
        if str(path).startswith(str(tmp_path)):
            raise PermissionError(13, "Permission denied", path)
        return real_stat(path, *a, **kw)

    monkeypatch.setattr(ebpf.os, "stat", denied)  # a non-root agent, tracefs mode 0700
    assert ebpf.tracefs_state(str(tmp_path)) == "unreadable"


def _cfg(**settings):
    return config.build(
        {"clusters": [{"name": "local", "endpoints": ["1@127.0.0.1:19092"]}], **settings},
        flags={"host": "web-1"},
    )


def _sample(m: AgentMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


@pytest.mark.parametrize(
    ("settings", "reason"),
    [({"ebpf": "off"}, "off"), ({"collector": "proc"}, "off"), ({}, "not_root")],
)
def test_an_agent_without_ebpf_says_why_in_its_metrics(settings, reason, caplog) -> None:
    m = AgentMetrics()
    verdict = ebpf.Verdict("not_root", "the agent runs as uid 2000")
    with caplog.at_level("INFO"):
        assert make_ebpf(_cfg(**settings), m, verdict) is None
    assert _sample(m, "connmon_agent_collector_info", collector="ebpf") == 0
    assert _sample(m, "connmon_agent_ebpf_disabled_info", reason=reason) == 1
    assert ("uid 2000" in caplog.text) == (reason == "not_root")


def test_ebpf_on_that_cannot_work_stops_the_agent() -> None:
    from streaming.errors import ConfigError

    with pytest.raises(ConfigError, match="ebpf: on, but the agent runs as uid 2000"):
        make_ebpf(
            _cfg(ebpf="on"), AgentMetrics(), ebpf.Verdict("not_root", "the agent runs as uid 2000")
        )


def test_the_btf_path_the_agent_sets_reaches_bpftrace(tmp_path, caplog) -> None:
    import sys

    seen = tmp_path / "env"
    fake = tmp_path / "bpftrace"
    fake.write_text(
        f"#!{sys.executable}\nimport os\n"
        f"open({str(seen)!r}, 'w').write(os.environ.get('BPFTRACE_BTF', '-'))\n"
    )
    fake.chmod(0o755)
    verdict = ebpf.privilege_verdict(0, BPF_PERFMON, {}, lambda p: True)
    m = AgentMetrics()
    with caplog.at_level("INFO"):
        col = make_ebpf(_cfg(), m, verdict)
    assert col is not None and "BPFTRACE_BTF=" in caplog.text
    assert _sample(m, "connmon_agent_ebpf_disabled_info", reason="no_btf") is None
    col.bpftrace = str(fake)
    col.start_timeout_s = 10
    try:
        col.ensure({19092})
        _wait(seen.exists)
        _wait(lambda: seen.read_text() != "")
    finally:
        col.stop()
    assert seen.read_text() == ebpf.BTF


def _meta() -> Meta:
    return Meta("local", "client", "app", 1, "127.0.0.1:9092", pid=10)


def test_a_socket_first_seen_in_time_wait_is_silent_while_the_kernel_counts() -> None:
    tw = SocketRecord(2, TIME_WAIT, "10.0.0.5", 40001, "127.0.0.1", 9092, 0, 0)
    for counted, kinds in ((False, ["opened", "closed"]), (True, [])):
        lc = SocketLifecycles()
        lc.update(0.0, [])
        lc.counted_elsewhere = counted
        assert [e["kind"] for e in lc.update(5.0, [(tw, _meta())])] == kinds
        assert tw.key in lc.sockets  # summaries still count it
        assert lc.update(10.0, []) == []


def test_a_reused_four_tuple_closes_the_old_connection_once() -> None:
    """The kernel reuses a TIME_WAIT 4-tuple for a new connect: the old connection was closed
    (or counted in the kernel) already, so only the new one gets an event."""
    tw = SocketRecord(2, TIME_WAIT, "10.0.0.5", 40001, "127.0.0.1", 9092, 0, 0)
    est = SocketRecord(2, ESTABLISHED, "10.0.0.5", 40001, "127.0.0.1", 9092, 77, 0)
    for counted, first in ((False, ["opened", "closed"]), (True, [])):
        lc = SocketLifecycles()
        lc.update(0.0, [])
        lc.counted_elsewhere = counted
        assert [e["kind"] for e in lc.update(5.0, [(tw, _meta())])] == first
        assert [e["kind"] for e in lc.update(10.0, [(est, _meta())])] == ["opened"]
        assert lc.sockets[est.key].first_seen == 10.0


def test_a_socket_that_left_the_table_is_remembered() -> None:
    est = SocketRecord(2, ESTABLISHED, "10.0.0.5", 40002, "127.0.0.1", 9092, 7, 0)
    lc = SocketLifecycles()
    lc.update(0.0, [(est, _meta())])
    assert not lc.recently_gone(est.key)
    lc.update(5.0, [])
    assert lc.recently_gone(est.key)


class CannedEbpf(ebpf.EbpfCollector):
    """The collector without bpftrace: what it drains is the captured output, parsed."""

    def __init__(self) -> None:
        super().__init__(2)
        _, items = _items()
        self.pending = [i for i in items if not isinstance(i, ebpf.Connecting)]

    @property
    def running(self) -> bool:
        return True

    def ensure(self, ports) -> bool:
        self.ports = frozenset(ports)
        return True

    def drain(self) -> list:
        out, self.pending = self.pending, []
        return out


def test_agent_turns_counts_into_short_lived_events(tmp_path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "snmp").write_text("Tcp: ActiveOpens AttemptFails\nTcp: 1 0\n")
    cfg = config.build(
        {"clusters": [{"name": "local", "endpoints": ["1@127.0.0.1:19092"]}]},
        flags={"proc_root": str(tmp_path), "host": "web-1", "network_namespaces": "all"},
    )
    m = AgentMetrics()
    events: list[dict] = []
    sink = type("S", (), {"send": lambda self, e: events.append(e), "pump": lambda self: None})()
    agent = Agent(
        cfg, sink, m, make_refresher(cfg, m),
        collector=Collector("netlink", netlink_dump=lambda ports: []),
        procs=ProcessTable(tmp_path), clock=lambda: 1000.0, ebpf_collector=CannedEbpf(),
    )  # fmt: skip
    agent.scan()
    short = [e for e in events if e["kind"] == "short_lived"]
    assert all(validate(e).reason is None for e in short), [validate(e).detail for e in short]
    got = {(e["closed_by"], e.get("connect_error")): e["count"] for e in short}
    # The process has exited (no /proc entry here): named by its comm. The dumped connection
    # that no scan of this agent tracked is counted too; [::1]:19092 and the broker side are
    # not configured.
    assert got == {("unknown", "refused"): 3, ("local", None): 4 + 1, ("peer", None): 1}
    assert {(e["app"], e["pid"], e["broker_id"], e["side"]) for e in short} == {
        ("python3", PID, 1, "client")
    }
    assert m.registry.get_sample_value("connmon_agent_collector_info", {"collector": "ebpf"}) == 1


FAKE_BPFTRACE = """#!{python}
import json, os, re, signal, sys, time
prog = sys.argv[sys.argv.index("-e") + 1]
with open({log!r}, "a") as f:
    f.write(" ".join(sorted(set(re.findall(r"args->dport == (\\d+)", prog)))) + "\\n")
while not os.path.exists({go!r}):
    time.sleep(0.01)
print(json.dumps({{"type": "printf", "data": "R connmon-ebpf ready\\n"}}), flush=True)
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
while True:
    time.sleep(1)
"""


def test_starts_in_the_background_and_restarts_only_for_a_new_port(tmp_path) -> None:
    """A stand-in bpftrace that attaches only when told: ensure() returns at once, the
    collector runs once it is attached, and a port that leaves the set keeps its filter."""
    import sys

    starts, go = tmp_path / "starts", tmp_path / "go"
    fake = tmp_path / "bpftrace"
    fake.write_text(FAKE_BPFTRACE.format(python=sys.executable, log=str(starts), go=str(go)))
    fake.chmod(0o755)
    col = ebpf.EbpfCollector(1, bpftrace=str(fake), start_timeout_s=30)
    try:
        assert col.ensure({9092}) is False  # not attached yet, and the caller did not wait
        assert not col.running
        go.touch()
        _wait(lambda: col.ensure({9092}))
        _wait(lambda: starts.exists())
        assert col.ensure({9092, 9093}) is False  # a new port: restarted in the background
        _wait(lambda: col.ensure({9092, 9093}))
        assert col.ensure({9093}) is True  # 9092 left the metadata: no restart
        assert col.ports == {9092, 9093}
        assert starts.read_text().splitlines() == ["9092", "9092 9093"]
    finally:
        col.stop()
    assert not col.running


def _wait(cond, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_scan_without_time_wait_closes_a_socket_only_on_the_kernels_word() -> None:
    """A partial scan (no TIME_WAIT) does not find a tracked socket: it stays until the
    kernel reports its close, and then is closed by whom the kernel says."""
    est = SocketRecord(2, ESTABLISHED, "10.0.0.5", 40003, "127.0.0.1", 9092, 9, 0)
    lc = SocketLifecycles()
    lc.counted_elsewhere = True
    lc.update(0.0, [])
    assert [e["kind"] for e in lc.update(1.0, [(est, _meta())])] == ["opened"]
    assert lc.update(2.0, [], partial=True) == []  # closed locally, its report not yet read
    assert est.key in lc.sockets
    closed = lc.update(3.0, [], partial=True, kernel_closed={est.key: "local"})
    assert [(e["kind"], e["closed_by"]) for e in closed] == [("closed", "local")]
    assert est.key not in lc.sockets and lc.recently_gone(est.key)
    # The next summary scan dumps its TIME_WAIT remains: counted for the summary, no event.
    tw = SocketRecord(2, TIME_WAIT, "10.0.0.5", 40003, "127.0.0.1", 9092, 0, 0)
    assert lc.update(4.0, [(tw, _meta())]) == []
    assert lc.update(5.0, [], partial=True) == []  # TIME_WAIT is not in a partial scan
    assert tw.key in lc.sockets
    assert lc.update(6.0, []) == [] and tw.key not in lc.sockets  # gone from a full scan


def test_a_full_scan_decides_what_a_partial_one_could_not() -> None:
    est = SocketRecord(2, ESTABLISHED, "10.0.0.5", 40004, "127.0.0.1", 9092, 9, 0)
    lc = SocketLifecycles()
    lc.counted_elsewhere = True
    lc.update(0.0, [])
    lc.update(1.0, [(est, _meta())])
    assert lc.update(2.0, [], partial=True) == []
    gone = lc.update(3.0, [])  # no kernel report came: the scans' own inference
    assert [(e["kind"], e["closed_by"]) for e in gone] == [("closed", "peer")]


def test_runs_the_kernel_skipped_are_read_from_the_programs_fdinfo(tmp_path) -> None:
    fdinfo = tmp_path / "77" / "fdinfo"
    fdinfo.mkdir(parents=True)
    (fdinfo / "3").write_text("pos:\t0\nflags:\t02\n")  # not a program
    (fdinfo / "4").write_text("prog_type:\t5\nrun_cnt:\t10\nrecursion_misses:\t2\n")
    (fdinfo / "5").write_text("prog_type:\t7\nrecursion_misses:\t1\n")
    assert ebpf.prog_stats(77, str(tmp_path))["recursion_misses"] == 3
    assert ebpf.prog_stats(77, str(tmp_path)) == {
        "run_time_ns": 0, "run_cnt": 10, "recursion_misses": 3
    }  # fmt: skip
    assert ebpf.prog_stats(78, str(tmp_path)) is None


def test_an_orphan_first_seen_closing_is_left_to_the_kernel() -> None:
    """Found after its process closed it (no inode, so no process): the kernel's report of
    its close, which names the process, is what counts; the scans send nothing for it."""
    from streaming.agent.records import FIN_WAIT2

    orphan = SocketRecord(2, FIN_WAIT2, "10.0.0.5", 40005, "127.0.0.1", 9092, 0, 0)
    tw = SocketRecord(2, TIME_WAIT, "10.0.0.5", 40005, "127.0.0.1", 9092, 0, 0)
    for counted, kinds in ((False, ["opened", "transition", "closed"]), (True, [])):
        lc = SocketLifecycles()
        lc.update(0.0, [])
        lc.counted_elsewhere = counted
        events = lc.update(1.0, [(orphan, _meta())]) + lc.update(2.0, [(tw, None)])
        assert [e["kind"] for e in events] == kinds
        assert lc.sockets[orphan.key].kernel_counts is counted


def test_a_new_client_socket_without_its_process_waits_one_scan() -> None:
    """Dumped open, but its process was not found (it closed the socket before the owner
    lookup): no events while the kernel may still report its close with the process; still
    open at the next scan, it is announced then, with the process if found by then."""
    est = SocketRecord(2, ESTABLISHED, "10.0.0.5", 40006, "127.0.0.1", 9092, 31, 0)
    nobody = Meta("local", "client", "unknown", 1, "127.0.0.1:9092")
    for counted in (False, True):
        lc = SocketLifecycles()
        lc.update(0.0, [])
        lc.counted_elsewhere = counted
        first = lc.update(1.0, [(est, nobody)])
        assert [e["kind"] for e in first] == ([] if counted else ["opened"])
        assert lc.sockets[est.key].kernel_counts is counted
        again = lc.update(2.0, [(est, _meta())], partial=counted)
        assert [(e["kind"], e["pid"]) for e in again] == ([("opened", 10)] if counted else [])
        assert not lc.sockets[est.key].kernel_counts
        if counted:
            assert again[0]["lifetime_s"] == 1.0  # from when the first scan found it
    # Gone before the next scan: the kernel's report is the one that counts.
    lc = SocketLifecycles()
    lc.update(0.0, [])
    lc.counted_elsewhere = True
    lc.update(1.0, [(est, nobody)])
    assert lc.update(2.0, [], partial=True, kernel_closed={est.key: "peer"}) == []
    assert est.key not in lc.sockets


def test_only_client_sockets_wait_for_their_process() -> None:
    """The kernel knows the process of a connect, not of an accepted connection."""
    est = SocketRecord(2, ESTABLISHED, "127.0.0.1", 9092, "10.0.0.5", 40007, 32, 0)
    broker = Meta("local", "broker", "kafka-broker", 1, "127.0.0.1:9092", peer_host="10.0.0.5")
    lc = SocketLifecycles()
    lc.update(0.0, [])
    lc.counted_elsewhere = True
    assert [e["kind"] for e in lc.update(1.0, [(est, broker)])] == ["opened"]


def test_a_socket_seen_entering_time_wait_is_kept_through_partial_scans() -> None:
    est = SocketRecord(2, ESTABLISHED, "10.0.0.5", 40008, "127.0.0.1", 9092, 33, 0)
    tw = SocketRecord(2, TIME_WAIT, "10.0.0.5", 40008, "127.0.0.1", 9092, 0, 0)
    lc = SocketLifecycles()
    lc.counted_elsewhere = True
    lc.update(0.0, [])
    lc.update(1.0, [(est, _meta())])
    assert [e["kind"] for e in lc.update(2.0, [(tw, None)])] == ["transition", "closed"]
    for at in (3.0, 4.0):
        assert lc.update(at, [], partial=True) == [] and tw.key in lc.sockets
    assert lc.update(5.0, []) == [] and tw.key not in lc.sockets


def test_a_new_connection_found_closing_on_a_time_wait_four_tuple_is_a_new_one() -> None:
    """The kernel hands a TIME_WAIT 4-tuple to a new connect; a scan first finds that one
    already closed by its process (FIN_WAIT2, no inode). It is not the old connection: its
    close is the kernel's to count."""
    from streaming.agent.records import FIN_WAIT2

    tw = SocketRecord(2, TIME_WAIT, "10.0.0.5", 40009, "127.0.0.1", 9092, 0, 0)
    orphan = SocketRecord(2, FIN_WAIT2, "10.0.0.5", 40009, "127.0.0.1", 9092, 0, 0)
    for counted, kinds in ((False, ["opened"]), (True, [])):
        lc = SocketLifecycles()
        lc.update(0.0, [])
        lc.counted_elsewhere = counted
        lc.update(1.0, [(tw, _meta())])
        old = lc.sockets[tw.key]
        assert [e["kind"] for e in lc.update(2.0, [(orphan, _meta())])] == kinds
        assert lc.sockets[tw.key] is not old
        assert lc.sockets[tw.key].kernel_counts is counted
