"""A window's client library identity (library, version, evidence, process role) is merged as
one value: the window names what one of its processes was identified as, whatever order its
partial rows arrive in (no Spark: partial rows are written by hand)."""

from __future__ import annotations

import itertools
import json

import pytest

from streaming.job.open_windows import WINDOW_FIELDS, OpenWindows, window_key
from streaming.job.records import to_aggregate

T0 = 1_795_000_000.0  # a window start (a multiple of 60)
IDENTITY = ("client_library", "client_version", "client_library_evidence", "process_role")


def part(library=None, version=None, evidence=None, role=None, t: float = 1.0, **fields) -> dict:
    row = {
        "window_start_s": T0,
        "side": "client",
        "host": "app-1",
        "app": "orders",
        "cluster": None,
        "broker": "1",
        "peer_host": None,
        "reason": None,
        "events": 1,
        "last_event_s": T0 + t,
        "client_library": library,
        "client_version": version,
        "client_library_evidence": evidence,
        "process_role": role,
    }
    row.update(fields)
    return row


def identity(rows: list[dict], batches: int = 1) -> tuple:
    """The window's identity after ``rows`` arrive in ``batches`` batches, the state saved as
    JSON and restored before each batch after the first."""
    size = -(-len(rows) // batches)
    state = None
    for i in range(0, len(rows), size):
        ws = OpenWindows(60.0, 120.0)
        if state is not None:
            ws.load_state(json.loads(json.dumps(state)))
        (window,) = ws.apply(rows[i : i + size]).windows
        state = ws.to_state()
    return tuple(window[WINDOW_FIELDS.index(f)] for f in IDENTITY)


def every_order(rows: list[dict]) -> set[tuple]:
    """The identities every arrival order and batching of ``rows`` gives."""
    return {
        identity(list(p), batches)
        for p in itertools.permutations(rows)
        for batches in range(1, len(rows) + 1)
    }


RDKAFKA = ("librdkafka", "2.6.0", "loaded", None)
JAVA_RUNTIME = ("java", "3.7.0", "runtime", None)


def test_two_libraries_in_one_window_give_one_real_pair_in_either_order():
    a, b = part(*RDKAFKA), part(*JAVA_RUNTIME)
    # Loaded code is stronger evidence than a JVM without a jar found.
    assert identity([a, b]) == RDKAFKA
    assert identity([b, a]) == RDKAFKA


def test_a_kafka_process_role_stays_with_its_own_library():
    streams = ("java", "3.7.0", "classpath", "streams")
    for rows in ([part(*RDKAFKA), part(*streams)], [part(*streams), part(*RDKAFKA)]):
        assert identity(rows) == RDKAFKA  # not librdkafka in a Kafka Streams process


def test_a_rolling_upgrade_names_the_newer_version_compared_as_numbers():
    old, new = ("librdkafka", "2.9.0", "loaded", None), ("librdkafka", "2.10.0", "loaded", None)
    assert every_order([part(*old), part(*new)]) == {new}


def test_stronger_evidence_beats_a_newer_version():
    declared = ("kafkajs", "2.2.4", "declared", None)
    installed = ("kafkajs", "2.3.0", "installed", None)
    assert every_order([part(*declared), part(*installed)]) == {declared}
    # A package merely installed next to a library proven in use gives way to it whole: the
    # advice is the proven library's, never the installed one's with another's proof.
    python = ("kafka-python", "2.0.2", "installed", None)
    classpath = ("java", "3.6.1", "classpath", None)
    assert every_order([part(*python), part(*classpath)]) == {classpath}


def test_a_version_that_does_not_parse_loses_to_one_that_does():
    snapshot = ("java", "trunk-SNAPSHOT", "classpath", None)
    release = ("java", "3.7.0", "classpath", None)
    unversioned = ("java", None, "classpath", None)
    assert every_order([part(*snapshot), part(*release), part(*unversioned)]) == {release}
    assert every_order([part(*snapshot), part(*unversioned)]) == {snapshot}


def test_same_evidence_and_version_ties_break_by_library_name():
    franz = ("franz-go", "1.17.0", "loaded", None)
    sarama = ("sarama", "1.17.0", "loaded", None)
    assert every_order([part(*franz), part(*sarama)]) == {sarama}


def test_a_role_beats_none_for_the_same_library_and_version():
    app = ("java", "3.7.0", "loaded", None)
    connect = ("java", "3.7.0", "loaded", "connect")
    assert every_order([part(*app), part(*connect)]) == {connect}


def test_a_row_with_no_library_does_not_erase_a_known_one():
    sarama = ("sarama", "1.43.2", "loaded", None)
    nothing = part()  # sockets of no process, a close
    unknown = part("unknown")  # the name partial_rows turns into null
    assert every_order([nothing, part(*sarama), unknown]) == {sarama}
    assert identity([nothing, unknown]) == ("unknown", None, None, None)
    assert identity([nothing]) == (None, None, None, None)


def test_many_candidates_give_one_answer_whatever_the_order_and_batches():
    candidates = [
        part(*JAVA_RUNTIME),
        part("java", "3.8.0", "classpath", "streams"),
        part("librdkafka", "2.9.0", "loaded"),
        part(),
        part("librdkafka", "2.10.0", "loaded"),
    ]
    assert every_order(candidates) == {("librdkafka", "2.10.0", "loaded", None)}


def test_the_finished_window_and_its_aggregate_carry_the_chosen_pair():
    ws = OpenWindows(60.0, 120.0)
    (row,) = ws.apply([part(*JAVA_RUNTIME), part(*RDKAFKA), part()]).windows
    agg = to_aggregate(row, 60.0)
    assert (agg.client_library, agg.client_version) == ("librdkafka", "2.6.0")
    assert (agg.client_library_evidence, agg.process_role) == ("loaded", None)


def test_the_identity_keeps_the_slots_earlier_versions_saved_it_in():
    # A window saved before this merge has the same field list: it loads without remapping.
    assert WINDOW_FIELDS[10:14] == IDENTITY
    assert WINDOW_FIELDS[:10] == (
        "window_start_s", "side", "host", "app", "cluster", "broker", "peer_host",
        "last_event_s", "broker_id", "broker_endpoint",
    )  # fmt: skip


@pytest.mark.parametrize("layout", ["as saved", "another order"])
def test_a_window_saved_by_the_field_by_field_merge_still_loads_and_merges(layout):
    # What the earlier merge could save: librdkafka with a Java client's version and evidence.
    fields = ["window_start_s", "side", "host", "app", "cluster", "broker", "peer_host",
              "last_event_s", "client_library", "client_version", "client_library_evidence",
              "process_role", "events"]  # fmt: skip
    row = [T0, "client", "app-1", "orders", None, "1", None, T0 + 5,
           "librdkafka", "3.7.0", "runtime", None, 4]  # fmt: skip
    if layout == "another order":
        fields, row = fields[::-1], row[::-1]
    saved = {
        "window_s": 60.0,
        "max_event_s": T0 + 5,
        "open_keys": [window_key(part())],
        "open_fields": fields,
        "open_rows": [row],
    }
    restored = OpenWindows(60.0, 120.0)
    restored.load_state(json.loads(json.dumps(saved)))
    (window,) = restored.apply([part(*RDKAFKA, t=6)]).windows
    merged = dict(zip(WINDOW_FIELDS, window, strict=True))
    assert tuple(merged[f] for f in IDENTITY) == RDKAFKA  # loaded beats runtime, whole
    assert merged["events"] == 5
