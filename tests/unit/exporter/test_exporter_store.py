"""At the series limit the store keeps findings and their series, then the newest quiet series
by event time, whatever the order."""

from __future__ import annotations

import random

from streaming.exporter.consumer import handle
from streaming.exporter.samples import NOW, aggregate, finding, status
from streaming.exporter.store import Store
from streaming.schema.times import iso


def _feed(store: Store, ends: list[int]) -> None:
    """Series ``h<i>`` with window end NOW - 300 + i, in the order given."""
    for i in ends:
        handle(
            store, "aggregates", f"k{i}".encode(), aggregate(end=NOW - 300 + i, host=f"h{i}"), "x"
        )


def _hosts(store: Store) -> set[str]:
    return {a.labels[1] for a in store.snapshot().aggregates}


def test_a_replay_oldest_first_keeps_the_newest_series(clock) -> None:
    store = Store(clock=clock, series_limit=10, staleness_s=600)
    _feed(store, list(range(30)))
    assert _hosts(store) == {f"h{i}" for i in range(20, 30)}
    assert store.snapshot().dropped == 20


def test_any_arrival_order_keeps_the_same_newest_series(clock) -> None:
    for seed in range(5):
        store = Store(clock=clock, series_limit=10, staleness_s=600)
        ends = list(range(30))
        random.Random(seed).shuffle(ends)
        _feed(store, ends)
        assert _hosts(store) == {f"h{i}" for i in range(20, 30)}, seed
        assert store.snapshot().dropped == 20


def test_an_older_series_is_refused_at_the_limit(clock) -> None:
    store = Store(clock=clock, series_limit=10, staleness_s=600)
    _feed(store, list(range(29, -1, -1)))  # newest first
    assert _hosts(store) == {f"h{i}" for i in range(20, 30)}
    assert store.snapshot().dropped == 20


def test_held_series_keep_updating_and_stay_newest(clock) -> None:
    store = Store(clock=clock, series_limit=3, staleness_s=600)
    _feed(store, [0, 1, 2])
    handle(store, "aggregates", b"k0", aggregate(end=NOW, host="h0"), "x")  # h0 is now newest
    _feed(store, [3])  # replaces h1, the oldest
    assert _hosts(store) == {"h0", "h2", "h3"}
    assert store.snapshot().dropped == 1


def test_stale_entries_make_room_without_a_drop(clock) -> None:
    store = Store(clock=clock, series_limit=3, staleness_s=145)
    _feed(store, [250, 260, 270])
    clock.t += 100  # h250 is now 150 s old: stale; h260 140 s
    _feed(store, [290])
    assert _hosts(store) == {"h260", "h270", "h290"}
    snap = store.snapshot()
    assert (snap.dropped, snap.expired) == (0, 1)


def test_findings_compete_by_update_time_and_job_status_is_always_kept(clock) -> None:
    store = Store(clock=clock, series_limit=3, staleness_s=600)
    _feed(store, [0, 1, 2])
    handle(store, "findings", b"f", finding(updated=NOW - 1, host="h9"), "x")  # replaces h0
    handle(store, "job_status", b"j", status(), "x")  # replaces h1, older than the finding
    snap = store.snapshot()
    assert {a.labels[1] for a in snap.aggregates} == {"h2"}
    assert [f.labels[1] for f in snap.findings] == ["h9"]
    assert len(snap.statuses) == 1
    _feed(store, [3, 4, 5])  # series never replace the job status
    assert len(store.snapshot().statuses) == 1


def test_tombstones_follow_replaced_series(clock) -> None:
    store = Store(clock=clock, series_limit=2, staleness_s=600)
    _feed(store, [0, 1, 2])  # h2 replaces h0
    handle(store, "aggregates", b"k0", None, "x")  # h0's tombstone: h0 is gone already
    assert _hosts(store) == {"h1", "h2"}
    handle(store, "aggregates", b"k2", None, "x")
    assert _hosts(store) == {"h1"}
    assert store._by_msg_key == {("aggregates", b"k1"): store.snapshot().aggregates[0].labels}


def test_bookkeeping_stays_bounded_under_updates(clock) -> None:
    store = Store(clock=clock, series_limit=10, staleness_s=600)
    for step in range(2000):
        i = step % 5
        handle(
            store,
            "aggregates",
            f"k{i}".encode(),
            aggregate(end=NOW - 300 + step / 10, host=f"h{i}"),
            "x",
        )
    assert len(store._by_time["aggregates"]._heap) <= 2 * 5 + 65
    assert len(store._by_msg_key) == len(store._msg_key_of) == 5
    clock.t += 1000
    assert store.snapshot().aggregates == []
    assert store._by_msg_key == {} and store._msg_key_of == {}


def test_versions_change_with_contents_only(clock) -> None:
    store = Store(clock=clock, staleness_s=600)
    _feed(store, [0])
    a = store.snapshot()
    handle(store, "job_status", b"j", status(), "x")
    b = store.snapshot()
    assert (a.aggregates_version, a.findings_version) == (b.aggregates_version, b.findings_version)
    _feed(store, [1])
    handle(store, "findings", b"f", finding(), "x")
    c = store.snapshot()
    assert c.aggregates_version != b.aggregates_version
    assert c.findings_version != b.findings_version
    assert Store().snapshot().aggregates_version != c.aggregates_version  # unique per store


