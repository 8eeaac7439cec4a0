"""Pure logic of the scenario harness: no services. (Kept next to the scenarios it serves; the
``unit`` marker lets ``make unit`` pick it up too.)"""

from __future__ import annotations

import struct

import pytest

from streaming.detectors.config import DEFAULT
from streaming.errors import ConfigError
from streaming.scenarios import catalog, gobuild, goclients, nodeclients
from streaming.scenarios.cli import parse_duration
from streaming.scenarios.findings import FindingsBoard
from streaming.scenarios.launcher import workload_argv
from streaming.scenarios.model import (
    Expect,
    Scenario,
    ScenarioError,
    Workload,
    detector_config,
    validate,
)
from streaming.scenarios.observer import (
    UNATTRIBUTED,
    ObservedConnections,
    host_rates,
    parse_snmp,
    parse_ss,
    socket_owners,
    summarise,
    timeline_table,
    with_owners,
)
from streaming.scenarios.report import first_findings, line_chart, time_to_first, to_series
from streaming.scenarios.workloads import programs
from streaming.scenarios.workloads.rawsock import api_versions_request

pytestmark = pytest.mark.unit

# Lines as `ss -H -t -a -n -p -i -O` prints them on this machine (kernel 6.18), trimmed.
SS_SAMPLE = "\n".join(
    [
        'LISTEN 0 50 127.0.0.1:9092 0.0.0.0:* users:(("java",pid=900,fd=120)) cubic cwnd:10',
        'ESTAB 0 0 127.0.0.1:40000 127.0.0.1:9092 users:(("java",pid=1234,fd=55)) cubic'
        " wscale:7,7 rto:204 rtt:0.05/0.025 mss:32768 cwnd:10 bytes_sent:120 bytes_acked:121"
        " bytes_received:900 lastsnd:1500 lastrcv:1200 lastack:1200 pmtu:65535",
        'CLOSE-WAIT 1 0 127.0.0.1:40002 127.0.0.1:9092 users:(("python",pid=77,fd=7)) cubic'
        " lastsnd:70000 lastrcv:9000 lastack:9000",
        "TIME-WAIT 0 0 127.0.0.1:40004 127.0.0.1:9092 timer:(timewait,55sec,0)",
        "ESTAB 0 0 [::ffff:127.0.0.1]:40006 [::ffff:127.0.0.1]:9093"
        ' users:(("java",pid=1234,fd=56)) cubic lastsnd:10 lastrcv:20',
        'ESTAB 0 0 127.0.0.1:40008 10.0.0.1:443 users:(("curl",pid=5,fd=3)) lastsnd:1 lastrcv:1',
    ]
)
BROKERS = {("127.0.0.1", 9092): "c/1", ("127.0.0.1", 9093): "c/2"}


def test_parse_ss_reads_state_addresses_pid_and_idle():
    rows = parse_ss(SS_SAMPLE)
    assert [r.state for r in rows] == [
        "LISTEN",
        "ESTABLISHED",
        "CLOSE_WAIT",
        "TIME_WAIT",
        "ESTABLISHED",
        "ESTABLISHED",
    ]
    est = rows[1]
    assert est.local == ("127.0.0.1", 40000) and est.peer == ("127.0.0.1", 9092)
    assert est.pid == 1234 and est.idle_ms == 1200  # the more recent of lastsnd/lastrcv
    assert rows[3].pid is None and rows[3].idle_ms is None
    assert rows[4].local == ("127.0.0.1", 40006)  # v4-mapped v6 unwrapped


def test_observed_connections_counts_states_per_client_and_broker_and_ignores_others():
    t = ObservedConnections(BROKERS)
    s = t.update(100.0, parse_ss(SS_SAMPLE), {1234: "java-app", 77: "py-app"})
    assert s.counts[("java-app", "c/1")]["ESTABLISHED"] == 1
    assert s.counts[("java-app", "c/2")]["ESTABLISHED"] == 1
    assert s.counts[("py-app", "c/1")]["CLOSE_WAIT"] == 1
    assert s.counts[(UNATTRIBUTED, "c/1")]["TIME_WAIT"] == 1  # owner never seen
    assert not any(app == "curl" for app, _ in s.counts)  # not a broker, not a workload


