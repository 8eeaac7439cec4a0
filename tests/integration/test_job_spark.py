"""The job's Spark transformations on the shared local session: parsing and validation,
windowed aggregation, and replay of canned recordings (file source, available-now)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from streaming.detectors.config import DetectorConfig
from streaming.job import parse, partial_rows
from streaming.job.open_windows import WINDOW_FIELDS, OpenWindows, flat_col, window_key
from streaming.job.pipeline import replay
from streaming.job.records import to_aggregate
from streaming.schema.status import DEADLETTER_REASONS
from streaming.schema.times import iso

FIXTURES = Path(__file__).parents[1] / "fixtures" / "events"


def _generator():
    spec = importlib.util.spec_from_file_location("events_generate", FIXTURES / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["events_generate"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gen = _generator()


def _raw(spark, lines: list[str] | list[bytes | None]):
    rows = [
        (line.encode() if isinstance(line, str) else line, "connmon.events", 0, i)
        for i, line in enumerate(lines)
    ]
    df = spark.createDataFrame(rows, "value binary, topic string, partition int, offset long")
    return df.selectExpr(
        "value",
        "topic",
        "partition",
        "offset",
        "current_timestamp() AS timestamp",
    )


def test_malformed_records_get_the_documented_reasons(spark):
    values = [*gen.MALFORMED, *(v for v, _ in gen.KAFKA_REJECTS)]
    reasons = [*gen.MALFORMED_REASONS, *(r for _, r in gen.KAFKA_REJECTS)]
    decoded = parse.Decoder(max_age_s=86400.0 * 3650, max_future_s=300).judge(_raw(spark, values))
    got = decoded.select("offset", "reason")
    expected = spark.createDataFrame(list(enumerate(reasons)), "offset long, reason string")
    assertDataFrameEqual(got, expected)
    # every documented reason is exercised, and no other (but the job's own: a record its
    # operator skips, tested below, one its code fails on, a bug, and a bucket's saved state
    # it cannot read, tested in tests/unit/job/test_bucket_failures.py)
    job = {"skipped", "internal_error", "state_unreadable"}
    assert set(reasons) | job == set(DEADLETTER_REASONS)


def test_a_tombstone_is_a_dead_letter_without_bytes(spark):
    decoded = parse.Decoder(max_age_s=None, max_future_s=None).judge(_raw(spark, [None, b""]))
    rows = {r.reason: json.loads(r.value) for r in parse.dead_letters(decoded).collect()}
    assert set(rows) == {"null_value", "empty_value"}
    assert (rows["null_value"]["raw"], rows["null_value"]["raw_bytes"]) == (None, 0)
    assert (rows["empty_value"]["raw"], rows["empty_value"]["raw_bytes"]) == ("", 0)
    assert rows["null_value"]["detail"] == "the record has no value (a Kafka tombstone)"


def test_dead_letters_keep_raw_bytes_and_source_coordinates(spark):
    decoded = parse.Decoder(max_age_s=None, max_future_s=None).judge(_raw(spark, gen.MALFORMED[:1]))
    (row,) = parse.dead_letters(decoded).collect()
    value = json.loads(row.value)
    assert row.key == "0:0"
    assert value["reason"] == "malformed_json" and value["schema"] == 1
    import base64

    assert base64.b64decode(value["raw"]).decode() == "{not json"
    assert (value["topic"], value["partition"], value["offset"]) == ("connmon.events", 0, 0)


def test_valid_events_pass_and_old_events_are_out_of_range(spark):
    lines = [json.dumps(e) for e in gen.healthy(gen.RECORDED_START, duration_s=20)]
    decoded = parse.Decoder(max_age_s=None, max_future_s=None).judge(_raw(spark, lines))
    assert decoded.where("reason IS NOT NULL").count() == 0
    # the recording is from 2026-11-21 04:00; with a 1-second age limit it is all too old
    old = parse.Decoder(max_age_s=1.0, max_future_s=None).judge(_raw(spark, lines))
    assert {r.reason for r in old.select("reason").distinct().collect()} <= {"time_out_of_range"}


def _window_rows(spark, lines: list[str], batches: int = 1) -> list[dict]:
    """The windows' slots by field name after the lines went through ``batches`` micro-batches
    (every ``batches``-th line in each, so each window gets partial rows from every batch)."""
    cfg = DetectorConfig()
    state = OpenWindows(cfg.window_s, watermark_s=1e9)  # nothing is late or evicted here
    rows: dict[str, dict] = {}
    for b in range(batches):
        decoded = parse.Decoder(None, None).judge(_raw(spark, lines[b::batches]))
        parts = [r.asDict() for r in partial_rows.PartialRows(cfg)(decoded).collect()]
        windows = [dict(zip(WINDOW_FIELDS, w, strict=True)) for w in state.apply(parts).windows]
        rows.update({window_key(r): r for r in windows})
    return sorted(rows.values(), key=lambda r: (r["window_start_s"], window_key(r)))


def test_window_aggregates_of_a_close_wait_leak(spark):
    lines = [json.dumps(e) for e in gen.close_wait_leak(gen.RECORDED_START, duration_s=250)]
    got = [
        (
            r["window_start_s"] - gen.RECORDED_START,
            r["opens"],
            r["closes_peer"],
            r[flat_col("CLOSE_WAIT", "count")],
            r[flat_col("CLOSE_WAIT", "oldest_state_age_s")],
            r[flat_col("ESTABLISHED", "count")],
        )
        for r in _window_rows(spark, lines)
        if r["side"] == "client" and r["broker"] == "2"
    ]
    # Broker 2's connection is reaped by the broker every 120 s: the socket stays in
    # CLOSE_WAIT (a transition, not a close) and the app opens a new one. Summaries every 10 s;
    # each window keeps its latest one per state.
    assert got == [
        (0.0, 1, 0, None, None, 1),
        (60.0, 0, 0, None, None, 1),
        (120.0, 1, 0, 1, 50.0, 1),  # CLOSE_WAIT since 120 s, last tick 170 s
        (180.0, 0, 0, 1, 110.0, 1),
        (240.0, 1, 0, 2, 130.0, 1),  # a second one at 240 s; oldest 250 - 120
    ]


def test_counted_connections_and_failed_connects_reach_the_window(spark):
    base = {
        "schema": 1, "host": "web-1", "agent_id": "web-1-1", "cluster": "local",
        "side": "client", "app": "orders", "broker_id": 1, "broker_endpoint": "10.0.0.1:9092",
    }  # fmt: skip
    t = gen.RECORDED_START + 5

    def ev(seq: int, **fields) -> str:
        return json.dumps({**base, "seq": seq, "event_time": iso(t + seq), **fields})

    lines = [
        # The eBPF collector's counts: 40 refused connects and 7 connections closed locally.
        ev(0, kind="short_lived", count=40, closed_by="unknown", connect_error="refused",
           lifetime_sum_s=0.04, lifetime_max_s=0.002, interval_s=5.0),
        ev(1, kind="short_lived", count=7, closed_by="local", lifetime_sum_s=3.5,
           lifetime_max_s=2.5, interval_s=5.0),
        # One connect a scan saw time out, and one ordinary close.
        ev(2, kind="opened", state="SYN_SENT", open_reason="new"),
        ev(3, kind="closed", state="SYN_SENT", closed_by="unknown", connect_error="timeout",
           lifetime_s=1.0),
        ev(4, kind="closed", state="TIME_WAIT", closed_by="local", lifetime_s=30.0),
    ]  # fmt: skip
    (row,) = [r for r in _window_rows(spark, lines) if r["app"] == "orders"]
    assert (row["opens"], row["closes_unknown"], row["closes_local"]) == (47 + 1, 41, 8)
    assert (row["connects_failed"], row["connects_refused"]) == (41, 40)
    # Short-lived: a count whose longest connection is under 2 s, and the 1 s closed one.
    assert row["short_lived"] == 40 + 1
    assert row["lifetime_n"] == 47 + 2 and row["lifetime_max_s"] == 30.0
    assert row["lifetime_sum_s"] == pytest.approx(0.04 + 3.5 + 1.0 + 30.0)


def test_partials_from_several_batches_merge_to_the_single_batch_windows(spark):
    lines = []
    for name in ("close_wait_leak", "duplicate_clients", "idle_churn"):
        lines += (FIXTURES / f"{name}.jsonl").read_text().splitlines()
    one = _window_rows(spark, lines)
    three = _window_rows(spark, lines, batches=3)
    assert len(one) > 50 and [window_key(r) for r in one] == [window_key(r) for r in three]
    for a, b in zip(one, three, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], float) and isinstance(b[k], float):
                assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-9), k
            else:
                assert a[k] == b[k], (window_key(a), k)


def test_close_wait_slope_matches_a_least_squares_fit(spark):
    leak = gen.close_wait_leak(gen.RECORDED_START, duration_s=250)
    proto = next(e for e in leak if e["kind"] == "summary" and e["state"] == "CLOSE_WAIT")
    start = gen.RECORDED_START - gen.RECORDED_START % 60 + 600  # a window of its own
    points = [(3.0, 1), (11.5, 1), (20.0, 2), (33.0, 4), (41.0, 4), (57.5, 7)]
    lines = [
        json.dumps({**proto, "host": "slope-1", "event_time": gen.iso(start + t), "count": n})
        for t, n in points
    ]
    (row,) = [r for r in _window_rows(spark, lines) if r["host"] == "slope-1"]
    fit = statistics.linear_regression([t for t, _ in points], [float(n) for _, n in points])
    agg = to_aggregate([row[f] for f in WINDOW_FIELDS], DetectorConfig().window_s)
    assert agg.close_wait_slope_per_s == pytest.approx(fit.slope, rel=1e-9)
    assert agg.close_wait_count == 7


def test_the_window_aggregation_is_a_code_generated_hash_aggregate(spark):
    # SortAggregate (string or struct buffers) cost about a third more per batch; see
    # benchmarks/job/README.md. A new aggregate with a non-fixed-width buffer brings it back.
    lines = (FIXTURES / "healthy.jsonl").read_text().splitlines()
    df = partial_rows.PartialRows(DetectorConfig())(parse.Decoder(None, None)(_raw(spark, lines)))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "HashAggregate" in plan
    assert "SortAggregate" not in plan and "ObjectHashAggregate" not in plan


def test_replay_close_wait_leak_gives_a_finding_with_evidence(spark):
    result = replay(spark, str(FIXTURES / "close_wait_leak.jsonl"), DetectorConfig())
    cw = [f for f in result.findings if f["kind"] == "close_wait_buildup"]
    assert cw, result.findings
    last = cw[-1]
    assert last["status"] == "firing" and last["broker_id"] == 2
    assert last["app"] == "payments-sarama" and last["host"] == "app-7"
    # The leak ends with 7 sockets, the oldest 780 s old: the aggregates carry that, the
    # finding is published when it fires and again when a number doubled, not every window.
    newest = max(
        (a for a in result.aggregates if a["app"] == "payments-sarama" and a["broker"] == "2"),
        key=lambda a: a["window_end"],
    )
    assert newest["close_wait_count"] == 7 and newest["close_wait_oldest_age_s"] >= 780.0
    assert 2 * last["evidence"]["close_wait_count"] > 7
    assert 2 * last["evidence"]["close_wait_oldest_age_s"] > 780.0
    windows = {a["window_start"] for a in result.aggregates if a["close_wait_count"]}
    assert len(cw) < len(windows) / 2, [f["change"] for f in cw]
    assert cw[0]["change"] == "fired"
    assert {f["change"] for f in cw[1:]} <= {"evidence", "heartbeat"}
    assert {f["first_fired_at"] for f in cw} == {cw[0]["window_start"]}
    assert {f["kind"] for f in result.findings} == {"close_wait_buildup"}
    assert result.dead_letters == []


def test_the_same_broker_id_in_two_clusters_is_two_series(spark, tmp_path):
    # One process talks to broker 2 of two clusters; only its connections to prod-eu leak.
    leak = gen.close_wait_leak(gen.RECORDED_START)
    other = [
        e | {"host": "app-7", "app": "payments-sarama", "cluster": "dr-us"}
        | ({"broker_endpoint": "10.9." + e["broker_endpoint"].split(".", 2)[2]}
           if "broker_endpoint" in e else {})
        for e in gen.healthy(gen.RECORDED_START)
    ]  # fmt: skip
    assert {e.get("cluster") for e in leak} - {None} == {"prod-eu"}
    path = tmp_path / "two-clusters.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in sorted(leak + other, key=lambda e: e["seq"])))
    result = replay(spark, str(path), DetectorConfig())
    cw = {f["key"]: f for f in result.findings if f["kind"] == "close_wait_buildup"}
    assert list(cw) == ["close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"]
    assert {f["cluster"] for f in result.findings} == {"prod-eu"}
    series = {a["series"]: a for a in result.aggregates if a["broker"] == "2"}
    assert set(series) == {
        "client|app-7|payments-sarama|prod-eu|2",
        "client|app-7|payments-sarama|dr-us|2",
    }
    dr = [a for a in result.aggregates if a["cluster"] == "dr-us"]
    assert dr and all(a["close_wait_count"] == 0 for a in dr)


EXPECTED_KINDS = {
    "healthy": set(),
    "idle_churn": {"idle_churn"},
    "duplicate_clients": {"duplicate_connections"},
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
        "duplicate_clients": "app-5",
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


def test_a_checkpoint_keeps_its_settings_and_refuses_others_by_name(spark, tmp_path):
    from streaming.errors import ConfigError
    from streaming.job.checkpoint import open_checkpoint

    uri = f"file://{tmp_path}/ckpt"
    first = open_checkpoint(spark, uri, 60.0, 256)
    assert open_checkpoint(spark, uri, 60.0, 256) == first  # the same run on restart
    assert open_checkpoint(spark, f"file://{tmp_path}/other", 60.0, 256).run_id != first.run_id
    with pytest.raises(ConfigError, match=r"^detectors.window_s: the checkpoint has 60.0 s"):
        open_checkpoint(spark, uri, 30.0, 256)
    with pytest.raises(ConfigError, match=r"^state-buckets: the checkpoint has 256"):
        open_checkpoint(spark, uri, 60.0, 64)
    # Before the state query's first batch Spark has recorded no partitions: any value starts
    # (test_runbook_commands refuses a changed one on a real job's checkpoint).
    assert open_checkpoint(spark, uri, 60.0, 256, 2) == first
    (tmp_path / "old" / "aggregates").mkdir(parents=True)  # a Spark checkpoint, no connmon.json
    with pytest.raises(ConfigError, match=r"^checkpoint: .* has no connmon.json"):
        open_checkpoint(spark, str(tmp_path / "old"), 60.0, 256)


def test_records_the_operator_skips_are_dead_letters_unread(spark):
    lines = [json.dumps(e) for e in gen.healthy(gen.RECORDED_START, duration_s=20)][:6]
    decoder = parse.Decoder(None, None, skip=((0, 1, 2), (0, 5, 5), (3, 0, 99)))
    got = {r.offset: (r.reason, r.ts) for r in decoder.judge(_raw(spark, lines)).collect()}
    assert [got[o][0] for o in range(6)] == [None, "skipped", "skipped", None, None, "skipped"]
    assert got[1][1] is None  # not read: no event time
    (letter,) = [json.loads(r.value) for r in parse.dead_letters(
        decoder.judge(_raw(spark, lines))).collect() if r.key == "0:5"]  # fmt: skip
    assert letter["detail"] == parse.SKIPPED_DETAIL and letter["raw"]
