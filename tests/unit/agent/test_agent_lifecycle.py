"""Socket lifecycles fed scan sequences: open -> CLOSE_WAIT -> gone, open -> TIME_WAIT, first
scan, short-lived sockets, 4-tuple reuse, and summaries."""

from __future__ import annotations

from streaming.agent.lifecycle import Meta, SocketLifecycles
from streaming.agent.records import (
    CLOSE_WAIT,
    ESTABLISHED,
    FIN_WAIT1,
    LAST_ACK,
    SYN_SENT,
    TIME_WAIT,
    SocketRecord,
)
from streaming.schema.validate import validate

META = Meta("prod", "client", "orders", 2, "kafka-2:9092", pid=100, comm="java")


def rec(state: int, sport: int = 40000, inode: int = 500, idle_ms: int | None = 1000):
    return SocketRecord(2, state, "10.0.0.1", sport, "10.0.0.2", 9092, inode, 0, idle_ms, idle_ms)


def kinds(events: list[dict]) -> list[tuple]:
    return [(e["kind"], e["state"]) for e in events]


def _valid(events: list[dict]) -> None:
    for e in events:
        full = {
            "schema": 1,
            "event_time": "2026-11-21T04:00:00.000Z",
            "host": "h",
            "agent_id": "a",
            "seq": 0,
            **e,
        }
        assert validate(full).reason is None, e


def test_time_wait_at_agent_start_is_not_a_short_lived_close() -> None:
    t = SocketLifecycles()
    ev = t.update(0.0, [(rec(TIME_WAIT, inode=0, idle_ms=None), META)])
    assert [(e["kind"], e["open_reason"]) for e in ev] == [("opened", "initial")]
    (s,) = t.summaries(0.0, 15.0)
    assert (s["state"], s["count"]) == ("TIME_WAIT", 1)  # counted while it is there
    assert t.update(60.0, []) == []  # and its end is no close event


def test_first_scan_reports_initial_then_nothing_while_unchanged() -> None:
    t = SocketLifecycles()
    ev = t.update(0.0, [(rec(ESTABLISHED), META)])
    assert kinds(ev) == [("opened", "ESTABLISHED")]
    assert ev[0]["open_reason"] == "initial"
    _valid(ev)
    assert t.update(5.0, [(rec(ESTABLISHED), META)]) == []
    ev = t.update(10.0, [(rec(ESTABLISHED), META), (rec(ESTABLISHED, sport=40001), META)])
    assert kinds(ev) == [("opened", "ESTABLISHED")] and ev[0]["open_reason"] == "new"


def test_open_close_wait_gone_is_closed_by_peer_with_ages() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED, idle_ms=500), META)])
    ev = t.update(5.0, [(rec(CLOSE_WAIT, idle_ms=5500), META)])
    assert kinds(ev) == [("transition", "CLOSE_WAIT")]
    assert ev[0]["prev_state"] == "ESTABLISHED" and ev[0]["closed_by"] == "peer"
    assert ev[0]["state_age_s"] == 0.0
    t.update(65.0, [(rec(CLOSE_WAIT), META)])
    summary = [s for s in t.summaries(65.0, 15.0) if s["state"] == "CLOSE_WAIT"][0]
    assert summary["count"] == 1 and summary["oldest_state_age_s"] == 60.0
    ev = t.update(70.0, [(rec(LAST_ACK), META)])
    assert kinds(ev) == [("transition", "LAST_ACK")]
    ev = t.update(75.0, [])
    assert kinds(ev) == [("closed", "LAST_ACK")]
    closed = ev[0]
    assert closed["closed_by"] == "peer"
    assert closed["lifetime_s"] == 5.0  # first seen at 0, close began (CLOSE_WAIT) at 5
    # idle at close: 0.5 s sampled at t=0 while ESTABLISHED, plus 5 s elapsed
    assert closed["idle_at_close_s"] == 5.5
    assert closed["app"] == "orders" and closed["broker_id"] == 2
    _valid(ev)


