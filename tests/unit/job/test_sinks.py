"""The executors' producer: one per Python worker process and settings, replaced after a
failure, with each call's refused records counted once."""

from __future__ import annotations

import pytest

from streaming.job import sinks

pytestmark = pytest.mark.unit

# No broker is contacted: a producer connects only when it has something to send.
SETTINGS = {"message.timeout.ms": "1000"}


class Accumulator:
    def __init__(self) -> None:
        self.added: list[dict] = []

    def add(self, value: dict) -> None:
        self.added.append(value)


@pytest.fixture(autouse=True)
def _empty_cache():
    sinks._SHARED.clear()
    yield
    sinks._SHARED.clear()


def test_calls_with_the_same_settings_share_one_producer() -> None:
    acc = Accumulator()
    with sinks.executor_sink("127.0.0.1:1", SETTINGS, acc) as a:
        pass
    with sinks.executor_sink("127.0.0.1:1", dict(SETTINGS), acc) as b:
        pass
    with sinks.executor_sink("127.0.0.1:2", SETTINGS, acc) as other:
        pass
    assert a is b
    assert other is not a


def test_each_call_counts_only_the_records_refused_during_it() -> None:
    acc = Accumulator()
    with sinks.executor_sink("127.0.0.1:1", SETTINGS, acc) as sink:
        sink.errors.add("t", "MSG_SIZE_TOO_LARGE", 2)
    with sinks.executor_sink("127.0.0.1:1", SETTINGS, acc) as sink:
        sink.errors.add("t", "MSG_SIZE_TOO_LARGE")
        sink.errors.add("u", "INVALID_RECORD")
    with sinks.executor_sink("127.0.0.1:1", SETTINGS, acc):
        pass
    assert acc.added == [
        {("t", "MSG_SIZE_TOO_LARGE"): 2},
        {("t", "MSG_SIZE_TOO_LARGE"): 1, ("u", "INVALID_RECORD"): 1},
        {},
    ]


def test_a_producer_that_failed_is_replaced() -> None:
    acc = Accumulator()
    with (
        pytest.raises(sinks.SinkError),
        sinks.executor_sink("127.0.0.1:1", SETTINGS, acc) as failed,
    ):
        raise sinks.SinkError("1 record(s) undelivered")
    with sinks.executor_sink("127.0.0.1:1", SETTINGS, acc) as fresh:
        pass
    assert fresh is not failed
