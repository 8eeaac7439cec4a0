"""Smoke tests: the three real systems of the local stack work together."""

from __future__ import annotations

import time

import pytest


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001 - confluent-kafka callback signature
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v.encode(), key=v.encode(), on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0, "messages still queued after flush"
    assert errors == []


def test_produce_and_consume_1000(kafka_cluster, unique_name):
    from confluent_kafka import Consumer

    from streaming.stack.kafka import create_topics

    create_topics(kafka_cluster.bootstrap_servers, {unique_name: 3})
    values = [f"m-{i}" for i in range(1000)]
    _produce(kafka_cluster.bootstrap_servers, unique_name, values)

    c = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": unique_name,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([unique_name])
    got: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 1000 and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
    finally:
        c.close()
    assert sorted(got) == sorted(values)


def test_spark_structured_streaming_reads_topic(kafka_cluster, spark, unique_name, tmp_path):
    from streaming.stack.kafka import create_topics

    create_topics(kafka_cluster.bootstrap_servers, {unique_name: 2})
    values = [f"v-{i}" for i in range(1000)]
    _produce(kafka_cluster.bootstrap_servers, unique_name, values)

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
        .option("subscribe", unique_name)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
    )
    query = (
        stream.writeStream.format("memory")
        .queryName(unique_name.replace("-", "_"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.sql(f"SELECT value FROM {unique_name.replace('-', '_')}").collect()
    assert sorted(r.value for r in rows) == sorted(values)


def test_prometheus_scrapes_client_endpoint(prometheus_factory):
    from prometheus_client import CollectorRegistry, Gauge, start_http_server

    from streaming.stack.ports import free_port

    registry = CollectorRegistry()
    g = Gauge("connmon_smoke_value", "A value for the smoke test.", ["kind"], registry=registry)
    g.labels(kind="smoke").set(42.5)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        prom = prometheus_factory({"smoke": [f"127.0.0.1:{port}"]})
        result = prom.wait_for('connmon_smoke_value{kind="smoke"}', timeout_s=60)
        assert float(result[0]["value"][1]) == pytest.approx(42.5)
        assert result[0]["metric"]["job"] == "smoke"
    finally:
        server.shutdown()
        thread.join(5)
