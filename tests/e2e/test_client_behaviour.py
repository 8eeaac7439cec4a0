"""What real clients do on the wire, checked with the scenario observer alone (no connmon
component): the behaviours the scenarios and docs/observed-client-behaviour.md rely on.

One 1-broker cluster with a 10 s broker idle expiry; every workload runs concurrently for
``RUN_S`` seconds while the observer samples ``ss`` every second; each test then reads the
recorded connection lives of one workload. If a client library changes behaviour, these fail
and the note must be updated.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.scenarios import goclients, javadriver, nodeclients
from streaming.scenarios.launcher import Proc, stop_all, workload_argv
from streaming.scenarios.model import Workload
from streaming.scenarios.observer import ObservedConnections, Observer, summarise

BROKER_IDLE_MS = 10000
RUN_S = 45.0

WORKLOADS = (
    Workload(
        "raw", "close-wait-leak", "cb-raw-leak", interval_ms=1000, options={"max_connections": 4}
    ),
    Workload("raw", "churn", "cb-raw-churn", interval_ms=100, options={"hold_ms": 1500}),
    Workload(
        "java",
        "stalled-consumer",
        "cb-java-stalled",
        "cb-t",
        "cb-g1",
        props={"max.poll.interval.ms": "3000"},
        options={"poll_for_s": 3},
    ),
    Workload("java", "producer", "cb-java-producer", "cb-t", interval_ms=200),
    Workload("rdkafka", "consumer", "cb-rdk-consumer", "cb-t", "cb-g2"),
    Workload("rdkafka", "producer", "cb-rdk-producer", "cb-t", interval_ms=100),
    Workload("sarama", "producer", "cb-sarama-producer", "cb-t", interval_ms=200),
    Workload("franz-go", "producer", "cb-franz-producer", "cb-t", interval_ms=200),
    Workload("kafkajs", "consumer", "cb-kafkajs-consumer", "cb-t", "cb-g3"),
    Workload("kafkajs", "idle-producer", "cb-kafkajs-idle", "cb-t", interval_ms=15000),
)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedConnections]:
    from streaming.stack.kafka import KafkaCluster, create_topics

    javadriver.ensure_built()
    goclients.ensure_built()
    nodeclients.ensure_built()
    run_dir = Path(tmp_path_factory.mktemp("client-behaviour"))
    cluster = KafkaCluster(
        brokers=1,
        overrides={"connections.max.idle.ms": str(BROKER_IDLE_MS)},
        name="connmon-cb",
        base_dir=str(run_dir / "kafka"),
    )
    procs: list[Proc] = []
    observer = None
    try:
        cluster.start()
        create_topics(cluster.bootstrap_servers, {"cb-t": 2})
        labels = {("127.0.0.1", n.port): f"b{n.node_id}" for n in cluster.nodes}
        observer = Observer(labels, lambda: {p.pid: p.name for p in procs if p.pid}).start()
        for w in WORKLOADS:
            argv = workload_argv(w, cluster.bootstrap_servers)
            procs.append(Proc(w.app, argv, run_dir / f"{w.app}.log").start())
        time.sleep(RUN_S)
        dead = [p.name for p in procs if not p.alive()]
        assert not dead, f"workloads exited early: {dead}\n" + "\n".join(
            procs[[p.name for p in procs].index(d)].tail() for d in dead
        )
        print(observer.report())
        yield observer.observed
    finally:
        stop_all(procs)
        if observer is not None:
            observer.stop()
        cluster.stop()


def _row(observed: ObservedConnections, app: str):
    rows = [r for r in summarise(observed) if r.app == app]
    assert rows, f"the observer never saw a socket of {app}"
    return rows[0]


def test_leaking_client_keeps_close_wait_after_the_broker_reaps(observed):
    row = _row(observed, "cb-raw-leak")
    assert row.max_close_wait == 4, row
    assert row.closed_peer == 4 and row.closed_local == 0, row
    # the broker reaps after 10 s idle; the socket then stays in CLOSE_WAIT for good
    assert row.max_close_wait_age_s >= 20, row


def test_classic_consumer_that_left_the_group_keeps_close_wait(observed):
    row = _row(observed, "cb-java-stalled")
    assert row.max_close_wait >= 1, row
    assert row.max_close_wait_age_s >= 10, row


def test_java_producer_keeps_a_bootstrap_connection_next_to_the_real_one(observed):
    row = _row(observed, "cb-java-producer")
    # one broker: the bootstrap connection (-1) and the real-id connection (1) to one endpoint
    assert row.max_established >= 2, row
    # the leftover is idle until the broker's expiry reaps it; the data connection stays
    assert row.max_idle_s >= BROKER_IDLE_MS / 1000 - 1.5, row


def test_librdkafka_consumer_holds_a_busy_coordinator_connection_next_to_its_fetch_one(observed):
    row = _row(observed, "cb-rdk-consumer")
    assert row.max_established == 2, row
    assert row.max_idle_s < BROKER_IDLE_MS / 1000, row  # never idle long enough to be reaped
    assert row.closed_peer == 0, row


def test_librdkafka_producer_holds_one_connection_and_no_bootstrap_leftover(observed):
    row = _row(observed, "cb-rdk-producer")
    assert row.max_established == 1, row


def test_fast_churning_client_piles_up_time_wait_on_its_own_side(observed):
    row = _row(observed, "cb-raw-churn")
    assert row.max_time_wait >= 150, row  # ~10 connections/s, each kept 60 s in TIME_WAIT
    assert row.closed_local >= 150 and row.closed_peer == 0, row


def test_sarama_leaves_its_unused_seed_connection_in_close_wait(observed):
    row = _row(observed, "cb-sarama-producer")
    # the seed (bootstrap) connection and broker 1's, to the one endpoint
    assert row.max_established == 2, row
    # the broker reaps the seed connection after 10 s idle; Sarama never reads it again, so
    # it stays in CLOSE_WAIT until a keep-alive probe meets the broker's reset (~60-75 s on)
    assert row.closed_peer >= 1 and row.closed_local == 0, row
    assert row.max_close_wait >= 1 and row.max_close_wait_age_s >= 20, row


def test_franz_go_opens_several_connections_to_one_broker_and_misses_the_brokers_close(observed):
    row = _row(observed, "cb-franz-producer")
    # seed, metadata/producer-id ("normal") and produce connections, all to the one broker
    assert row.max_established >= 3, row
    # the broker reaps the idle seed/normal ones after 10 s; franz-go reads a connection only
    # for a request, so they sit in CLOSE_WAIT until its own reaper (30 s, up to 60 s) runs
    assert row.closed_peer >= 1, row
    assert row.max_close_wait >= 1 and row.max_close_wait_age_s >= 15, row


def test_kafkajs_consumer_holds_a_fetch_connection_next_to_its_other_one(observed):
    row = _row(observed, "cb-kafkajs-consumer")
    assert row.max_established == 2, row
    assert row.max_close_wait == 0 and row.closed_peer == 0, row


def test_kafkajs_closes_at_once_when_the_broker_reaps_and_reopens_for_the_next_send(observed):
    row = _row(observed, "cb-kafkajs-idle")
    assert row.max_established == 1, row  # the bootstrap connection is reused, no leftover
    assert row.connections >= 2, row  # reaped after 10 s idle, re-opened at the next send
    assert row.max_close_wait == 0, row  # its side closed within the 1 s sampling
    assert row.max_idle_s >= BROKER_IDLE_MS / 1000 - 1.5, row