def test_open_time_wait_keeps_tuple_and_is_closed_by_local() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED), META)])
    tw_meta = Meta("prod", "client", "unknown", 2, "kafka-2:9092")  # no pid in TIME_WAIT
    ev = t.update(540.0, [(rec(TIME_WAIT, inode=0, idle_ms=None), tw_meta)])
    assert kinds(ev) == [("transition", "TIME_WAIT"), ("closed", "TIME_WAIT")]
    closed = ev[1]
    assert closed["closed_by"] == "local" and closed["lifetime_s"] == 540.0
    assert closed["app"] == "orders" and closed["pid"] == 100  # attribution kept from before
    assert closed["idle_at_close_s"] == 541.0
    # The TIME_WAIT remnant stays in summaries, and its disappearance emits nothing more.
    assert t.update(545.0, [(rec(TIME_WAIT, inode=0, idle_ms=None), tw_meta)]) == []
    assert t.update(600.0, []) == []
    _valid(ev)


def test_fin_wait_path_is_local() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED), META)])
    ev = t.update(5.0, [(rec(FIN_WAIT1), META)])
    assert ev[0]["closed_by"] == "local"
    ev = t.update(10.0, [])
    assert ev[0]["kind"] == "closed" and ev[0]["closed_by"] == "local"


def test_vanished_from_established_without_time_wait_is_closed_by_peer() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED), META)])
    (closed,) = t.update(5.0, [])
    assert closed["kind"] == "closed" and closed["closed_by"] == "peer"
    assert closed["lifetime_s"] == 5.0


def test_vanished_from_syn_sent_is_unknown() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(SYN_SENT), META)])
    (closed,) = t.update(5.0, [])
    assert closed["kind"] == "closed" and closed["closed_by"] == "unknown"


def test_short_lived_sockets_after_start_are_opened_new_and_closed() -> None:
    t = SocketLifecycles()
    t.update(0.0, [])
    ev = t.update(
        5.0, [(rec(TIME_WAIT, inode=0, idle_ms=None), META), (rec(SYN_SENT, 40001), META)]
    )
    assert kinds(ev) == [("opened", "TIME_WAIT"), ("closed", "TIME_WAIT"), ("opened", "SYN_SENT")]
    assert ev[0]["open_reason"] == "new"
    assert ev[1]["lifetime_s"] == 0.0 and ev[1]["closed_by"] == "local"
    ev = t.update(6.0, [])
    assert kinds(ev) == [("closed", "SYN_SENT")] and ev[0]["lifetime_s"] == 1.0
    _valid(ev)


def test_four_tuple_reuse_is_a_new_socket() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED, inode=1), META)])
    ev = t.update(5.0, [(rec(ESTABLISHED, inode=2), META)])
    assert [(e["kind"], e["inode"]) for e in ev] == [("closed", 1), ("opened", 2)]


def test_summaries_count_duplicates_and_report_drops() -> None:
    t = SocketLifecycles()
    other = Meta("prod", "client", "orders", 2, "kafka-2:9092", pid=200)
    t.update(
        0.0,
        [
            (rec(ESTABLISHED, 40000, 1, idle_ms=100), META),
            (rec(ESTABLISHED, 40001, 2, idle_ms=300000), META),
            (rec(ESTABLISHED, 40002, 3, idle_ms=50), other),
        ],
    )
    (s,) = t.summaries(0.0, 15.0)
    assert (s["count"], s["processes"], s["max_per_process"], s["dup_processes"]) == (3, 2, 2, 1)
    assert s["dup_max_idle_s"] == 300.0 and s["dup_conn"] == "10.0.0.1:40001->10.0.0.2:9092"
    assert s["max_idle_s"] == 300.0 and s["broker_id"] == 2
    t.update(5.0, [])
    (gone,) = t.summaries(5.0, 15.0)
    assert gone["count"] == 0 and gone["state"] == "ESTABLISHED" and gone["broker_id"] == 2
    assert t.summaries(10.0, 15.0) == []  # reported once, then forgotten


