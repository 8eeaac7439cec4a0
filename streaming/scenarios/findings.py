"""Read ``connmon.findings`` from the beginning and keep the latest state per finding key.

``FindingsBoard.fold`` is pure (one decoded message in, board updated); ``FindingsReader`` is
the consumer thread around it. Malformed messages are counted and kept aside, never fatal.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FindingsBoard:
    """Latest finding per key, every message seen, and the malformed ones kept aside."""

    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    first_firing: dict[tuple[str, str, str], float] = field(default_factory=dict)
    malformed: list[tuple[str, bytes]] = field(default_factory=list)

    def fold(self, key: bytes | None, value: bytes | None, seen_at: float) -> None:
        if value is None:  # a tombstone: the finding was removed
            if key is not None:
                self.latest.pop(key.decode(errors="replace"), None)
            return
        try:
            f = json.loads(value)
            if not isinstance(f, dict) or "kind" not in f or "status" not in f:
                raise ValueError("not a finding object")
        except ValueError as exc:
            self.malformed.append((str(exc), value))
            return
        k = f.get("key") or (key.decode(errors="replace") if key else f"{f['kind']}|?")
        self.latest[k] = f
        self.history.append(f)
        if f.get("status") == "firing":
            who = (f["kind"], str(f.get("app")), str(f.get("side")))
            self.first_firing.setdefault(who, seen_at)

    def active(self) -> list[dict[str, Any]]:
        return sorted(
            (f for f in self.latest.values() if f.get("status") == "firing"),
            key=lambda f: (str(f.get("app")), str(f.get("broker_id")), f["kind"]),
        )

    def ever_fired(
        self,
        kind: str | None,
        app: str,
        side: str = "client",
        exclude: frozenset = frozenset(),
        cluster: str | None = None,
    ) -> list[dict]:
        """Firing messages for ``app`` (``"*"``: any app not in ``exclude``) on ``side`` (``"*"``:
        either) of ``kind`` (None: any kind) for ``cluster`` (None: any) seen so far."""
        return [
            f
            for f in self.history
            if f.get("status") == "firing"
            and (f.get("app") == app if app != "*" else f.get("app") not in exclude)
            and (side == "*" or f.get("side", "client") == side)
            and (kind is None or f.get("kind") == kind)
            and (cluster is None or f.get("cluster") == cluster)
        ]

    def firing_starts(self, key: str) -> int:
        """How many times the finding ``key`` went from not firing to firing: 1 for a finding
        that fired once (resolved or not since), more for one that flapped."""
        starts, firing = 0, False
        for f in self.history:
            if f.get("key") != key:
                continue
            now = f.get("status") == "firing"
            starts += now and not firing
            firing = now
        return starts


class FindingsReader:
    """A consumer thread folding the findings topic into a board."""

    def __init__(self, bootstrap: str, topic: str = "connmon.findings") -> None:
        self.board = FindingsBoard()
        self._bootstrap, self._topic = bootstrap, topic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="findings", daemon=True)
        self.errors: list[str] = []

    def start(self) -> FindingsReader:
        self._thread.start()
        return self

    def _loop(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": f"connmon-scenarios-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([self._topic])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                    continue
                with self._lock:
                    self.board.fold(msg.key(), msg.value(), time.time())
        finally:
            consumer.close()

    def active(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.board.active())

    def ever_fired(
        self,
        kind: str | None,
        app: str,
        side: str = "client",
        exclude: frozenset = frozenset(),
        cluster: str | None = None,
    ) -> list[dict]:
        with self._lock:
            return self.board.ever_fired(kind, app, side, exclude, cluster)

    def firing_starts(self, key: str) -> int:
        with self._lock:
            return self.board.firing_starts(key)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
