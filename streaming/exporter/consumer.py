"""Kafka edge: read the job's compacted topics from the beginning into the store.

No consumer group offsets are committed: every start (or a second exporter) reads each topic
from offset 0, and compaction keeps that cheap, so a restart restores the current values.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from streaming.exporter.parse import InvalidMessage, parse_aggregate, parse_finding, parse_status
from streaming.exporter.ratelimit import LogLimiter
from streaming.exporter.shard import Shard
from streaming.exporter.store import Store
from streaming.topics.acls import EXPORTER_GROUP_PREFIX

log = logging.getLogger(__name__)

PARTITION_REFRESH_S = 30.0
# Rejected messages are counted one by one; a flood of them is logged once per kind and interval.
_rejections = LogLimiter(log)


def handle(store: Store, role: str, key: bytes | None, value: bytes | None, where: str) -> None:
    """Apply one message of a topic role to the store; bad input is counted and kept aside.
    The message is counted once applied, so a scrape that counts it also serves what it says."""
    try:
        if value is None:
            if key is not None and role in ("aggregates", "findings"):
                store.delete(role, key)
        elif role == "aggregates":
            store.put_aggregate(parse_aggregate(value), key)
        elif role == "findings":
            store.put_finding(parse_finding(value), key)
        else:
            store.put_status(parse_status(value))
    except InvalidMessage as exc:
        _rejections.log(
            (role, exc.reason), logging.WARNING, "rejected %s message at %s: %s", role, where, exc
        )
        store.reject(role, exc.reason, exc.detail, where, value)
    finally:
        store.seen(role)


def error_kind(err: object) -> str:
    """A bounded name for a Kafka error (``KafkaError.name()``, e.g. ``_TRANSPORT``)."""
    name = getattr(err, "name", None)
    return str(name()) if callable(name) else type(err).__name__


class _ClientLog:
    """The Kafka client's own log, limited per level and facility.

    The client calls ``log(level, "%s [%s] %s", facility, client_name, text)``.
    """

    def __init__(self, limiter: LogLimiter) -> None:
        self._limiter = limiter

    def log(self, level: int, msg: str, *args: object) -> None:
        facility = args[0] if args else msg
        self._limiter.log(("client", level, facility), level, "librdkafka: " + msg, *args)


class TopicReader:
    """Consumes the topics (role -> topic name) on a background thread."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Mapping[str, str],
        store: Store,
        kafka_config: Mapping[str, str] | None = None,
        consumer_factory: Callable[[dict], object] | None = None,
        log_limiter: LogLimiter | None = None,
        shard: Shard | None = None,
    ) -> None:
        self._topics = dict(topics)
        self._role_by_topic = {t: r for r, t in self._topics.items()}
        self._store = store
        self._shard = shard or Shard()
        # While a broker is down the client reports errors many times a second.
        self._log = log_limiter or LogLimiter(log)
        self._conf = {
            "bootstrap.servers": bootstrap_servers,
            # A fresh group id: nothing is committed, positions come from assign().
            "group.id": f"{EXPORTER_GROUP_PREFIX}{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": self._on_error,
            # Delivered on the reading thread, during consume().
            "logger": _ClientLog(self._log),
            **dict(kafka_config or {}),
        }
        self._factory = consumer_factory
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._assigned: set[tuple[str, int]] = set()
        self._consumer = None

    def _on_error(self, err: object) -> None:
        self._store.consumer_error()
        self._log.log(
            ("consumer_error", error_kind(err)), logging.WARNING, "kafka consumer error: %s", err
        )

    def start(self) -> TopicReader:
        """Create the consumer now (a bad setting raises here) and consume on a thread."""
        if self._factory is not None:
            self._consumer = self._factory(self._conf)
        else:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self._conf)
        self._thread = threading.Thread(target=self.run, name="connmon-exporter-kafka", daemon=True)
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _refresh_assignment(self, consumer) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        new: list[TopicPartition] = []
        for topic in self._topics.values():
            try:
                meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
            except Exception as exc:  # KafkaException: broker unreachable, retried later
                self._log.log(
                    ("metadata", topic), logging.WARNING, "metadata for %s failed: %s", topic, exc
                )
                continue
            if meta is None or meta.error is not None or not meta.partitions:
                self._log.log(
                    ("unavailable", topic), logging.INFO, "topic %s not available yet", topic
                )
                continue
            for p in sorted(meta.partitions):
                if (topic, p) not in self._assigned:
                    new.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        if new:
            consumer.incremental_assign(new)
            self._assigned.update((tp.topic, tp.partition) for tp in new)
            log.info("reading %d new partition(s) from the beginning", len(new))

    def run(self) -> None:
        consumer = self._consumer
        assert consumer is not None, "start() creates the consumer"
        next_refresh = 0.0
        try:
            while not self._stop.is_set():
                self._log.flush()
                _rejections.flush()
                if time.monotonic() >= next_refresh:
                    self._refresh_assignment(consumer)
                    next_refresh = time.monotonic() + PARTITION_REFRESH_S
                for msg in consumer.consume(num_messages=1000, timeout=0.5):
                    if msg.error():
                        self._on_error(msg.error())
                        continue
                    role = self._role_by_topic.get(msg.topic())
                    if role is None or not self._shard.owns(role, msg.key()):
                        continue
                    where = f"{msg.topic()}/{msg.partition()}@{msg.offset()}"
                    try:
                        handle(self._store, role, msg.key(), msg.value(), where)
                    except Exception as exc:  # a bug must not stop the exporter; keep it aside
                        self._log.log(
                            ("processing_error", role, type(exc).__name__),
                            logging.ERROR,
                            "processing %s failed",
                            where,
                            exc_info=True,
                        )
                        self._store.reject(role, "processing_error", repr(exc), where, msg.value())
        finally:
            consumer.close()
