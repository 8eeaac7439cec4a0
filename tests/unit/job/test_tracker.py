"""Finding lifecycle across windows (pure Python, no Spark)."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest

from streaming.detectors.config import DetectorConfig
from streaming.job.tracker import Tracker
from streaming.schema.aggregates import Aggregate
from streaming.schema.times import epoch, iso

CFG = DetectorConfig()


def agg(minute: int, **fields: Any) -> Aggregate:
    base: dict[str, Any] = {
        "side": "client",
        "host": "web-1",
        "app": "orders",
        "broker": "2",
        "broker_id": 2,
        "window_start": f"2026-11-21T05:{minute:02d}:00.000Z",
        "window_end": f"2026-11-21T05:{minute + 1:02d}:00.000Z",
        "sockets": {"ESTABLISHED": 1},
    }
    base.update(fields)
    return Aggregate(**base)


def leak(minute: int, n: int = 3) -> Aggregate:
    return agg(minute, close_wait_count=n, close_wait_oldest_age_s=200.0)


def tracker() -> Tracker:
    return Tracker(CFG, clock=lambda a: a.window_end)


def statuses(out) -> list[tuple[str, str, str]]:
    return [(f.kind, f.status, f.window_start[11:16]) for f in out.findings]


def test_fires_once_then_republishes_only_on_change():
    t = tracker()
    assert statuses(t.process([leak(0)], {})) == [("close_wait_buildup", "firing", "05:00")]
    assert t.process([leak(0)], {}).findings == []  # same window, same evidence
    assert t.process([leak(0, n=5)], {}).findings == []  # 3 -> 5: less than double
    again = t.process([leak(0, n=6)], {}).findings  # 3 -> 6: doubled since the last record
    assert [(f.change, f.evidence["close_wait_count"]) for f in again] == [("evidence", 6)]


def test_a_held_leak_is_published_on_fire_changes_and_heartbeats_only():
    """An hour of a leak growing by one socket a minute (its oldest age by 60 s): one record
    when it fires, one per doubling of the count or the age, one per heartbeat without either,
    not one per window."""
    t = tracker()
    published = []
    for minute in range(59):
        w = agg(minute, close_wait_count=minute + 1, close_wait_oldest_age_s=60.0 * (minute + 1))
        published += t.process([w], {}).findings
    changes = [f.change for f in published]
    # count 1, 2, 4, 8 and age 60 .. 480 s double together (doubling counts from the last
    # record, heartbeats included); 20 sockets: critical
    assert changes.count("fired") == 1
    assert changes.count("severity") == 1
    assert 3 <= changes.count("evidence") <= 6
    assert len(published) <= 1 + 1 + 6 + 59 // 5  # fire + severity + doublings + heartbeats
    assert len(published) < 59 // 2
    heartbeats = [f for f in published if f.change == "heartbeat"]
    assert heartbeats, changes
    before = {f.window_end: f for f in published}
    for h in heartbeats:
        earlier = max(e for e in before if e < h.window_end)
        assert epoch(h.window_end) - epoch(earlier) >= CFG.finding_heartbeat_s
    assert {f.first_fired_at for f in published} == {"2026-11-21T05:00:00.000Z"}
    assert all(f.last_seen_at == f.window_end for f in published)


def test_a_resolved_record_says_when_the_finding_fired_and_was_last_seen():
    t = tracker()
    t.process([leak(0)], {})
    t.process([leak(1)], {})  # held, nothing new: no record
    t.process([agg(2)], {})
    done = t.process([agg(3)], {}).findings
    assert [(f.status, f.change, f.first_fired_at, f.last_seen_at) for f in done] == [
        ("resolved", "resolved", "2026-11-21T05:00:00.000Z", "2026-11-21T05:02:00.000Z")
    ]
    again = t.process([leak(4)], {}).findings  # fires anew: its own first_fired_at
    assert [(f.change, f.first_fired_at) for f in again] == [("fired", "2026-11-21T05:04:00.000Z")]


def test_a_finding_is_published_again_once_its_window_names_the_client_library():
    """A window's first rows may carry no client library; when later rows of the same window
    name it, the finding (whose advice depends on the library) is published again, once."""
    t = tracker()
    first = t.process([leak(0)], {}).findings
    assert [(f.client_library, f.client_version) for f in first] == [(None, None)]
    named = dataclasses.replace(leak(0), client_library="java", client_version="4.3.1")
    again = t.process([named], {}).findings
    assert [(f.status, f.client_library, f.client_version) for f in again] == [
        ("firing", "java", "4.3.1")
    ]
    assert t.process([named], {}).findings == []


def test_resolves_after_a_complete_window_without_the_condition():
    t = tracker()
    t.process([leak(0)], {})
    # minute 1 starts (partial) without CLOSE_WAIT, but minute 0 held: still firing
    assert t.process([agg(1)], {}).findings == []
    # minute 2: minute 1 is complete and did not hold -> resolved
    out = t.process([agg(2)], {})
    assert statuses(out) == [("close_wait_buildup", "resolved", "05:02")]
    assert out.findings[0].summary.startswith("Resolved: ")
    assert out.findings[0].key == "close_wait_buildup|client:web-1:orders||2"


def test_hysteresis_fires_after_k_windows_and_resolves_after_m_quiet_ones():
    t = Tracker(
        CFG.replace(fire_after_windows=2, resolve_after_windows=3), clock=lambda a: a.window_end
    )
    assert t.process([leak(0)], {}).findings == []  # one window is not enough
    assert t.process([agg(1)], {}).findings == []  # a gap starts the count again
    assert t.process([leak(2)], {}).findings == []
    assert statuses(t.process([leak(3)], {})) == [("close_wait_buildup", "firing", "05:03")]
    # It flaps: two quiet windows, held again, then three quiet windows.
    assert t.process([agg(4)], {}).findings == []
    assert t.process([agg(5)], {}).findings == []
    # Still the same firing finding, nothing new to say: never resolved in between.
    assert t.process([leak(6)], {}).findings == []
    assert t.process([agg(7)], {}).findings == []
    assert t.process([agg(8)], {}).findings == []
    assert statuses(t.process([agg(9)], {})) == [("close_wait_buildup", "resolved", "05:09")]


def test_hysteresis_counts_windows_the_series_did_not_produce_as_quiet():
    t = Tracker(CFG.replace(resolve_after_windows=3), clock=lambda a: a.window_end)
    t.process([leak(0)], {})
    assert t.process([agg(1)], {}).findings == []
    # minute 2 never came (the agent sent nothing for it): minutes 1, 2 and 3 are quiet
    assert statuses(t.process([agg(3)], {})) == [("close_wait_buildup", "resolved", "05:03")]


def test_hysteresis_history_survives_pruning_and_a_restore():
    cfg = CFG.replace(fire_after_windows=3, resolve_after_windows=3)
    t = Tracker(cfg, clock=lambda a: a.window_end)
    t.process([leak(0)], {})
    t.process([leak(1)], {})
    restored = Tracker(cfg, clock=lambda a: a.window_end)
    restored.load_state(json.loads(json.dumps(t.to_state())))
    assert statuses(restored.process([leak(2)], {})) == [("close_wait_buildup", "firing", "05:02")]


def _sev(out) -> list[tuple[str, str]]:
    return [(f.severity, f.change or "") for f in out.findings]


def test_severity_rises_at_once_and_falls_only_after_quiet_windows():
    """Severity has firing's hysteresis: up when it held in ``fire_after_windows`` windows,
    down once the higher level did not hold in ``resolve_after_windows`` of them."""
    t = tracker()
    assert _sev(t.process([leak(0, n=12)], {})) == [("warning", "fired")]
    assert _sev(t.process([leak(1, n=20)], {})) == [("critical", "severity")]
    assert t.process([leak(2, n=12)], {}).findings == []  # minute 1 was critical: it holds
    assert _sev(t.process([leak(3, n=12)], {})) == [("warning", "severity")]  # 2 and 3 were not


def test_severity_rises_after_k_windows_at_that_level():
    t = Tracker(CFG.replace(fire_after_windows=2), clock=lambda a: a.window_end)
    t.process([leak(0)], {})
    assert _sev(t.process([leak(1, n=25)], {})) == [("warning", "fired")]  # the lower of both
    assert _sev(t.process([leak(2, n=25)], {})) == [("critical", "severity")]


def test_a_level_reached_at_any_evaluation_of_a_window_held_there():
    """A window evaluated again as it fills: a critical count early in it counts for the
    window even if a later evaluation of the same window is below it."""
    t = tracker()
    t.process([leak(0, n=20)], {})
    assert t.process([leak(0, n=12)], {}).findings == []  # same window: no flip back
    assert t.process([leak(1, n=12)], {}).findings == []  # one window below is not enough
    assert _sev(t.process([leak(2, n=12)], {})) == [("warning", "severity")]


def test_a_state_that_named_held_kinds_only_still_loads():
    t = tracker()
    t.process([leak(0)], {})
    state = json.loads(json.dumps(t.to_state()))
    state["held"] = {s: {w: sorted(k) for w, k in ws.items()} for s, ws in state["held"].items()}
    restored = tracker()
    restored.load_state(state)
    assert restored.process([agg(1)], {}).findings == []  # minute 0 held: still firing
    assert statuses(restored.process([agg(2)], {})) == [("close_wait_buildup", "resolved", "05:02")]


def test_connmon_itself_gets_no_finding_unless_asked():
    own = leak(0)
    own.app = "connmon-agent"
    t = tracker()
    out = t.process([own], {})
    assert out.findings == [] and [a.app for a in out.aggregates] == ["connmon-agent"]
    t = Tracker(CFG.replace(include_connmon=True), clock=lambda a: a.window_end)
    assert statuses(t.process([own], {})) == [("close_wait_buildup", "firing", "05:00")]


def test_stale_series_is_resolved_by_event_time():
    t = tracker()
    t.process([leak(0)], {})
    other = agg(10, host="web-2")  # the fleet moves on; web-1 sends nothing for 10 minutes
    out = t.process([other], {})
    assert statuses(out) == [("close_wait_buildup", "resolved", "05:00")]


def test_late_update_of_an_older_window_is_history_only():
    t = tracker()
    t.process([agg(0), agg(1)], {})
    out = t.process([leak(0)], {})  # late data for minute 0
    assert out.aggregates == [] and out.findings == []


def test_aggregates_are_published_in_window_order_with_updated_at():
    t = tracker()
    out = t.process([agg(1), agg(0)], {})
    assert [a.window_start[11:16] for a in out.aggregates] == ["05:00", "05:01"]
    assert out.aggregates[-1].updated_at == "2026-11-21T05:02:00.000Z"


def test_host_level_storm_from_heartbeat_counters_only():
    t = tracker()
    out = t.process([], {("web-3", "2026-11-21T05:00:00.000Z"): 500.0})
    assert [(f.kind, f.app, f.broker, f.severity) for f in out.findings] == [
        ("connection_storm", "*", "*", "critical")
    ]
    assert out.aggregates == []  # the host-level series is not an aggregate


def test_idle_churn_uses_windows_from_earlier_batches():
    t = tracker()
    cycle = {
        "closes_after_idle": 1,
        "closes_after_idle_local": 1,
        "opens": 1,
        "reopens_after_idle": 1,
        "reopen_idle_min_s": 540.0,
        "reopen_idle_max_s": 540.0,
    }
    assert t.process([agg(0, **cycle)], {}).findings == []
    out = t.process([agg(11, **cycle)], {})
    assert statuses(out) == [("idle_churn", "firing", "05:11")]


def test_state_round_trips_through_json():
    t = tracker()
    t.process([leak(0)], {})
    state = json.loads(json.dumps(t.to_state()))
    t2 = tracker()
    t2.load_state(state)
    # the restored tracker knows the finding fired and resolves it like the original would
    a, b = t.process([agg(1)], {}), t2.process([agg(1)], {})
    assert a.findings == b.findings == []
    assert statuses(t.process([agg(2)], {})) == statuses(t2.process([agg(2)], {}))


def _workload(seed: int, minutes: int = 150) -> list[list[Aggregate]]:
    """Batches of a minute each over 12 series: leaks that come and go, idle churn, late
    updates, series silent for longer than the stale time and longer than the history kept."""
    rng = random.Random(seed)
    series = [(f"web-{h}", app) for h in range(4) for app in ("orders", "billing", "audit")]
    silent = {s: (rng.randrange(minutes), rng.choice((3, 8, 40))) for s in series}
    batches = []
    for m in range(minutes):
        batch = []
        for host, app in series:
            start, length = silent[(host, app)]
            if start <= m < start + length or rng.random() < 0.2:
                continue
            fields: dict[str, Any] = {"host": host, "app": app}
            if rng.random() < 0.3:
                fields.update(close_wait_count=rng.randint(1, 6), close_wait_oldest_age_s=90.0)
            if rng.random() < 0.2:
                fields.update(closes_after_idle=1, closes_after_idle_local=1, opens=1)
            batch.append(_at(m, **fields))
            if m > 3 and rng.random() < 0.1:  # late data for an older window
                batch.append(_at(m - rng.randint(1, 3), **fields))
        batches.append(batch)
    return batches


def _at(minute: int, **fields: Any) -> Aggregate:
    t0 = epoch("2026-11-21T05:00:00.000Z") + 60 * minute
    return agg(0, window_start=iso(t0), window_end=iso(t0 + 60), **fields)


def _copy(batch: list[Aggregate]) -> list[Aggregate]:
    return [dataclasses.replace(a) for a in batch]  # the tracker stamps what it publishes


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_restored_from_its_saved_state_it_behaves_as_if_never_stopped(seed):
    batches = _workload(seed)
    steady = tracker()
    expected = [steady.process(_copy(b), {}) for b in batches]
    assert sum(len(o.findings) for o in expected) > 50  # the workload exercises the detectors
    state = None
    for i, b in enumerate(batches):
        t = tracker()  # a restart before every batch
        if state is not None:
            t.load_state(state)
        assert t.process(_copy(b), {}) == expected[i], f"batch {i}"
        state = json.loads(json.dumps(t.to_state()))


def test_a_quiet_tracker_resolves_and_forgets_on_the_fleets_event_time():
    t = tracker()
    assert statuses(t.process([leak(0)], {})) == [("close_wait_buildup", "firing", "05:00")]
    out = t.process([], {}, fleet_end="2026-11-21T05:12:00.000Z")  # other series moved on
    assert statuses(out) == [("close_wait_buildup", "resolved", "05:00")]
    t.process([], {}, fleet_end="2026-11-21T06:00:00.000Z")
    assert (len(t.history), t.findings) == (0, {})


@pytest.mark.parametrize("seed", [4, 5])
def test_pruning_touched_series_only_matches_pruning_every_series_each_batch(seed):
    lazy, eager = tracker(), tracker()
    held = []
    for i, b in enumerate(_workload(seed)):
        assert lazy.process(_copy(b), {}) == eager.process(_copy(b), {}), f"batch {i}"
        for series in list(eager.history):
            eager._prune_series(series, eager._horizon())
        held.append(len(lazy.history))
    assert min(held[40:]) < 12  # long-silent series were forgotten on the way


def test_only_firing_findings_and_recent_series_are_remembered():
    t = tracker()
    t.process([leak(0)], {})
    t.process([agg(10, host="web-2")], {})  # web-1's finding resolves as stale
    assert list(t.findings) == []
    assert set(t.history) == {"client|web-1|orders||2", "client|web-2|orders||2"}
    t.process([_at(45, host="web-2")], {})  # 35 min later: web-1 is past the history kept
    assert set(t.history) == {"client|web-2|orders||2"}


def _second_client(minute: int, idle: float) -> Aggregate:
    return agg(
        minute,
        sockets={"ESTABLISHED": 2},
        dup_processes=1,
        dup_used_max_idle_s=idle,
        dup_used_active_idle_s=0.5,
    )


def _three_cycles(t: Tracker) -> tuple[list[tuple[str, str, str]], int]:
    """A second client's connection: idle 130-250 s (holds), used (idle 10 s), then reaped by
    its idle expiry and gone for 5 min; three times. Returns the findings and the next minute."""
    events: list[tuple[str, str, str]] = []
    minute = 0
    for _cycle in range(3):
        for idle in (130.0, 190.0, 250.0, 10.0):
            events += statuses(t.process([_second_client(minute, idle)], {}))
            minute += 1
        for _ in range(5):
            events += statuses(t.process([agg(minute)], {}))
            minute += 1
    return events, minute


def test_a_rarely_used_second_client_is_one_finding_not_a_flap():
    """One finding across the cycles, resolved once the extra connection has been absent for
    duplicate_resolve_after_s (660 s: 11 windows of 60 s)."""
    t = tracker()
    events, minute = _three_cycles(t)
    assert events[0][:2] == ("duplicate_connections", "firing")
    assert all(status == "firing" for _k, status, _w in events)  # never resolved in between
    for _ in range(11):
        events += statuses(t.process([agg(minute)], {}))
        minute += 1
    assert [e[1] for e in events][-1] == "resolved"
    assert [e[1] for e in events].count("resolved") == 1


def test_with_the_default_resolve_time_the_same_client_would_flap():
    t = Tracker(CFG.replace(duplicate_resolve_after_s=0.0), clock=lambda a: a.window_end)
    events, _minute = _three_cycles(t)
    assert [e[1] for e in events].count("resolved") == 3


def test_a_window_that_names_no_library_keeps_the_one_its_series_named():
    """Only closes or sockets of no process in a window: the library is not forgotten, so the
    finding and its advice do not flip between the library's and none (a record each time)."""
    t = tracker()
    java = {
        "client_library": "java",
        "client_version": "4.1.0",
        "client_library_evidence": "loaded",
    }
    first = agg(0, close_wait_count=3, close_wait_oldest_age_s=200.0, **java)
    fired = t.process([first], {}).findings
    assert [(f.change, f.client_library) for f in fired] == [("fired", "java")]
    quiet = agg(1, close_wait_count=3, close_wait_oldest_age_s=260.0)  # no library named
    assert t.process([quiet], {}).findings == []
    assert (quiet.client_library, quiet.client_version) == ("java", "4.1.0")
    # Also after a restore from the checkpointed state.
    restored = tracker()
    restored.load_state(json.loads(json.dumps(t.to_state())))
    later = agg(2, close_wait_count=3, close_wait_oldest_age_s=320.0)
    assert restored.process([later], {}).findings == []
    assert later.client_library == "java"


