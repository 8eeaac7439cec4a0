"""The SIGTERM/SIGINT stop shared by the agent, the job and the exporter."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from streaming.stopping import StopSignal, signal_name


@pytest.fixture
def handlers() -> Iterator[dict[int, object]]:
    """The handlers before the test, checked to be back after it."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield before
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_signal_names() -> None:
    assert (signal_name(signal.SIGTERM), signal_name(signal.SIGINT)) == ("SIGTERM", "SIGINT")
    assert signal_name(999) == "999"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_asks_for_a_stop_and_the_one_line_names_it(
    sig: int, handlers: dict[int, object], caplog: pytest.LogCaptureFixture
) -> None:
    stop = StopSignal("agent").install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), sig)
        assert stop.wait(10) and stop.signum == sig
        with caplog.at_level(logging.INFO, logger="streaming.stopping"):
            stop.log_stopped("3 event(s) not delivered")
    finally:
        stop.restore()
    name = signal_name(sig)
    assert caplog.messages == [f"connmon agent: stopped on {name}; 3 event(s) not delivered"]


def test_no_line_without_a_signal(
    handlers: dict[int, object], caplog: pytest.LogCaptureFixture
) -> None:
    stop = StopSignal("exporter").install()
    stop.restore()
    with caplog.at_level(logging.INFO, logger="streaming.stopping"):
        stop.log_stopped()
    assert caplog.messages == []


def test_installing_again_takes_back_a_replaced_handler(handlers: dict[int, object]) -> None:
    stop = StopSignal("job").install()
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as PySpark's SparkContext does
        stop.install()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(10) and stop.signum == signal.SIGINT
    finally:
        stop.restore()  # the handlers from before the first install


def test_a_second_signal_while_stopping_exits_at_once() -> None:
    script = (
        "import time\n"
        "from streaming.stopping import StopSignal\n"
        "stop = StopSignal('job').install()\n"
        "print('ready', flush=True)\n"
        "stop.wait(60)\n"
        "print('stopping', flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline() == "ready\n"
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline() == "stopping\n"
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 128 + signal.SIGTERM
        assert p.stderr.read() == "connmon job: second SIGTERM while stopping, exiting now\n"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