def test_observed_connections_follows_a_connection_through_close_wait_and_attributes_time_wait():
    t = ObservedConnections(BROKERS)
    apps = {1: "a"}
    est = 'ESTAB 0 0 127.0.0.1:5000 127.0.0.1:9092 users:(("x",pid=1,fd=3)) lastsnd:{i} lastrcv:{i}'
    t.update(0.0, parse_ss(est.format(i=100)), apps)
    t.update(1.0, parse_ss(est.format(i=9000)), apps)
    cw = 'CLOSE-WAIT 1 0 127.0.0.1:5000 127.0.0.1:9092 users:(("x",pid=1,fd=3))'
    for sec in range(2, 30):
        t.update(float(sec), parse_ss(cw), apps)
    (conn,) = t.conns.values()
    assert conn.closed_by == "peer"
    assert conn.max_close_wait_s == pytest.approx(27.0)
    assert conn.max_idle_s == pytest.approx(9.0)
    # a client-closed connection: its TIME_WAIT has no pid but keeps the app by its 4-tuple
    t2 = ObservedConnections(BROKERS)
    est2 = 'ESTAB 0 0 127.0.0.1:6000 127.0.0.1:9093 users:(("x",pid=1,fd=3)) lastsnd:5 lastrcv:5'
    t2.update(0.0, parse_ss(est2), apps)
    s = t2.update(1.0, parse_ss("TIME-WAIT 0 0 127.0.0.1:6000 127.0.0.1:9093"), apps)
    assert s.counts[("a", "c/2")]["TIME_WAIT"] == 1
    (row,) = summarise(t2)
    assert (row.app, row.closed_local, row.closed_peer, row.max_time_wait) == ("a", 1, 0, 1)


def test_observed_connections_treats_a_reused_four_tuple_as_a_new_connection():
    t = ObservedConnections(BROKERS)
    apps = {1: "a"}
    est = 'ESTAB 0 0 127.0.0.1:7000 127.0.0.1:9092 users:(("x",pid=1,fd=3)) lastsnd:5 lastrcv:5'
    tw = "TIME-WAIT 0 0 127.0.0.1:7000 127.0.0.1:9092"
    for i, text in enumerate([est, tw, est]):
        t.update(float(i), parse_ss(text), apps)
    assert len(t.conns) == 2
    assert "a" in timeline_table(t, 0.0)


def test_host_counters_and_rates():
    snmp = (
        "Tcp: RtoAlgorithm RtoMin ActiveOpens AttemptFails\n"
        "Tcp: 1 200 {o} {f}\n"
        "Udp: InDatagrams\nUdp: 5\n"
    )
    a = parse_snmp(snmp.format(o=10, f=1))
    b = parse_snmp(snmp.format(o=70, f=121))
    assert a["ActiveOpens"] == 10 and a["AttemptFails"] == 1
    total, peak = host_rates([(0.0, a), (30.0, b)], "AttemptFails")
    assert (total, peak) == (120, 240.0)
    assert host_rates([(0.0, a)], "AttemptFails") == (0, 0.0)


def test_api_versions_request_is_a_valid_v0_frame():
    frame = api_versions_request(7, "app-x")
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    api_key, version, corr, cid_len = struct.unpack(">hhih", frame[4:14])
    assert (api_key, version, corr, cid_len) == (18, 0, 7, 5)
    assert frame[14:] == b"app-x"


def test_catalog_is_valid_and_covers_every_finding_kind():
    scenarios = catalog.get()
    validate(scenarios, catalog.CLUSTERS)
    expected = {e.kind for s in scenarios for e in s.expect if e.present}
    assert expected == {
        "close_wait_buildup",
        "idle_churn",
        "duplicate_connections",
        "idle_zombie",
        "connection_storm",
        "time_wait_pileup",
    }
    healthy = catalog.SCENARIOS["healthy"]
    assert healthy.expect and not any(e.present for e in healthy.expect)
    # one job serves every scenario: their settings agree with the session's
    cfg = detector_config(catalog.SESSION_DETECTOR, scenarios)
    assert cfg == catalog.SESSION_DETECTOR
    # zombies must outlive the main cluster's idle expiry, or every idle socket is a zombie
    assert cfg.zombie_idle_s > catalog.BROKER_IDLE_MS / 1000
    with pytest.raises(KeyError, match="nope"):
        catalog.get(["nope"])


def _scn(name: str, **kw) -> Scenario:
    base = dict(
        name=name,
        summary="",
        cluster="main",
        workloads=(Workload("rdkafka", "producer", f"{name}-app", "t-" + name),),
        expect=(),
    )
    base.update(kw)
    return Scenario(**base)