def test_close_wait_is_dated_by_the_peers_fin() -> None:
    t = SocketLifecycles()
    first = rec(CLOSE_WAIT, idle_ms=900_000)
    first.last_ack_recv_ms = 300_000  # FIN arrived 5 minutes before the agent started
    (ev,) = t.update(1000.0, [(first, META)])
    assert ev["open_reason"] == "initial" and ev["state_age_s"] == 300.0
    (s,) = t.summaries(1010.0, 15.0)
    assert s["oldest_state_age_s"] == 310.0
    # Between scans: the FIN time counts, but never before the previous scan.
    t2 = SocketLifecycles()
    t2.update(0.0, [(rec(ESTABLISHED, idle_ms=100), META)])
    cw = rec(CLOSE_WAIT, idle_ms=4100)
    cw.last_ack_recv_ms = 3000
    (tr,) = t2.update(5.0, [(cw, META)])
    assert tr["state_age_s"] == 3.0
    cw2 = rec(CLOSE_WAIT, idle_ms=99_000)
    cw2.last_ack_recv_ms = 99_000
    t3 = SocketLifecycles()
    t3.update(0.0, [(rec(ESTABLISHED, idle_ms=100), META)])
    (tr,) = t3.update(5.0, [(cw2, META)])
    assert tr["state_age_s"] == 5.0
    (closed,) = t2.update(10.0, [])
    assert closed["lifetime_s"] == 2.0  # close began at t=2 (the FIN)
    assert closed["idle_at_close_s"] == 2.1


def test_summaries_tell_unused_extras_from_used_ones() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED, 40000, 1, idle_ms=100), META)])
    # at 80 s: a second connection opened at 20 s that carried data until 40 s (used), and
    # a third opened at 20 s that has been idle since (unused: a bootstrap leftover)
    t.update(
        20.0,
        [(rec(ESTABLISHED, 40000, 1, idle_ms=100), META)]
        + [(rec(ESTABLISHED, p, i, idle_ms=0), META) for p, i in ((40001, 2), (40002, 3))],
    )
    now = [
        (rec(ESTABLISHED, 40000, 1, idle_ms=200), META),
        (rec(ESTABLISHED, 40001, 2, idle_ms=40_000), META),
        (rec(ESTABLISHED, 40002, 3, idle_ms=60_000), META),
    ]
    t.update(80.0, now)
    (s,) = t.summaries(80.0, 15.0)
    assert (s["dup_processes"], s["dup_unused_processes"]) == (1, 1)
    assert (s["dup_used_max_idle_s"], s["dup_used_active_idle_s"]) == (40.0, 0.2)
    assert s["dup_max_idle_s"] == 60.0  # the idlest extra of all, unused or not
    _valid([s])


def test_a_consumer_with_busy_coordinator_connection_has_no_idle_used_extra() -> None:
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED, p, p, idle_ms=100), META) for p in (40000, 40001)])
    t.update(60.0, [(rec(ESTABLISHED, p, p, idle_ms=900), META) for p in (40000, 40001)])
    (s,) = t.summaries(60.0, 15.0)
    assert s["dup_used_max_idle_s"] == 0.9 and s["dup_unused_processes"] == 0


def test_a_reopen_by_the_same_process_carries_the_closed_connections_idle() -> None:
    t = SocketLifecycles()
    other = Meta("prod", "client", "orders", 2, "kafka-2:9092", pid=200)
    t.update(0.0, [(rec(ESTABLISHED, 40000, 1, idle_ms=0), META)])
    t.update(540.0, [(rec(ESTABLISHED, 40000, 1, idle_ms=540_000), META)])
    # the client's idle expiry closes it (TIME_WAIT: closed locally)
    (tr, closed) = t.update(545.0, [(rec(TIME_WAIT, 40000, 0, idle_ms=None), META)])
    assert closed["kind"] == "closed" and closed["idle_at_close_s"] == 545.0
    assert "broker_drop" not in closed
    # another process opens first: not a re-open of this client's connection
    (ev,) = t.update(600.0, [(rec(ESTABLISHED, 40009, 9, idle_ms=0), other)])
    assert "reopen_idle_s" not in ev
    (ev,) = t.update(
        660.0,
        [
            (rec(ESTABLISHED, 40009, 9, idle_ms=0), other),
            (rec(ESTABLISHED, 40001, 2, idle_ms=0), META),
        ],
    )
    assert ev["reopen_idle_s"] == 545.0 and "reopen_after_drop" not in ev
    _valid([closed, ev])
    # paired once: the next connection is not a re-open
    (ev,) = t.update(
        670.0,
        [
            (rec(ESTABLISHED, 40009, 9, idle_ms=0), other),
            (rec(ESTABLISHED, 40001, 2, idle_ms=0), META),
            (rec(ESTABLISHED, 40002, 3, idle_ms=0), META),
        ],
    )
    assert "reopen_idle_s" not in ev


