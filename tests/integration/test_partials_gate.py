"""The partials gate against a real Kafka broker: rows written by other (non-transactional)
producers while it is open stay hidden from a ``read_committed`` reader, on every partition,
until it commits or aborts; a gate the cluster refuses turns itself off."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streaming.job.gate import BatchGate, gate_key
from streaming.stack.kafka import create_topics

PARTITIONS = 3


@pytest.fixture
def where(kafka_cluster, unique_name) -> tuple[str, str, str]:
    """(bootstrap, a new topic of ``PARTITIONS`` partitions, a checkpoint's run id)."""
    create_topics(kafka_cluster.bootstrap_servers, {unique_name: PARTITIONS})
    return kafka_cluster.bootstrap_servers, unique_name, uuid.uuid4().hex


def _write(bootstrap: str, topic: str, n: int, tag: str) -> None:
    """n rows on each partition, as the executors and the driver's end markers write them."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition in range(PARTITIONS):
        for i in range(n):
            p.produce(topic, key=f"run:{i}".encode(), value=tag.encode(), partition=partition)
    assert p.flush(30) == 0


def _visible(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every record a read_committed reader gets now, from the start of each partition."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out, eof = [], set()
        while len(eof) < PARTITIONS:
            m = c.poll(10)
            assert m is not None, "no end of partition reached in 10 s"
            if m.error():
                if m.error().name() == "_PARTITION_EOF":
                    eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            out.append((m.key(), m.value()))
        return out
    finally:
        c.close()


def _rows(records: list[tuple[bytes, bytes]], run_id: str) -> list[bytes]:
    return sorted(v for k, v in records if k != gate_key(run_id))


def _shown(b: str, topic: str, run_id: str, want: list[bytes]) -> list[bytes]:
    """The rows once they are ``want`` (sorted), or after 15 s: a transaction's end reaches
    each partition a moment after the producer's call returns (the cluster writes its markers
    then). 15 s is below the gate's transaction timeout, so a gate never ended still fails."""
    deadline = time.monotonic() + 15
    while True:
        rows = _rows(_visible(b, topic), run_id)
        if rows == want or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_rows_written_while_the_gate_is_open_show_when_it_commits(where):
    b, topic, run = where
    gate = BatchGate(b, topic, run)
    _write(b, topic, 2, "before")

    gate.open()
    _write(b, topic, 2, "batch-1")
    assert _rows(_visible(b, topic), run) == [b"before"] * 2 * PARTITIONS
    gate.close()
    want = sorted([b"before", b"batch-1"] * 2 * PARTITIONS)
    assert _shown(b, topic, run, want) == want

    gate.open()  # the next batch: hidden again, the earlier ones stay visible
    _write(b, topic, 1, "batch-2")
    assert _rows(_visible(b, topic), run).count(b"batch-2") == 0
    gate.close()
    want = sorted(want + [b"batch-2"] * PARTITIONS)
    assert _shown(b, topic, run, want) == want
    assert gate.enabled and gate.failures_total == 0
    gate.shutdown()


@pytest.mark.parametrize("end", ["abort", "shutdown"])
def test_an_aborted_or_shut_down_gate_shows_its_rows_at_once(where, end):
    """A failed batch aborts its gate; a stopping job shuts it down: either way what the batch
    wrote shows now, not when the transaction times out."""
    b, topic, run = where
    gate = BatchGate(b, topic, run)
    gate.open()
    _write(b, topic, 1, "failed-batch")
    assert _rows(_visible(b, topic), run) == []
    getattr(gate, end)()
    want = [b"failed-batch"] * PARTITIONS
    assert _shown(b, topic, run, want) == want
    # the gate records of an aborted transaction are not delivered at all
    assert all(k != gate_key(run) for k, _ in _visible(b, topic))
    gate.shutdown()


def test_a_restarted_driver_releases_the_gate_its_predecessor_left_open(where, caplog):
    """A driver killed mid-batch leaves its transaction open; the next one of the same
    checkpoint ends it when it sets up its own gate, so the rows show without waiting for the
    transaction to time out. The fenced gate's own end fails quietly and leaves the new one
    alone."""
    b, topic, run = where
    killed = BatchGate(b, topic, run)
    killed.open()
    _write(b, topic, 1, "abandoned")
    assert _rows(_visible(b, topic), run) == []

    restarted = BatchGate(b, topic, run)
    restarted.open()
    want = [b"abandoned"] * PARTITIONS
    assert _shown(b, topic, run, want) == want
    with caplog.at_level(logging.WARNING, logger="streaming.job.gate"):
        killed.close()  # fenced
    assert any("commit failed" in r.getMessage() for r in caplog.records)
    _write(b, topic, 1, "next")
    assert _rows(_visible(b, topic), run).count(b"next") == 0  # the new gate still holds
    restarted.close()
    want = sorted(want + [b"next"] * PARTITIONS)
    assert _shown(b, topic, run, want) == want
    restarted.shutdown()
    killed.shutdown()


def test_a_gate_whose_record_is_refused_ends_its_transaction_at_once(where, caplog):
    """A gate record that is not delivered fails the gate after its transaction began: the
    transaction must end then, not hide the batch's rows until it times out."""
    b, topic, run = where
    gate = BatchGate(b, topic, run)
    gate.open()
    gate.close()
    gate._partitions.append(PARTITIONS + 7)  # a partition the topic does not have
    with caplog.at_level(logging.WARNING, logger="streaming.job.gate"):
        gate.open()
    assert any("open failed" in r.getMessage() for r in caplog.records)
    assert gate.failures_total == 1
    _write(b, topic, 1, "after-a-failed-gate")
    want = [b"after-a-failed-gate"] * PARTITIONS
    assert _shown(b, topic, run, want) == want
    gate.shutdown()


def test_no_gate_opens_after_shutdown(where):
    b, topic, run = where
    gate = BatchGate(b, topic, run)
    gate.shutdown()
    gate.open()
    _write(b, topic, 1, "after")
    assert _rows(_visible(b, topic), run) == [b"after"] * PARTITIONS


def test_a_gate_the_cluster_refuses_is_off_with_one_warning_and_tried_again_later(where, caplog):
    """A transaction timeout above the broker's limit is refused when the producer starts;
    the job must go on without the gate (rows are then visible as soon as written), try again
    later, and not log the same refusal twice."""
    b, topic, run = where
    gate = BatchGate(b, topic, run, timeout_ms=24 * 3600 * 1000, retry_s=2.0)
    with caplog.at_level(logging.WARNING, logger="streaming.job.gate"):
        gate.open()
        assert not gate.enabled
        _write(b, topic, 1, "ungated")
        assert _rows(_visible(b, topic), run) == [b"ungated"] * PARTITIONS
        gate.close()  # nothing open: a no-op
        time.sleep(2.1)
        assert gate.enabled  # tried again at the next batch
        gate.open()
        assert not gate.enabled
    warnings = [r.getMessage() for r in caplog.records if "transactional id" in r.getMessage()]
    assert len(warnings) == 1 and "INVALID_TRANSACTION_TIMEOUT" in warnings[0]
    assert gate.failures_total == 2  # each refusal counted, in the job status
    gate.shutdown()
