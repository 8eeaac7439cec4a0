"""Where the job writes: Kafka (live job) or memory (replay).

Every Kafka write tells two kinds of failure apart. A record the cluster refuses for what it is
(too large for the topic, invalid) is dropped, logged once per topic and error, and counted in
the job status (``produce_errors``): failing the batch would fail it again after every restart.
A cluster that cannot take records at all (timeouts, no broker, no authorization) fails the
batch, which is retried once the job restarts, so nothing is lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import orjson

from streaming.job import worker

log = logging.getLogger(__name__)

# librdkafka error names that concern one record, not the cluster.
RECORD_ERRORS = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_MSG",
        "INVALID_MSG_SIZE",
        "INVALID_RECORD",
        "INVALID_TIMESTAMP",
        "CORRUPT_MESSAGE",
    }
)


class SinkError(RuntimeError):
    """Records could not be delivered; the batch fails and is retried after a restart."""


def is_record_error(err: Any) -> bool:
    """A KafkaError about the record itself: dropping the record is the only way forward."""
    return err.name() in RECORD_ERRORS and not err.fatal()


class ProduceErrors:
    """Records dropped by (topic, error name), cumulative since the job started. Thread-safe:
    delivery reports and the status listener run on different threads."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, topic: str, error: str, n: int = 1, detail: str = "") -> None:
        with self._lock:
            first = (topic, error) not in self._counts
            self._counts[(topic, error)] += n
        if first:  # once per topic and error: a flood of one error must not flood the log
            log.error(
                "dropped a record %s refuses (%s): %s; counted from now on", topic, error, detail
            )

    def totals(self) -> list[dict[str, Any]]:
        with self._lock:
            items = sorted(self._counts.items())
        return [{"topic": t, "error": e, "total": n} for (t, e), n in items]


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


class CounterParam:
    """Spark accumulator of ``{(topic, error): n}`` counts from the executors."""

    def zero(self, _value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 - Spark's API
        for k, n in b.items():
            a[k] = a.get(k, 0) + n
        return a


# One producer per executor Python process and settings. Spark reuses its Python workers from
# task to task, so a producer made per ``foreachPartition`` call would connect to every broker
# again for each partition of each batch: the connection churn connmon flags in others.
_SHARED: dict[tuple[str, tuple[tuple[str, str], ...]], KafkaSink] = {}
_SHARED_LOCK = threading.Lock()


def _shared_sink(bootstrap: str, conf: Mapping[str, str]) -> KafkaSink:
    key = (bootstrap, tuple(sorted((str(k), str(v)) for k, v in conf.items())))
    with _SHARED_LOCK:
        sink = _SHARED.get(key)
        if sink is None:
            sink = _SHARED[key] = KafkaSink(bootstrap, conf)
        return sink


def _drop_shared(sink: KafkaSink) -> None:
    with _SHARED_LOCK:
        for key in [k for k, v in _SHARED.items() if v is sink]:
            del _SHARED[key]


def _counts(sink: KafkaSink) -> dict[tuple[str, str], int]:
    return {(t["topic"], t["error"]): t["total"] for t in sink.errors.totals()}


@contextlib.contextmanager
def executor_sink(bootstrap: str, conf: Mapping[str, str], counts: Any) -> Iterator[KafkaSink]:
    """The process's producer for one ``foreachPartition`` call: the records it refused during
    the call are added to the ``CounterParam`` accumulator ``counts``. A producer that failed
    to deliver is closed and replaced at the next call."""
    worker.prepare()
    sink = _shared_sink(bootstrap, conf)
    before = _counts(sink)
    try:
        yield sink
    except BaseException:
        _drop_shared(sink)
        sink.close()
        raise
    finally:
        after = _counts(sink)
        counts.add({k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)})


def _encoded(key: str | None, value: str) -> tuple[bytes | None, bytes]:
    return (None if key is None else key.encode(), value.encode())


def produce_partition(
    topic: str, bootstrap: str, conf: Mapping[str, str], counts: Any, rows: Iterable[Any]
) -> None:
    """``foreachPartition`` body: write ``(key, value)`` rows from an executor (read by
    position: a Spark Row's attribute lookup is a list search)."""
    with executor_sink(bootstrap, conf, counts) as sink:
        sink.produce(topic, (_encoded(k, v) for k, v in rows))


def produce_kinds(
    topics: Mapping[str, str],
    bootstrap: str,
    conf: Mapping[str, str],
    counts: Any,
    rows: Iterable[Any],
) -> list[Any]:
    """``foreachPartition`` body for ``(kind, key, value)`` rows: each kind in
    ``topics`` written to its topic, in that order (aggregates before the findings about them);
    the rows of other kinds are returned."""
    by_kind: dict[str, list[tuple[bytes | None, bytes]]] = {k: [] for k in topics}
    other = []
    for r in rows:
        kind, key, value = r
        if kind in by_kind:
            by_kind[kind].append(_encoded(key, value))
        else:
            other.append(r)
    with executor_sink(bootstrap, conf, counts) as sink:
        for kind, topic in topics.items():
            if by_kind[kind]:
                sink.produce(topic, by_kind[kind])
    return other


POLL_EVERY = 1000  # records written between two polls for delivery reports (errors only)


class KafkaSink:
    """An idempotent confluent-kafka producer in the driver; ``publish`` returns once every
    record is acknowledged and raises SinkError otherwise."""

    def __init__(
        self,
        bootstrap: str,
        conf: Mapping[str, str] | None = None,
        errors: ProduceErrors | None = None,
    ) -> None:
        from confluent_kafka import Producer

        settings = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
            # Only failed deliveries call back into Python: the executors write every partial
            # row, aggregate and finding, and a callback per delivered record costs more than
            # the write.
            "delivery.report.only.error": True,
        }
        settings.update(conf or {})
        self._producer = Producer(settings)
        self.errors = errors if errors is not None else ProduceErrors()
        self._failed: list[str] = []

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            return
        if is_record_error(err):
            self.errors.add(msg.topic(), err.name(), detail=err.str())
        else:
            self._failed.append(f"{msg.topic()}: {err}")

    def publish(
        self, topic: str, records: Sequence[tuple[str, dict[str, Any]]], timeout_s: float = 60.0
    ) -> None:
        self.produce(topic, ((key.encode(), encode(value)) for key, value in records), timeout_s)

    def produce(
        self, topic: str, records: Iterable[tuple[bytes | None, bytes]], timeout_s: float = 60.0
    ) -> None:
        """Raw key/value pairs; returns once every record is acknowledged or dropped."""
        from confluent_kafka import KafkaException

        for i, (key, value) in enumerate(records):
            while True:
                try:
                    self._producer.produce(
                        topic, key=key, value=value, on_delivery=self._on_delivery
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain
                    self._producer.poll(0.5)
                except KafkaException as exc:  # refused before sending, e.g. over message.max.bytes
                    err = exc.args[0]
                    if not is_record_error(err):
                        raise SinkError(f"{topic}: {err}") from exc
                    self.errors.add(topic, err.name(), detail=err.str())
                    break
            if i % POLL_EVERY == 0:
                self._producer.poll(0)
        left = self._producer.flush(timeout_s)
        failed, self._failed = self._failed, []
        if left or failed:
            raise SinkError(f"{left} record(s) undelivered to {topic}; errors: {failed[:3]}")

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