def test_findings_fired_since_start_are_counted_once_by_kind_and_severity(clock) -> None:
    start = clock.t
    store = Store(clock=clock)
    fired = {"change": "fired", "first_fired_at": iso(start - 600)}
    # Read from the beginning at start: a finding that fired before is not counted again.
    handle(store, "findings", b"a", finding(updated=start - 600, **fired), "x")
    clock.t += 10
    handle(store, "findings", b"b", finding(updated=clock.t, host="web-2", **fired), "x")
    # The same firing again (a batch the job ran twice), a heartbeat, the resolution: not fires.
    handle(store, "findings", b"b", finding(updated=clock.t + 1, host="web-2", **fired), "x")
    beat = {"change": "heartbeat", "first_fired_at": fired["first_fired_at"]}
    handle(store, "findings", b"b", finding(updated=clock.t + 2, host="web-2", **beat), "x")
    done = {"change": "resolved", "status": "resolved"}
    handle(store, "findings", b"b", finding(updated=clock.t + 3, host="web-2", **done), "x")
    # Fired and resolved between two scrapes: counted though never active in a snapshot.
    again = {"change": "fired", "first_fired_at": iso(clock.t), "severity": "warning"}
    handle(store, "findings", b"b", finding(updated=clock.t + 4, host="web-2", **again), "x")
    handle(store, "findings", b"b", finding(updated=clock.t + 5, host="web-2", **done), "x")
    # A kind this version does not know (a newer job's, or garbage): one bounded label value.
    for i in range(3):
        odd = {"change": "fired", "first_fired_at": iso(clock.t), "kind": f"new_kind_{i}"}
        handle(store, "findings", f"n{i}".encode(), finding(updated=clock.t, **odd), "x")
    snap = store.snapshot()
    assert snap.fired == {
        ("close_wait_buildup", "critical"): 1,
        ("close_wait_buildup", "warning"): 1,
        ("other", "critical"): 3,
    }
    assert sorted(f.kind for f in snap.findings) == [
        "close_wait_buildup", "new_kind_0", "new_kind_1", "new_kind_2"
    ]  # fmt: skip


def test_at_the_limit_a_quiet_firing_finding_outlives_newer_series(clock) -> None:
    """A firing finding is written again only on change or heartbeat (every 300 s), so it is
    older than the aggregates written every window; what goes stale first makes way."""
    store = Store(clock=clock, series_limit=3, staleness_s=600, finding_staleness_s=1800)
    handle(store, "findings", b"f", finding(updated=clock.t - 400, host="quiet"), "x")
    _feed(store, [0, 1, 30])  # newer than the finding; h0 goes stale first
    snap = store.snapshot()
    assert [f.labels[1] for f in snap.findings] == ["quiet"]
    assert _hosts(store) == {"h1", "h30"}
    assert snap.dropped == 1


def test_at_the_limit_a_series_with_a_firing_finding_is_always_served(clock) -> None:
    store = Store(clock=clock, series_limit=6, staleness_s=600)
    handle(store, "findings", b"f", finding(updated=NOW - 250, host="h5"), "x")
    _feed(store, [5])  # older than every series that follows
    _feed(store, list(range(100, 140)))
    assert "h5" in _hosts(store)
    assert _hosts(store) == {"h5", *(f"h{i}" for i in range(136, 140))}
    # Once resolved, it is a quiet series again, the oldest one: a newer series wins.
    handle(store, "findings", b"f", finding(updated=NOW - 1, host="h5", status="resolved"), "x")
    _feed(store, [200, 201])  # the first fills the finding's place
    assert _hosts(store) == {f"h{i}" for i in (137, 138, 139, 200, 201)} | {"h136"}


def test_equal_window_ends_keep_the_same_series_in_any_arrival_order(clock) -> None:
    """A replay of a compacted topic delivers series in another order after a restart; ties in
    window end are broken by the labels, so the same series are served."""
    kept = set()
    for seed in range(5):
        store = Store(clock=clock, series_limit=10, staleness_s=600)
        hosts = [f"h{i:02d}" for i in range(40)]
        random.Random(seed).shuffle(hosts)
        for host in hosts:
            handle(store, "aggregates", host.encode(), aggregate(end=NOW - 5, host=host), "x")
        kept.add(frozenset(_hosts(store)))
    assert kept == {frozenset(f"h{i:02d}" for i in range(30, 40))}


def test_a_message_is_counted_once_what_it_says_is_served(clock) -> None:
    """A scrape that counts a message also serves it: at the moment each message is counted,
    its aggregate, finding, status, removal or rejection is already in the store."""

    class Watched(Store):
        def seen(self, role: str) -> None:
            s = self.snapshot()
            at_count.append(
                (len(s.aggregates), len(s.findings), len(s.statuses), sum(s.invalid.values()))
            )
            super().seen(role)

    at_count: list[tuple[int, int, int, int]] = []
    store = Watched(clock=clock, staleness_s=600)
    handle(store, "aggregates", b"k", aggregate(end=NOW, host="h0"), "x")
    handle(store, "findings", b"f", finding(updated=NOW), "x")
    handle(store, "job_status", b"j", status(), "x")
    handle(store, "aggregates", b"k", None, "x")
    handle(store, "aggregates", b"bad", b"{not json", "x")
    assert at_count == [(1, 0, 0, 0), (1, 1, 0, 0), (1, 1, 1, 0), (0, 1, 1, 0), (0, 1, 1, 1)]