def _reaped_second_client(minute: int) -> Aggregate:
    """A second client in the process, used once every 10 min: its connection idles until the
    broker's idle reaper closes it at 540 s, and the client re-opens one at its next use."""
    phase = minute % 10
    fields: dict[str, Any] = {
        "sockets": {"ESTABLISHED": 2},
        "dup_processes": 1,
        "dup_used_max_idle_s": phase * 60.0,
        "dup_used_active_idle_s": 0.5,
    }
    if phase == 0 and minute:
        fields.update(
            opens=1,
            closes_after_idle=1,
            closes_after_idle_peer=1,
            reopens_after_idle=1,
            reopen_idle_min_s=540.0,
            reopen_idle_max_s=540.0,
            idle_at_close_max_s=540.0,
        )
    return agg(minute, **fields)


def _run(t: Tracker, minutes: int = 45) -> list:
    out = []
    for minute in range(minutes):
        out += t.process([_reaped_second_client(minute)], {}).findings
    return out


def test_an_extra_clients_idle_churn_is_one_finding_with_the_duplicate():
    records = _run(tracker())
    assert {f.kind for f in records} == {"duplicate_connections"}
    folded = [f for f in records if "idle_churn_cycles" in f.evidence]
    assert folded and folded[0].evidence["idle_churn_cycles"] >= 2
    assert "re-opened" in folded[0].summary
    assert "connections.max.idle.ms" in folded[0].recommendation
    # Without the duplicate finding the same windows are idle churn.
    alone = _run(Tracker(CFG.replace(duplicate_idle_s=1e9), clock=lambda a: a.window_end))
    assert {f.kind for f in alone} == {"idle_churn"}