BUSY = Meta("prod", "client", "payments", 2, "kafka-2:9092", pid=300)


def _idle_next_to_busy(idle_at: float) -> SocketLifecycles:
    """orders' connection idle since 0 next to payments' busy one, both to broker 2."""
    t = SocketLifecycles()
    t.update(
        0.0,
        [(rec(ESTABLISHED, 40000, 1, idle_ms=0), META)]
        + [(rec(ESTABLISHED, 40005, 5, idle_ms=0), BUSY)],
    )
    later = [(rec(ESTABLISHED, 40000, 1, idle_ms=int(idle_at * 1000)), META)]
    t.update(idle_at, later + [(rec(ESTABLISHED, 40005, 5, idle_ms=100), BUSY)])
    return t


def test_a_broker_dropping_busy_connections_marks_the_idle_ones_closed_with_them() -> None:
    t = _idle_next_to_busy(300.0)
    # the broker restarts: both vanish from ESTABLISHED (closed by the peer) in one scan
    closed = t.update(305.0, [])
    assert sorted((e["app"], e["closed_by"], e.get("broker_drop")) for e in closed) == [
        ("orders", "peer", True),
        ("payments", "peer", True),
    ]
    (ev,) = t.update(320.0, [(rec(ESTABLISHED, 40001, 2, idle_ms=0), META)])
    assert ev["reopen_idle_s"] == 305.0 and ev["reopen_after_drop"] is True
    _valid(closed + [ev])


def test_an_idle_connection_closed_by_the_broker_alone_is_not_a_drop() -> None:
    t = _idle_next_to_busy(600.0)
    (closed,) = t.update(605.0, [(rec(ESTABLISHED, 40005, 5, idle_ms=100), BUSY)])
    assert closed["closed_by"] == "peer" and "broker_drop" not in closed
    # the busy one is dropped two scans later: too far apart to be one event
    t.update(610.0, [(rec(ESTABLISHED, 40005, 5, idle_ms=100), BUSY)])
    (late,) = t.update(615.0, [])
    assert late.get("broker_drop") is True  # a busy connection dropped is its own witness
    (ev,) = t.update(620.0, [(rec(ESTABLISHED, 40001, 2, idle_ms=0), META)])
    assert ev["reopen_idle_s"] == 605.0 and "reopen_after_drop" not in ev


def test_an_extra_that_reopens_a_lost_connection_is_a_used_one() -> None:
    """A rarely used second client: its connection carries data only when it opens, is reaped
    by its idle expiry, and comes back at the next use. Not a bootstrap leftover."""
    t = SocketLifecycles()
    t.update(0.0, [(rec(ESTABLISHED, 40000, 1, idle_ms=0), META)])
    t.update(
        5.0,
        [
            (rec(ESTABLISHED, 40000, 1, idle_ms=0), META),
            (rec(ESTABLISHED, 40001, 2, idle_ms=0), META),
        ],
    )
    t.update(
        30.0,
        [
            (rec(ESTABLISHED, 40000, 1, idle_ms=100), META),
            (rec(ESTABLISHED, 40001, 2, idle_ms=25_000), META),
        ],
    )
    (s,) = t.summaries(30.0, 15.0)
    assert (s["dup_unused_processes"], s["dup_used_max_idle_s"]) == (1, None)  # first sight
    t.update(
        35.0,
        [
            (rec(ESTABLISHED, 40000, 1, idle_ms=100), META),
            (rec(TIME_WAIT, 40001, 0, idle_ms=None), META),
        ],
    )
    t.update(
        60.0,
        [
            (rec(ESTABLISHED, 40000, 1, idle_ms=100), META),
            (rec(ESTABLISHED, 40002, 3, idle_ms=0), META),
        ],
    )
    t.update(
        85.0,
        [
            (rec(ESTABLISHED, 40000, 1, idle_ms=100), META),
            (rec(ESTABLISHED, 40002, 3, idle_ms=25_000), META),
        ],
    )
    est = [x for x in t.summaries(85.0, 15.0) if x["state"] == "ESTABLISHED"]
    assert (est[0]["dup_unused_processes"], est[0]["dup_used_max_idle_s"]) == (0, 25.0)


