"""Rate-limited logging: a repeated message is logged at most once per interval.

During a broker outage the Kafka client reports the same error many times a second; the
exporter still counts every one in its metrics, but logs each kind of message at most once per
interval. The next line of that kind says how many were held back meanwhile, and ``flush()``
reports repeats still held back once their interval is over, so the end of a burst is not lost.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 30.0


_Line = tuple[int, str, tuple[object, ...], BaseException | None]


@dataclass
class _Held:
    logged_at: float  # when a line of this kind was last logged
    held: int = 0  # repeats not logged since then
    last: _Line | None = None  # the latest repeat


class LogLimiter:
    """Logs each message kind (a caller-chosen key) at most once per ``interval_s``."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._kinds: dict[Hashable, _Held] = {}
        self._lock = threading.Lock()

    def log(
        self, key: Hashable, level: int, msg: str, *args: object, exc_info: bool = False
    ) -> bool:
        """Log ``msg % args`` unless ``key`` was logged within the interval; True if logged."""
        now = self._clock()
        with self._lock:
            kind = self._kinds.get(key)
            if kind is not None and now - kind.logged_at < self._interval_s:
                kind.held += 1
                kind.last = (level, msg, args, sys.exc_info()[1] if exc_info else None)
                return False
            held, since = (kind.held, now - kind.logged_at) if kind is not None else (0, 0.0)
            self._kinds[key] = _Held(logged_at=now)
        self._emit((level, msg, args, sys.exc_info()[1] if exc_info else None), held, since)
        return True

    def flush(self) -> int:
        """Log the latest held-back repeat of each kind whose interval is over; returns how many.

        Kinds with nothing held back and a finished interval are forgotten.
        """
        now = self._clock()
        due: list[tuple[_Line, int, float]] = []
        with self._lock:
            for key, kind in list(self._kinds.items()):
                if now - kind.logged_at < self._interval_s:
                    continue
                if kind.held and kind.last is not None:
                    due.append((kind.last, kind.held - 1, now - kind.logged_at))
                    self._kinds[key] = _Held(logged_at=now)
                else:
                    del self._kinds[key]
        for line, others, since in due:
            self._emit(line, others, since)
        return len(due)

    def _emit(self, line: _Line, held: int, since: float) -> None:
        level, msg, args, exc = line
        if held:
            msg += " (%d more like this in the last %.0f s not logged)"
            args = (*args, held, since)
        self._logger.log(level, msg, *args, exc_info=exc)
