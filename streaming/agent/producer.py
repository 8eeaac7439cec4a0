"""Event outputs: Kafka (idempotent, compressed, batched, bounded) or JSON lines to a file.

The Kafka sink keeps a bounded local queue in front of librdkafka's own bounded buffer. When the
cluster is down the agent keeps scanning: the oldest queued events are dropped (counted by
reason) and messages that time out in librdkafka are counted too; delivery resumes by itself.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from streaming.agent.events import encode
from streaming.agent.metrics import AgentMetrics
from streaming.errors import ConfigError
from streaming.schema.events import MAX_EVENT_BYTES

log = logging.getLogger(__name__)

PRODUCER_DEFAULTS: dict[str, Any] = {
    "client.id": "connmon-agent",
    "enable.idempotence": True,
    "acks": "all",
    "compression.type": "lz4",
    "linger.ms": 200,
    "batch.num.messages": 10000,
    "message.timeout.ms": 120000,
}


# Waits between replacements of a producer that keeps failing fatally (doubling).
REPLACE_MIN_S, REPLACE_MAX_S = 5.0, 300.0


class KafkaSink:
    """Produce events to ``topic`` keyed by host."""

    def __init__(
        self,
        topic: str,
        key: str,
        kafka_config: Mapping[str, Any],
        metrics: AgentMetrics,
        queue_size: int = 10000,
        producer_factory: Callable[[dict], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from confluent_kafka import KafkaException, Producer

        self.topic = topic
        self.key = key.encode()
        self.metrics = metrics
        self.queue: collections.deque[tuple[str, bytes]] = collections.deque()
        self.queue_size = queue_size
        conf = dict(PRODUCER_DEFAULTS)
        conf["queue.buffering.max.messages"] = queue_size
        conf.update(kafka_config)
        conf["error_cb"] = self.on_error
        self._conf = conf
        self._factory = producer_factory or Producer
        try:
            self.producer = self._factory(conf)
        except KafkaException as exc:  # a bad librdkafka setting
            raise ConfigError(f"kafka: {exc.args[0].str()}") from None
        self.fatal: str | None = None
        self._clock = clock
        self._backoff_s = 0.0  # how long the last replacement holds off the next one
        self._replace_at = 0.0
        # Events handed to librdkafka and not yet reported. len(producer) would also count
        # librdkafka's own requests (InitProducerId with idempotence), so it is not used.
        self.inflight = 0

    def send(self, event: dict[str, Any]) -> None:
        try:
            value = encode(event)
        except (TypeError, ValueError):
            log.exception("cannot encode event %r", event.get("kind"))
            self.metrics.drop("encode_error")
            return
        if len(value) > MAX_EVENT_BYTES:  # the job would reject it; do not send it at all
            self.metrics.drop("too_large")
            return
        if len(self.queue) >= self.queue_size:
            self.queue.popleft()
            self.metrics.drop("queue_full")
        self.queue.append((event["kind"], value))

    def pump(self) -> None:
        """Hand queued events to librdkafka until its buffer is full; serve delivery reports."""
        if self.fatal is not None:
            # An idempotent producer's fatal error (e.g. fenced epoch) ends that instance; a new
            # one carries on. What the old one still held is lost and counted. A cause that
            # stays (a revoked ACL) would otherwise reconnect, TLS and SASL included, at every
            # scan from every agent of the fleet: replacements back off up to REPLACE_MAX_S.
            now = self._clock()
            if now < self._replace_at:
                self.metrics.queue.set(len(self.queue) + self.inflight)
                return
            if self.inflight:
                self.metrics.drop("producer_fatal", self.inflight)
            log.error("replacing the producer after a fatal error: %s", self.fatal)
            self.producer = self._factory(self._conf)
            self.fatal = None
            self.inflight = 0
            self._backoff_s = min(max(2 * self._backoff_s, REPLACE_MIN_S), REPLACE_MAX_S)
            self._replace_at = now + self._backoff_s
        from confluent_kafka import KafkaException

        produce = self.producer.produce
        while self.queue:
            kind, value = self.queue[0]
            try:
                produce(
                    self.topic,
                    value=value,
                    key=self.key,
                    on_delivery=functools.partial(self.on_delivery, kind),
                )
            except BufferError:
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():  # e.g. its idempotence refused: a new producer takes over
                    self.fatal = err.str()
                    break
                self.queue.popleft()
                self.metrics.drop("delivery_error")
                log.debug("cannot produce a %s event: %s", kind, err)
                continue
            self.inflight += 1
            self.queue.popleft()
            self.producer.poll(0)
        self.producer.poll(0)
        self.metrics.queue.set(len(self.queue) + self.inflight)

    def on_delivery(self, kind: str, err: Any, msg: Any) -> None:
        """Delivery report: count the event as produced, or as dropped with the reason."""
        self.inflight -= 1
        if err is None:
            self.metrics.produced.labels(kind).inc()
            self._backoff_s = 0.0  # this producer works: a later fatal error is replaced at once
            return
        self.metrics.delivery_errors.inc()
        from confluent_kafka import KafkaError

        timed_out = err.code() == KafkaError._MSG_TIMED_OUT
        self.metrics.drop("delivery_timeout" if timed_out else "delivery_error")
        log.debug("delivery failed for a %s event: %s", kind, err)

    def on_error(self, err: Any) -> None:
        """Client-level errors (all brokers down, auth): logged; librdkafka keeps retrying."""
        if err.fatal():
            self.fatal = str(err)
            log.error("fatal producer error: %s", err)
        else:
            log.warning("producer: %s", err)

    def close(self, timeout_s: float = 10.0) -> int:
        """Flush with a timeout; returns (and counts as dropped) the events still undelivered."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.pump()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            pending = self.producer.flush(min(left, 0.5))
            if not self.queue and pending == 0:
                break
        remaining = self.inflight + len(self.queue)
        if remaining:
            self.metrics.drop("shutdown", remaining)
        self.queue.clear()
        return remaining


class StreamSink:
    """JSON lines to a file object (``--output -`` is stdout)."""

    def __init__(self, stream: IO[str], metrics: AgentMetrics) -> None:
        self.stream = stream
        self.metrics = metrics

    def send(self, event: dict[str, Any]) -> None:
        try:
            value = encode(event)
        except (TypeError, ValueError):
            self.metrics.drop("encode_error")
            return
        if len(value) > MAX_EVENT_BYTES:
            self.metrics.drop("too_large")
            return
        self.stream.write(value.decode() + "\n")
        self.metrics.produced.labels(event["kind"]).inc()

    def pump(self) -> None:
        self.stream.flush()

    def close(self, timeout_s: float = 10.0) -> int:
        self.stream.flush()
        return 0