def test_events_and_summaries_say_how_the_library_is_known() -> None:
    known = Meta(
        "prod", "client", "orders", 2, "kafka-2:9092", pid=300,
        client_library="kafka-python", client_version="2.0.2",
        client_library_evidence="installed",
    )  # fmt: skip
    t = SocketLifecycles()
    (ev,) = t.update(0.0, [(rec(ESTABLISHED, 40010, 7), known)])
    assert ev["client_library_evidence"] == "installed"
    _valid([ev])
    (s,) = t.summaries(0.0, 15.0)
    lib = (s["client_library"], s["client_version"], s["client_library_evidence"])
    assert lib == ("kafka-python", "2.0.2", "installed")


def test_a_group_split_between_two_versions_is_named_by_the_newer() -> None:
    """A rolling upgrade: one process each at 2.9.0 and 2.10.0, a tie of votes."""
    metas = [
        Meta(
            "prod",
            "client",
            "orders",
            2,
            "kafka-2:9092",
            pid=pid,
            client_library="librdkafka",
            client_version=version,
            client_library_evidence="loaded",
        )  # fmt: skip
        for pid, version in ((300, "2.9.0"), (301, "2.10.0"))
    ]
    for order in (metas, metas[::-1]):
        t = SocketLifecycles()
        t.update(0.0, [(rec(ESTABLISHED, 40020 + i, 7 + i), m) for i, m in enumerate(order)])
        (s,) = t.summaries(0.0, 15.0)
        assert (s["client_library"], s["client_version"]) == ("librdkafka", "2.10.0")


def _three_processes() -> SocketLifecycles:
    """One group: pid 100 (META) with two sockets, pids 200 and 300 with one each."""
    t = SocketLifecycles()
    other = Meta("prod", "client", "orders", 2, "kafka-2:9092", pid=200)
    third = Meta("prod", "client", "orders", 2, "kafka-2:9092", pid=300)
    t.update(
        0.0,
        [
            (rec(ESTABLISHED, 40000, 1), META),
            (rec(ESTABLISHED, 40001, 2), META),
            (rec(ESTABLISHED, 40002, 3), other),
            (rec(ESTABLISHED, 40003, 4), third),
        ],
    )
    return t


def test_summaries_count_the_groups_paused_processes() -> None:
    t = _three_processes()
    asked: list[int] = []

    def how(pid: int) -> str | None:
        asked.append(pid)
        return {100: "stopped", 200: "frozen"}.get(pid)

    (s,) = t.summaries(0.0, 15.0, how)
    assert (s["paused_processes"], s["paused_how"]) == (2, "stopped")
    assert sorted(asked) == [100, 200, 300]  # once per process, not per socket
    _valid([s])
    (running,) = t.summaries(5.0, 15.0, lambda pid: None)
    assert running["paused_processes"] is None and running["paused_how"] is None


def test_a_summary_carries_the_fds_of_its_process_nearest_its_limit() -> None:
    t = _three_processes()
    asked: list[int] = []
    # pid 100 has the most open, pid 200 the least left, pid 300 the highest share in use.
    usage = {100: (3000, 65536), 200: (900, 1024), 300: (230, 256)}

    def fds(pid: int) -> tuple[int, int] | None:
        asked.append(pid)
        return usage.get(pid)

    (s,) = t.summaries(0.0, 15.0, fds=fds)
    assert (s["fds_open"], s["fds_limit"]) == (230, 256)
    assert sorted(asked) == [100, 200, 300]
    _valid([s])
    (unread,) = t.summaries(5.0, 15.0, fds=lambda pid: None)
    assert unread["fds_open"] is None and unread["fds_limit"] is None


def test_a_summary_names_the_role_of_its_processes() -> None:
    t = SocketLifecycles()
    broker = Meta(
        "prod", "client", "kafka-broker", 2, "kafka-2:9092", pid=7, client_library="java",
        process_role="broker",
    )  # fmt: skip
    t.update(0.0, [(rec(ESTABLISHED, 40000, 1), broker), (rec(ESTABLISHED, 40001, 2), broker)])
    (s,) = t.summaries(0.0, 15.0)
    assert s["process_role"] == "broker"
    _valid([s])
    app = SocketLifecycles()
    app.update(0.0, [(rec(ESTABLISHED, 40000, 1), META)])
    assert app.summaries(0.0, 15.0)[0]["process_role"] is None