def test_validate_names_the_scenario_and_field():
    with pytest.raises(ScenarioError, match="x: workload 'x-app': mode 'nap'"):
        validate(
            [_scn("x", workloads=(Workload("rdkafka", "nap", "x-app", "t"),))], catalog.CLUSTERS
        )
    with pytest.raises(ScenarioError, match="app name already used"):
        validate(
            [_scn("x"), _scn("y", workloads=(Workload("raw", "churn", "x-app"),))], catalog.CLUSTERS
        )
    with pytest.raises(ScenarioError, match="expectation names app 'other'"):
        validate([_scn("x", expect=(Expect("idle_churn", "other"),))], catalog.CLUSTERS)
    with pytest.raises(ScenarioError, match="broker 4 not in cluster 'main'"):
        w = Workload("raw", "churn", "x-app", broker=4)
        validate([_scn("x", workloads=(w,))], catalog.CLUSTERS)
    with pytest.raises(ScenarioError, match="also is for raw close-wait-leak"):
        w = Workload("raw", "churn", "x-app", also=("zombie", 1))
        validate([_scn("x", workloads=(w,))], catalog.CLUSTERS)
    with pytest.raises(ScenarioError, match="also broker 2 not in cluster"):
        w = Workload("raw", "close-wait-leak", "x-app", also=("zombie", 2))
        validate([_scn("x", workloads=(w,))], catalog.CLUSTERS)
    with pytest.raises(ScenarioError, match="expectation names cluster 'nowhere'"):
        validate([_scn("x", expect=(Expect(None, "x-app", cluster="nowhere"),))], catalog.CLUSTERS)


def test_detector_settings_of_two_scenarios_must_agree():
    a = _scn("a", detector={"duplicate_idle_s": 10.0})
    b = _scn(
        "b", workloads=(Workload("raw", "churn", "b-app"),), detector={"duplicate_idle_s": 20.0}
    )
    with pytest.raises(ScenarioError, match="duplicate_idle_s: a wants 10.0, b wants 20.0"):
        detector_config(DEFAULT, [a, b])
    with pytest.raises(ScenarioError, match="unknown detector setting"):
        detector_config(DEFAULT, [_scn("c", detector={"no_such": 1})])


def test_workload_argv_carries_the_app_marker_and_settings():
    w = Workload(
        "rdkafka",
        "producer",
        "p-app",
        "t1",
        interval_ms=250,
        props={"connections.max.idle.ms": "10000"},
    )
    argv = workload_argv(w, "127.0.0.1:1")
    assert argv[1:3] == ["-m", "streaming.scenarios.workloads.rdkafka"]
    joined = " ".join(argv)
    assert "--app p-app" in joined and "--topic t1" in joined and "--interval-ms 250" in joined
    assert "--prop connections.max.idle.ms=10000" in joined
    j = workload_argv(
        Workload("java", "stalled-consumer", "j-app", "t2", "g", options={"poll_for_s": 5}),
        "127.0.0.1:1",
    )
    assert j[0] == "java" and "ConnmonDriver" in j
    leak = Workload("raw", "close-wait-leak", "r-app", also=("zombie", 1))
    r = workload_argv(leak, "127.0.0.1:1", also="127.0.0.1:2")
    assert r[r.index("--also") + 1] == "127.0.0.1:2"
    assert j[j.index("--mode") + 1] == "stalled-consumer" and j[j.index("--poll-for-s") + 1] == "5"


def test_parse_duration():
    assert parse_duration("90") == 90
    assert parse_duration("90s") == 90
    assert parse_duration("10m") == 600
    assert parse_duration("1.5h") == 5400
    assert parse_duration("1d") == 86400  # the job's duration syntax
    for bad in ("", "ten", "-5m", "0", "5w"):
        with pytest.raises(ConfigError, match="--duration"):
            parse_duration(bad)


def test_findings_board_keeps_latest_per_key_and_sets_malformed_aside():
    b = FindingsBoard()
    firing = b'{"kind":"idle_churn","status":"firing","app":"a","side":"client","key":"k1"}'
    resolved = b'{"kind":"idle_churn","status":"resolved","app":"a","side":"client","key":"k1"}'
    b.fold(b"k1", firing, 1.0)
    assert [f["kind"] for f in b.active()] == ["idle_churn"]
    b.fold(b"k1", b"{not json", 2.0)
    b.fold(b"k1", b'{"kind": "x"}', 2.5)
    assert len(b.malformed) == 2 and len(b.active()) == 1
    b.fold(b"k1", resolved, 3.0)
    assert b.active() == []
    assert len(b.ever_fired("idle_churn", "a")) == 1  # history keeps the firing message
    assert b.ever_fired(None, "a") and not b.ever_fired(None, "b")
    other = b'{"kind":"idle_churn","status":"firing","app":"a","cluster":"east","key":"k2"}'
    b.fold(b"k2", other, 3.5)
    assert [f["key"] for f in b.ever_fired(None, "a", cluster="east")] == ["k2"]
    assert b.ever_fired(None, "a", cluster="west") == []
    b.fold(b"k1", None, 4.0)  # tombstone
    assert "k1" not in b.latest


