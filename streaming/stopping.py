"""Stop on SIGTERM or SIGINT, the same way for every long-running component.

The first signal only asks for a stop: the component's loop notices it, finishes or abandons its
current work, saves what it must, logs one line ("connmon job: stopped on SIGTERM") and exits 0.
A second signal while stopping exits at once with 128 + the signal's number, skipping the rest
of the cleanup: what was not saved is what a crash would lose.

Service managers signal every process of the service at once (systemd's default
``KillMode=control-group``; a terminal's Ctrl-C reaches the whole foreground process group), so
a component must not rely on the order in which its processes get the signal.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; the number for a signal Python does not name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


class StopSignal:
    """Handlers for ``STOP_SIGNALS`` that set ``event``; ``install()`` from the main thread."""

    def __init__(self, component: str) -> None:
        self.component = component
        self.event = threading.Event()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopSignal:
        """Install the handlers; again after a library replaced one (PySpark's SparkContext
        installs its own SIGINT handler)."""
        for sig in STOP_SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)
        return self

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True as soon as a stop was asked for."""
        return self.event.wait(timeout_s)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.event.is_set():
            # Not through logging: the handler may run while the main thread holds its lock.
            line = (
                f"connmon {self.component}: second {signal_name(signum)} while stopping, "
                "exiting now\n"
            )
            os.write(2, line.encode())
            os._exit(128 + signum)
        self.signum = signum
        self.event.set()

    def log_stopped(self, detail: str = "") -> None:
        """The one line saying the component stopped because of the signal."""
        if self.signum is None:
            return
        extra = f"; {detail}" if detail else ""
        log.info("connmon %s: stopped on %s%s", self.component, signal_name(self.signum), extra)