def test_the_fold_survives_a_restore():
    t = tracker()
    _run(t, 21)
    restored = tracker()
    restored.load_state(json.loads(json.dumps(t.to_state())))
    later = [
        f.kind
        for minute in range(21, 45)
        for f in restored.process([_reaped_second_client(minute)], {}).findings
    ]
    assert set(later) <= {"duplicate_connections"}


def test_a_window_without_a_library_keeps_the_whole_identity_of_the_one_before():
    """A Kafka Connect worker holds several clients by design. A window whose events name no
    library carries the earlier identity forward whole: with the library but without the role
    it would be a pair the process never was, and its clients' extra connections would read as
    a duplicate."""
    t = tracker()
    named = {
        "client_library": "java",
        "client_version": "3.9.0",
        "client_library_evidence": "loaded",
        "process_role": "connect",
    }
    extra = {"dup_processes": 1, "dup_used_max_idle_s": 300.0, "dup_used_active_idle_s": 1.0}
    assert t.process([agg(0, **named)], {}).findings == []
    out = t.process([agg(1, **extra)], {})
    assert out.findings == []
    assert [tuple(getattr(a, f) for f in named) for a in out.aggregates] == [tuple(named.values())]
    # The same window named without the role is a duplicate.
    app = tracker().process([agg(1, **(named | {"process_role": None}), **extra)], {})
    assert [f.kind for f in app.findings] == ["duplicate_connections"]


def test_the_carried_identity_survives_a_restore():
    t = tracker()
    t.process([agg(0, client_library="java", client_version="3.9.0", process_role="streams")], {})
    restored = tracker()
    restored.load_state(json.loads(json.dumps(t.to_state())))
    out = restored.process([agg(1)], {})
    assert [(a.client_library, a.process_role) for a in out.aggregates] == [("java", "streams")]