def test_firing_starts_counts_each_fire_after_not_firing():
    b = FindingsBoard()

    def fold(key: str, status: str) -> None:
        b.fold(key.encode(), f'{{"kind":"k","status":"{status}","key":"{key}"}}'.encode(), 0.0)

    for status in ("firing", "firing", "resolved"):  # fired once, updated, resolved for good
        fold("once", status)
    for status in ("firing", "resolved", "firing", "firing", "resolved", "firing"):
        fold("flap", status)
    assert (b.firing_starts("once"), b.firing_starts("flap"), b.firing_starts("none")) == (1, 3, 0)


def test_line_chart_draws_one_polyline_per_series_and_handles_no_data():
    svg = line_chart("T <x>", {"a": [(0, 1), (10, 3)], "b": [(0, 2), (10, 0)]}, "sockets")
    assert svg.startswith("<svg") and svg.count("<polyline") == 2
    assert "T &lt;x&gt;" in svg  # escaped
    assert "no data" in line_chart("empty", {})


def test_to_series_and_first_findings():
    result = [{"metric": {"app": "a"}, "values": [[1, "1"], [2, "NaN"], [3, "2"]]}]
    assert to_series(result) == {"a": [(1.0, 1.0), (3.0, 2.0)]}
    hist = [
        {"kind": "k", "app": "a", "side": "client", "broker_id": 1, "status": "firing",
         "updated_at": "t1"},
        {"kind": "k", "app": "a", "side": "client", "broker_id": 1, "status": "firing",
         "updated_at": "t2"},
        {"kind": "k", "app": "b", "side": "client", "broker_id": 1, "status": "resolved"},
    ]  # fmt: skip
    firsts = first_findings(hist)
    assert len(firsts) == 1 and firsts[0]["first_seen"] == "t1"


def test_the_report_counts_finding_records_per_key_and_hour():
    from streaming.scenarios.report import records_per_key, render_html

    hist = [{"key": "a", "kind": "k"}] * 3 + [{"key": "b", "kind": "k"}]
    per_key = records_per_key(hist, elapsed_s=1800)
    assert per_key == [("a", 3, 6.0), ("b", 1, 2.0)]
    page = render_html("t", {}, [], [], "", [], per_key)
    assert "Finding records written per key (4)" in page
    assert "<tr><td>a</td><td>3</td><td>6</td></tr>" in page


def test_owners_come_from_socket_inodes():
    text = "ESTAB 0 0 127.0.0.1:1 127.0.0.1:9092 ino:4242 sk:1 lastsnd:5 lastrcv:7\n"
    (row,) = with_owners(parse_ss(text), {4242: 99})
    assert (row.inode, row.pid, row.idle_ms) == (4242, 99, 5)
    (other,) = with_owners(parse_ss(text), {1: 99})
    assert other.pid is None


def test_socket_owners_reads_proc_fd_links(tmp_path):
    fd = tmp_path / "7" / "fd"
    fd.mkdir(parents=True)
    (fd / "3").symlink_to("socket:[555]")
    (fd / "4").symlink_to("/dev/null")
    assert socket_owners([7, 8], proc=str(tmp_path)) == {555: 7}


def test_time_to_first_finding_per_kind():
    firsts = {("k", "a", "client"): 130.0, ("k", "b", "client"): 110.0, ("j", "a", "client"): 150.0}
    assert time_to_first(firsts, 100.0) == {"j": (50.0, "a"), "k": (10.0, "b")}


def test_every_library_program_has_a_scenario_with_quiet_clients_and_idle_churn():
    for client in programs.LIBRARIES:
        workloads = [(s, w) for s in catalog.get() for w in s.workloads if w.client == client]
        modes = {w.mode for _, w in workloads}
        assert {"producer", "consumer", "idle-producer"} <= modes, (client, modes)
        for s, w in workloads:
            mine = [e for e in s.expect if e.app == w.app]
            assert mine, f"{s.name}: {w.app} has no expectation"
            if w.mode == "idle-producer":
                assert any(e.kind == "idle_churn" and e.present for e in mine), w.app
            else:  # the busy clients: never churn, never a duplicate or a zombie
                for kind in ("idle_churn", "duplicate_connections", "idle_zombie"):
                    assert any((e.kind in (kind, None)) and not e.present for e in mine), (
                        w.app,
                        kind,
                    )


