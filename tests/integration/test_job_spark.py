"""The job's Spark transformations on the shared local session: parsing and validation,
windowed aggregation, and replay of canned recordings (file source, available-now)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from streaming.detectors.config import DetectorConfig
from streaming.job import parse, windows
from streaming.job.pipeline import replay

FIXTURES = Path(__file__).parents[1] / "fixtures" / "events"


def _generator():
    spec = importlib.util.spec_from_file_location("events_generate", FIXTURES / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["events_generate"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gen = _generator()


def _raw(spark, lines: list[str]):
    rows = [(line, "connmon.events", 0, i) for i, line in enumerate(lines)]
    df = spark.createDataFrame(rows, "value string, topic string, partition int, offset long")
    return df.selectExpr(
        "CAST(value AS BINARY) AS value",
        "topic",
        "partition",
        "offset",
        "current_timestamp() AS timestamp",
    )


def test_malformed_records_get_the_documented_reasons(spark):
    decoded = parse.decode(_raw(spark, gen.MALFORMED), max_age_s=86400.0 * 3650, max_future_s=300)
    got = decoded.select("offset", "reason")
    expected = spark.createDataFrame(
        list(enumerate(gen.MALFORMED_REASONS)), "offset long, reason string"
    )
    assertDataFrameEqual(got, expected)


def test_dead_letters_keep_raw_bytes_and_source_coordinates(spark):
    decoded = parse.decode(_raw(spark, gen.MALFORMED[:1]), max_age_s=None, max_future_s=None)
    (row,) = parse.dead_letters(decoded).collect()
    value = json.loads(row.value)
    assert row.key == "0:0"
    assert value["reason"] == "malformed_json" and value["schema"] == 1
    import base64

    assert base64.b64decode(value["raw"]).decode() == "{not json"
    assert (value["topic"], value["partition"], value["offset"]) == ("connmon.events", 0, 0)


def test_valid_events_pass_and_old_events_are_out_of_range(spark):
    lines = [json.dumps(e) for e in gen.healthy(gen.RECORDED_START, duration_s=20)]
    decoded = parse.decode(_raw(spark, lines), max_age_s=None, max_future_s=None)
    assert decoded.where("reason IS NOT NULL").count() == 0
    # the recording is from 2026-11-21 04:00; with a 1-second age limit it is all too old
    old = parse.decode(_raw(spark, lines), max_age_s=1.0, max_future_s=None)
    assert {r.reason for r in old.select("reason").distinct().collect()} <= {"time_out_of_range"}


def test_window_aggregates_of_a_close_wait_leak(spark):
    lines = [json.dumps(e) for e in gen.close_wait_leak(gen.RECORDED_START, duration_s=250)]
    events = parse.valid_events(parse.decode(_raw(spark, lines), None, None))
    out = windows.aggregate(events, DetectorConfig()).where("side = 'client' AND broker = '2'")
    got = out.selectExpr(
        f"window_start_s - {gen.RECORDED_START} AS t",
        "opens",
        "closes_peer",
        "st_close_wait.count AS close_wait",
        "st_close_wait.oldest_state_age_s AS cw_age",
        "st_established.count AS established",
    )
    # Broker 2's connection is reaped by the broker every 120 s: the socket stays in
    # CLOSE_WAIT (a transition, not a close) and the app opens a new one. Summaries every 10 s;
    # each window keeps its latest one per state.
    expected = spark.createDataFrame(
        [
            (0.0, 1, 0, None, None, 1),
            (60.0, 0, 0, None, None, 1),
            (120.0, 1, 0, 1, 50.0, 1),  # CLOSE_WAIT since 120 s, last tick 170 s
            (180.0, 0, 0, 1, 110.0, 1),
            (240.0, 1, 0, 2, 130.0, 1),  # a second one at 240 s; oldest 250 - 120
        ],
        "t double, opens long, closes_peer long, close_wait long, cw_age double, established long",
    )
    assertDataFrameEqual(got, expected)


def test_replay_close_wait_leak_gives_a_finding_with_evidence(spark):
    result = replay(spark, str(FIXTURES / "close_wait_leak.jsonl"), DetectorConfig())
    cw = [f for f in result.findings if f["kind"] == "close_wait_buildup"]
    assert cw, result.findings
    last = cw[-1]
    assert last["status"] == "firing" and last["broker_id"] == 2
    assert last["app"] == "payments-sarama" and last["host"] == "app-7"
    assert last["evidence"]["close_wait_count"] == 7
    assert last["evidence"]["close_wait_oldest_age_s"] >= 780.0
    assert {f["kind"] for f in result.findings} == {"close_wait_buildup"}
    assert result.dead_letters == []


EXPECTED_KINDS = {
    "healthy": set(),
    "idle_churn": {"idle_churn"},
    "duplicate_bootstrap": {"duplicate_connections"},
    "idle_zombie": {"idle_zombie"},
    "connection_storm": {"connection_storm"},
    "time_wait_pileup": {"time_wait_pileup"},
}


def test_replay_each_recording_finds_exactly_its_pathology(spark, tmp_path):
    # one folder with every recording: one replay, findings told apart by host
    for name in EXPECTED_KINDS:
        (tmp_path / f"{name}.jsonl").write_text((FIXTURES / f"{name}.jsonl").read_text())
    result = replay(spark, str(tmp_path), DetectorConfig())
    by_host: dict[str, set[str]] = {}
    for f in result.findings:
        by_host.setdefault(f["host"], set()).add(f["kind"])
    hosts = {
        "healthy": "app-3",
        "idle_churn": "app-4",
        "duplicate_bootstrap": "app-5",
        "idle_zombie": "app-6",
        "connection_storm": "app-8",
        "time_wait_pileup": "app-9",
    }
    assert {name: by_host.get(hosts[name], set()) for name in EXPECTED_KINDS} == EXPECTED_KINDS


def test_replay_is_deterministic(spark):
    path = str(FIXTURES / "idle_churn.jsonl")
    a = replay(spark, path, DetectorConfig())
    b = replay(spark, path, DetectorConfig())
    assert a.findings == b.findings and a.aggregates == b.aggregates
    assert any(f["kind"] == "idle_churn" for f in a.findings)


@pytest.mark.parametrize("grace", [5.0, 900.0])
def test_thresholds_come_from_config_only(spark, grace):
    cfg = DetectorConfig().replace(close_wait_grace_s=grace)
    result = replay(spark, str(FIXTURES / "close_wait_leak.jsonl"), cfg)
    kinds = {f["kind"] for f in result.findings}
    assert kinds == (set() if grace == 900.0 else {"close_wait_buildup"})
