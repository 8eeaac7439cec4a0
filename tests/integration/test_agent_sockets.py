"""The agent against real sockets on 127.0.0.1 (no Kafka needed): a real CLOSE_WAIT (the
server closes, the client keeps its socket) and a real TIME_WAIT (the client closes first),
seen from both ends: a listener configured as a broker endpoint and as a listener port."""

from __future__ import annotations

import os
import re
import socket
import sys
import time

from streaming.agent import config
from streaming.agent.metrics import AgentMetrics
from streaming.agent.runner import Agent, make_refresher
from streaming.schema.validate import validate


class ListSink:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def send(self, e: dict) -> None:
        self.events.append(e)

    def pump(self) -> None:
        pass


def _agent(port: int) -> tuple[Agent, ListSink, AgentMetrics]:
    cfg = config.build(
        {
            "clusters": [
                {"name": "lo", "endpoints": [f"7@127.0.0.1:{port}"], "listener_ports": [port]}
            ],
            # this interpreter, whatever command line started it
            "apps": [{"match": re.escape(sys.executable), "name": "agent-it"}],
            "summary_interval_s": 3600,
            "host": "it-host",
        },
        env={},
    )
    metrics = AgentMetrics()
    sink = ListSink()
    return Agent(cfg, sink, metrics, make_refresher(cfg, metrics)), sink, metrics


def _by_conn(events: list[dict], conn: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["state"]) for e in events if e.get("conn") == conn]


def test_close_wait_and_time_wait_from_both_sides() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    agent, sink, metrics = _agent(port)
    try:
        cw_client = socket.create_connection(("127.0.0.1", port))
        cw_server, _ = srv.accept()
        cw_client.sendall(b"ping")
        cw_server.recv(4)
        tw_client = socket.create_connection(("127.0.0.1", port))
        tw_server, _ = srv.accept()
        cw_conn = f"127.0.0.1:{cw_client.getsockname()[1]}->127.0.0.1:{port}"
        tw_conn = f"127.0.0.1:{tw_client.getsockname()[1]}->127.0.0.1:{port}"
        broker_conn = f"127.0.0.1:{port}->127.0.0.1:{cw_client.getsockname()[1]}"

        agent.scan()  # first scan: everything "initial"
        opened = [e for e in sink.events if e["kind"] == "opened" and e["conn"] == cw_conn]
        assert opened and opened[0]["open_reason"] == "initial"
        assert opened[0]["pid"] == os.getpid() and opened[0]["app"] == "agent-it"
        assert opened[0]["broker_id"] == 7 and opened[0]["side"] == "client"
        assert opened[0]["bytes_sent"] >= 4

        cw_server.close()  # the "broker" closes: the client's socket goes to CLOSE_WAIT
        tw_client.close()  # this client closes first ...
        time.sleep(0.05)
        tw_server.close()  # ... and once the peer closes too, it sits in TIME_WAIT
        time.sleep(0.2)
        n = len(sink.events)
        agent.scan()
        new = sink.events[n:]
        assert ("transition", "CLOSE_WAIT") in _by_conn(new, cw_conn)
        cw = next(e for e in new if e.get("conn") == cw_conn)
        assert cw["closed_by"] == "peer" and cw["prev_state"] == "ESTABLISHED"
        assert _by_conn(new, tw_conn) == [("transition", "TIME_WAIT"), ("closed", "TIME_WAIT")]
        tw_closed = [e for e in new if e.get("conn") == tw_conn][-1]
        assert tw_closed["closed_by"] == "local" and tw_closed["app"] == "agent-it"
        assert tw_closed["inode"] == 0 and tw_closed["lifetime_s"] > 0
        # The listener's side of the CLOSE_WAIT pair: a broker-side socket that closed first.
        b = next(e for e in new if e.get("conn") == broker_conn)
        assert b["side"] == "broker" and b["app"] == "kafka-broker" and b["closed_by"] == "local"
        assert b["peer_host"] == "127.0.0.1" and b["broker_id"] == 7

        time.sleep(1.5)
        n = len(sink.events)
        agent.scan(force_summary=True)
        summaries = [e for e in sink.events[n:] if e["kind"] == "summary"]
        cw_sum = next(s for s in summaries if s["state"] == "CLOSE_WAIT" and s["side"] == "client")
        assert cw_sum["count"] == 1 and cw_sum["oldest_state_age_s"] >= 1.5
        assert cw_sum["app"] == "agent-it" and cw_sum["processes"] == 1
        assert (
            metrics.registry.get_sample_value(
                "connmon_agent_sockets", {"state": "CLOSE_WAIT", "side": "client"}
            )
            == 1
        )

        cw_client.close()  # the app finally closes: LAST_ACK, then gone
        time.sleep(0.2)
        n = len(sink.events)
        agent.scan()
        closed = [e for e in sink.events[n:] if e.get("conn") == cw_conn and e["kind"] == "closed"]
        assert len(closed) == 1
        assert closed[0]["closed_by"] == "peer" and closed[0]["lifetime_s"] >= 0
        assert closed[0]["state_age_s"] >= 0
        problems = [(e["kind"], validate(e).detail) for e in sink.events if validate(e).reason]
        assert problems == []
        assert [e["seq"] for e in sink.events] == list(range(len(sink.events)))
    finally:
        srv.close()