def test_program_workloads_start_the_program_itself_with_the_app_marker(monkeypatch, tmp_path):
    monkeypatch.setenv("CONNMON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(goclients, "ensure_built", lambda quiet=True: tmp_path)
    monkeypatch.setattr(nodeclients, "ensure_built", lambda quiet=True: tmp_path)
    monkeypatch.setattr(nodeclients, "node", lambda: "/usr/bin/node")
    w = Workload(
        "franz-go", "idle-producer", "f-app", "t", interval_ms=90_000, props={"linger": "5ms"}
    )
    argv = workload_argv(w, "127.0.0.1:1,127.0.0.1:2")
    if argv[0] == "nice":  # at a lower CPU priority; nice execs the program (same pid)
        argv = argv[len(programs.NICE) :]
    assert argv[0] == str(goclients.build_dir() / "bin" / "franz-client")
    joined = " ".join(argv)
    assert "--mode idle-producer --app f-app --bootstrap 127.0.0.1:1,127.0.0.1:2" in joined
    assert "--topic t" in joined and "--interval-ms 90000" in joined
    assert "--prop linger=5ms" in joined
    s = workload_argv(Workload("sarama", "consumer", "s-app", "t", "g"), "127.0.0.1:1")
    assert s[s.index("--mode") - 1].endswith("/sarama-client") and s[s.index("--group") + 1] == "g"
    k = workload_argv(Workload("kafkajs", "producer", "k-app", "t"), "127.0.0.1:1")
    node, script = k.index("/usr/bin/node"), str(nodeclients.build_dir() / "kafkajs-client.js")
    assert k[node + 1] == script and k[node + 2] == "--mode"
    with pytest.raises(ValueError, match="mode 'stalled-consumer'"):
        programs.command("kafkajs", "stalled-consumer", "a", "b", "t")


def test_client_builds_are_skipped_when_up_to_date_and_fail_clearly_without_tools(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("CONNMON_CACHE_DIR", str(tmp_path))
    assert not goclients.is_built() and not nodeclients.is_built()
    monkeypatch.setattr(gobuild.shutil, "which", lambda name: None)
    with pytest.raises(gobuild.GoBuildError, match="'go' toolchain"):
        goclients.ensure_built()
    with pytest.raises(nodeclients.NodeClientsError, match="'node'"):
        nodeclients.ensure_built()
    # a marker holding the sources' hash: up to date, no tool needed
    goclients.build_dir().mkdir()
    (goclients.build_dir() / ".complete").write_text(goclients.BUILD.digest())
    assert goclients.ensure_built() == goclients.build_dir() / "bin"
    assert goclients.build_dir().parent == tmp_path
    nodeclients.build_dir().mkdir()
    (nodeclients.build_dir() / ".complete").write_text("stale")
    with pytest.raises(nodeclients.NodeClientsError):
        nodeclients.ensure_built()
    with pytest.raises(ValueError, match="no Go program"):
        goclients.binary("kafkajs")


def test_the_report_and_the_live_view_show_the_notifications_delivered():
    """What Alertmanager posted, as the demo shows it: one line per notification, and a row
    per notification in the report with its group and the first alert's description."""
    from types import SimpleNamespace

    from streaming.scenarios.live import LiveView
    from streaming.scenarios.report import render_html
    from streaming.stack.webhook import describe

    n = {
        "status": "firing", "receiver": "connmon-critical",
        "groupLabels": {"alertname": "ConnMonCloseWaitBuildup", "app": "orders", "cluster": "c"},
        "alerts": [{"annotations": {"summary": "Stuck: orders on web-1.", "description": "d <x>"}}],
    }  # fmt: skip
    line = describe(n)
    assert line.startswith("firing   connmon-critical")
    assert "alertname=ConnMonCloseWaitBuildup, app=orders, cluster=c  x1  Stuck: orders" in line
    hook = SimpleNamespace(notifications=lambda: [n, {**n, "status": "resolved"}])
    view = LiveView(SimpleNamespace(components=SimpleNamespace(webhook=hook)))
    shown = view.notifications()
    assert shown.splitlines()[0] == "notifications delivered (2):"
    assert shown.splitlines()[2].strip().startswith("resolved")
    page = render_html("t", {}, [], [], "", [n])
    assert "Notifications delivered by Alertmanager (1)" in page and "d &lt;x&gt;" in page
    assert "(none yet)" in LiveView(SimpleNamespace(components=None)).notifications()
