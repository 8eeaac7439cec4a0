"""Repeated log lines are held back per kind and interval; every error is still counted."""

from __future__ import annotations

import logging

import pytest

from streaming.exporter import consumer
from streaming.exporter.consumer import TopicReader, handle
from streaming.exporter.ratelimit import LogLimiter
from streaming.exporter.samples import aggregate
from streaming.exporter.store import Store

LOGGER = "connmon.test.ratelimit"


@pytest.fixture
def limiter(clock) -> LogLimiter:
    return LogLimiter(logging.getLogger(LOGGER), interval_s=30.0, clock=clock)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_kind_is_logged_once_per_interval_with_the_count_held_back(
    limiter, clock, caplog
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    start = clock.t
    for i in range(20):  # one second of errors at 20 a second
        assert limiter.log("down", logging.WARNING, "broker down: %s", i) is (i == 0)
        clock.t += 0.05
    assert _lines(caplog) == ["broker down: 0"]
    clock.t = start + 30
    assert limiter.log("down", logging.WARNING, "broker down: %s", 20)
    assert _lines(caplog)[1] == "broker down: 20 (19 more like this in the last 30 s not logged)"
    assert limiter.log("down", logging.WARNING, "broker down: %s", 21) is False


def test_kinds_are_limited_separately(limiter, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    assert limiter.log("a", logging.WARNING, "a")
    assert limiter.log("b", logging.WARNING, "b")
    assert not limiter.log("a", logging.WARNING, "a")
    assert _lines(caplog) == ["a", "b"]


def test_flush_reports_the_end_of_a_burst_once_its_interval_is_over(limiter, clock, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    for i in range(5):
        limiter.log("down", logging.WARNING, "down %s", i)
    assert limiter.flush() == 0  # interval not over yet
    clock.t += 30
    assert limiter.flush() == 1
    assert _lines(caplog) == ["down 0", "down 4 (3 more like this in the last 30 s not logged)"]
    clock.t += 30
    assert limiter.flush() == 0  # nothing held back: the kind is forgotten
    assert limiter.log("down", logging.WARNING, "down again")
    assert _lines(caplog)[-1] == "down again"


def test_a_held_back_exception_keeps_its_traceback(limiter, clock, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    for i in range(2):
        try:
            raise ValueError(f"bug {i}")
        except ValueError:
            limiter.log("bug", logging.ERROR, "processing failed", exc_info=True)
    clock.t += 30
    limiter.flush()
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [str(r.exc_info[1]) for r in records] == ["bug 0", "bug 1"]


class KafkaError:
    """Stands in for confluent_kafka.KafkaError."""

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return f"{self._name}: 127.0.0.1:9092/1: Connect failed"


def test_consumer_errors_are_all_counted_but_logged_once_per_interval(clock, caplog) -> None:
    caplog.set_level(logging.INFO, logger="streaming.exporter.consumer")
    store = Store(clock=clock)
    limiter = LogLimiter(logging.getLogger("streaming.exporter.consumer"), 30.0, clock)
    reader = TopicReader("127.0.0.1:1", {"aggregates": "a"}, store, log_limiter=limiter)
    for _ in range(100):  # five seconds of an outage
        reader._on_error(KafkaError("_TRANSPORT"))
        reader._on_error(KafkaError("_ALL_BROKERS_DOWN"))
        clock.t += 0.05
    assert store.consumer_errors == 200
    logged = [r.getMessage() for r in caplog.records if "consumer error" in r.getMessage()]
    assert len(logged) == 2  # one line per error kind


def test_the_kafka_clients_own_log_is_limited_per_facility(clock, caplog) -> None:
    caplog.set_level(logging.INFO, logger="streaming.exporter.consumer")
    limiter = LogLimiter(logging.getLogger("streaming.exporter.consumer"), 30.0, clock)
    reader = TopicReader(
        "127.0.0.1:1", {"aggregates": "a"}, Store(clock=clock), log_limiter=limiter
    )
    client_log = reader._conf["logger"]  # what librdkafka calls
    for _ in range(100):
        client_log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "refused")
    client_log.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#consumer-1", "timed out")
    assert [r.getMessage() for r in caplog.records] == [
        "librdkafka: FAIL [rdkafka#consumer-1] refused",
        "librdkafka: REQTMOUT [rdkafka#consumer-1] timed out",
    ]


def test_rejected_messages_are_all_counted_and_logged_once_per_reason(
    clock, caplog, monkeypatch
) -> None:
    caplog.set_level(logging.INFO, logger="streaming.exporter.consumer")
    limiter = LogLimiter(logging.getLogger("streaming.exporter.consumer"), 30.0, clock)
    monkeypatch.setattr(consumer, "_rejections", limiter)
    store = Store(clock=clock)
    for i in range(50):
        handle(store, "aggregates", b"k", b"{nope", f"t/0@{i}")
        handle(store, "aggregates", b"k", aggregate(schema=7), f"t/0@{i}")
    assert store.invalid[("aggregates", "malformed_json")] == 50
    assert store.invalid[("aggregates", "unsupported_schema")] == 50
    logged = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(logged) == 2
    assert logged[0].startswith("rejected aggregates message at t/0@0: malformed_json")