def test_kernel_port_filter_returns_exactly_the_matching_sockets() -> None:
    from streaming.agent import netlink

    listeners, conns = [], []
    try:
        for _ in range(4):
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen()
            listeners.append(srv)
            c = socket.create_connection(srv.getsockname())
            a, _ = srv.accept()
            conns += [c, a]
        wanted = [listeners[0].getsockname()[1], listeners[2].getsockname()[1]]
        # Unrelated ports in the filter too: 20 tests and 19 JMPs in the bytecode.
        got = netlink.dump(wanted + list(range(2, 20)))
        tuples = {(r.sport, r.dport) for r in got if r.src == "127.0.0.1"}
        expected = set()
        for s in conns:
            lp, rp = s.getsockname()[1], s.getpeername()[1]
            if lp in wanted or rp in wanted:
                expected.add((lp, rp))
        assert len(expected) == 4
        assert expected <= tuples
        assert all(sp in wanted or dp in wanted or sp < 20 or dp < 20 for sp, dp in tuples)
    finally:
        for s in conns + listeners:
            s.close()


def test_one_walk_for_both_families_returns_what_two_requests_do() -> None:
    from streaming.agent import netlink

    listeners, conns = [], []
    try:
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            srv = socket.socket(family)
            srv.bind((host, 0))
            srv.listen()
            listeners.append(srv)
            c = socket.create_connection(srv.getsockname()[:2])
            a, _ = srv.accept()
            conns += [c, a]
        ports = [srv.getsockname()[1] for srv in listeners]
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, netlink.NETLINK_SOCK_DIAG) as nl:
            nl.sendall(netlink.build_request_all(ports))
            one: list = []
            while not netlink.parse_into(nl.recv(1 << 16), one):
                pass
        per_family = netlink.dump(ports, families=(socket.AF_INET,)) + netlink.dump(
            ports, families=(socket.AF_INET6,)
        )

        def view(recs: list) -> set:
            return {(r.family, r.src, r.sport, r.dst, r.dport, r.inode) for r in recs}

        assert view(one) == view(per_family)
        assert {r.family for r in one} == {socket.AF_INET, socket.AF_INET6}
        assert len([r for r in one if r.sport in ports or r.dport in ports]) == 4
        assert all(r.idle_ms is not None for r in one)  # tcp_info came along
    finally:
        for s in conns + listeners:
            s.close()


def test_proc_collector_sees_close_wait_without_idle_times() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cfg = config.build(
        {
            "clusters": [{"name": "lo", "endpoints": [f"127.0.0.1:{port}"]}],
            "collector": "proc",
            "host": "it-host",
        },
        env={},
    )
    metrics = AgentMetrics()
    sink = ListSink()
    agent = Agent(cfg, sink, metrics, make_refresher(cfg, metrics))
    c = socket.create_connection(("127.0.0.1", port))
    a, _ = srv.accept()
    try:
        a.close()
        time.sleep(0.2)
        agent.scan(force_summary=True)
        conn = f"127.0.0.1:{c.getsockname()[1]}->127.0.0.1:{port}"
        (ev,) = [e for e in sink.events if e.get("conn") == conn]
        assert ev["state"] == "CLOSE_WAIT" and ev["pid"] == os.getpid()
        assert "idle_s" not in ev and "broker_id" not in ev  # no tcp_info; endpoint has no id
        assert ev["broker_endpoint"] == f"127.0.0.1:{port}"
        hb = sink.events[-1]
        assert hb["kind"] == "heartbeat" and hb["collector"] == "proc"
        assert (
            metrics.registry.get_sample_value("connmon_agent_collector_info", {"collector": "proc"})
            == 1
        )
    finally:
        c.close()
        srv.close()
