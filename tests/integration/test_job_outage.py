"""The job through an outage of its state query, against a real Kafka broker and real Spark: the
ingest query runs on while the state query is stopped, the partials it did not read are deleted
(as retention would), and on restart the job counts them as lost, says so, and runs on with its
state."""

from __future__ import annotations

import json

import pytest
from job_helpers import Topics, consume_all, latest_by_key, lines, produce, recording, wait_for

from streaming.job.checkpoint import INGEST_QUERY, STATE_QUERY
from streaming.job.pipeline import start_job
from streaming.job.session import stop_query

LEAK = "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"
DUP = "duplicate_connections|client:app-5:billing-service|prod-eu|1"


def _end_offsets(progress: dict) -> int:
    end = progress["sources"][0]["endOffset"]  # PySpark gives Kafka's offsets as JSON text
    end = json.loads(end) if isinstance(end, str) else end
    return sum(n for parts in end.values() for n in parts.values())


def _high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "outage-test"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def _delete_all(bootstrap: str, topic: str, upto: dict[int, int]) -> None:
    """What retention does to old segments: every record below ``upto`` is gone."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, p, n) for p, n in upto.items()])
    for f in futures.values():
        f.result(30)


@pytest.mark.timeout(900)
def test_partials_deleted_while_the_state_query_was_stopped_are_counted_and_the_job_runs_on(
    kafka_cluster, spark, unique_name, tmp_path, caplog
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    settings = t.settings(checkpoint=f"file://{tmp_path}/ckpt")
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    job = start_job(spark, settings)
    try:
        wait_for(
            "the leak's finding",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(LEAK),
        )
        state, ingest = job.queries
        assert (state.name, ingest.name) == (STATE_QUERY, INGEST_QUERY)
        assert stop_query(state, 60)
        read = _end_offsets(state.lastProgress)
        # The ingest query runs on: these events reach the partials topic, never the state.
        events = lines(recording("duplicate_clients"))
        produce(t.bootstrap, t.events, events, key="app-5")
        total = sum(_high_watermarks(t.bootstrap, t.events).values())
        wait_for(
            "the ingest query to read them", lambda: _end_offsets(ingest.lastProgress) == total
        )
    finally:
        job.stop()
    written = _high_watermarks(t.bootstrap, t.partials)
    unread = sum(written.values()) - read
    assert unread > 0
    _delete_all(t.bootstrap, t.partials, written)
    assert DUP not in latest_by_key(consume_all(t.bootstrap, t.findings))  # its rows are lost

    job = start_job(spark, settings)
    try:

        def state_status() -> dict | None:
            for q in job.queries:  # the job would stop at every restart without the fix
                assert q.isActive, f"query {q.name} stopped: {q.exception()}"
            st = latest_by_key(consume_all(t.bootstrap, t.status)).get("connmon-job:state")
            return st if st and st["input_lost_total"] else None

        st = wait_for("the state query's status with the loss", state_status)
        assert st["input_lost_total"] == unread
        assert any("were deleted before it read them" in r.getMessage() for r in caplog.records)
        # The job runs on: events after the restart become aggregates and findings.
        produce(t.bootstrap, t.events, lines(recording("duplicate_clients")), key="app-5")
        dup = wait_for(
            "a finding of events sent after the restart",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(DUP),
        )
        assert dup["status"] == "firing"
        assert all(q.isActive for q in job.queries)
    finally:
        job.stop()


def test_a_state_query_behind_reads_capped_batches_and_reports_its_backlog(
    kafka_cluster, spark, unique_name, tmp_path
):
    """About one partials record per state batch: the backlog the ingest query leaves shows in the
    state query's records as ``offsets_behind`` and falls to 0 as it catches up."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    settings = t.settings(checkpoint=f"file://{tmp_path}/ckpt", partials_max_offsets_per_trigger=1)
    for name, key in (("close_wait_leak", "app-7"), ("duplicate_clients", "app-5")):
        produce(t.bootstrap, t.events, lines(recording(name)), key=key)
    job = start_job(spark, settings)
    try:

        def state_records() -> list[dict]:
            return [v for k, v in consume_all(t.bootstrap, t.status) if k == "connmon-job:state"]

        def caught_up() -> list[dict] | None:
            st = state_records()
            behind = [v["offsets_behind"] for v in st]
            return st if behind and behind[-1] == 0 and max(behind) > 0 else None

        st = wait_for("the state query to catch up", caught_up)
        # The cap: one record a batch, which Spark rounds up to one per partition with a
        # backlog (it never starves a partition); the topic has two.
        assert all(v["num_input_rows"] <= 2 for v in st)
        wait_for(
            "both findings",
            lambda: {LEAK, DUP} <= set(latest_by_key(consume_all(t.bootstrap, t.findings))),
        )
    finally:
        job.stop()
