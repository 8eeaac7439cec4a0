"""The job's JSON encoding, and the driver's one producer (job status records).

Everything else the job writes (records for the state query, aggregates, findings, dead letters)
goes through Spark's own Kafka writer on the executors (``pipeline``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

log = logging.getLogger(__name__)


class SinkError(RuntimeError):
    """Records could not be delivered."""


def encode(value: Mapping[str, Any]) -> bytes:
    """Compact, key-ordered UTF-8 JSON: equal records are equal bytes."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def dumps(value: Mapping[str, Any]) -> str:
    """``encode`` as text."""
    return encode(value).decode()


class KafkaSink:
    """An idempotent confluent-kafka producer in the driver; ``publish`` returns once every
    record is acknowledged and raises SinkError otherwise."""

    def __init__(self, bootstrap: str, conf: Mapping[str, str] | None = None) -> None:
        from confluent_kafka import Producer

        settings = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
        }
        settings.update(conf or {})
        self._producer = Producer(settings)
        self._failed: list[str] = []

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err}")

    def publish(
        self, topic: str, records: Sequence[tuple[str, dict[str, Any]]], timeout_s: float = 60.0
    ) -> None:
        from confluent_kafka import KafkaException

        for key, value in records:
            try:
                self._producer.produce(
                    topic, key=key.encode(), value=encode(value), on_delivery=self._on_delivery
                )
            except (BufferError, KafkaException) as exc:
                raise SinkError(f"{topic}: {exc}") from exc
            self._producer.poll(0)
        left = self._producer.flush(timeout_s)
        failed, self._failed = self._failed, []
        if left or failed:
            raise SinkError(f"{left} record(s) undelivered to {topic}; errors: {failed[:3]}")

    def close(self) -> None:
        self._producer.flush(10)
