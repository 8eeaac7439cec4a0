"""Where the driver writes the small outputs: Kafka (live job) or memory/JSON lines (replay)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import orjson


class SinkError(RuntimeError):
    """Records could not be delivered; the batch fails and is retried after a restart."""


class Sink(Protocol):
    def publish(self, topic: str, records: Sequence[tuple[str, dict[str, Any]]]) -> None: ...

    def close(self) -> None: ...


def encode(value: Mapping[str, Any]) -> bytes:
    """Compact, key-ordered UTF-8 JSON: equal records are equal bytes. orjson, because the
    driver encodes every aggregate and finding of a batch (see benchmarks/job/README.md)."""
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
        self._errors: list[str] = []

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def publish(
        self, topic: str, records: Sequence[tuple[str, dict[str, Any]]], timeout_s: float = 60.0
    ) -> None:
        for key, value in records:
            while True:
                try:
                    self._producer.produce(
                        topic,
                        key=key.encode(),
                        value=encode(value),
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain
                    self._producer.poll(0.5)
            self._producer.poll(0)
        left = self._producer.flush(timeout_s)
        errors, self._errors = self._errors, []
        if left or errors:
            raise SinkError(f"{left} record(s) undelivered to {topic}; errors: {errors[:3]}")

    def close(self) -> None:
        self._producer.flush(10)


class MemorySink:
    """Keeps what would be published, per topic, in order (replay and tests)."""

    def __init__(self) -> None:
        self.records: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    def publish(self, topic: str, records: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.records.setdefault(topic, []).extend(records)

    def close(self) -> None:
        pass
