"""The exporter's current values: latest aggregate per series, active findings, job progress.

Bounded: at most ``series_limit`` entries (series + findings + job queries); updates for new
entries beyond that are refused and counted. Series not updated within the staleness limit are
removed, so a client x broker pair that disappeared does not keep its last value forever.
Thread-safe: the consumer thread writes, scrapes read a snapshot.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from streaming.exporter.parse import Aggregate, Finding, JobStatus, SeriesLabels

ROLES = ("aggregates", "findings", "job_status")


@dataclass(frozen=True)
class Rejected:
    """A message kept aside: where it came from, why, and the start of its bytes."""

    role: str
    reason: str
    detail: str
    where: str
    raw_head: bytes


@dataclass
class Snapshot:
    aggregates: list[Aggregate]
    findings: list[Finding]
    statuses: list[JobStatus]
    series_limit: int
    dropped: int
    expired: int
    messages: dict[str, int]
    invalid: dict[tuple[str, str], int]
    last_message: dict[str, float]
    consumer_errors: int


@dataclass
class Store:
    series_limit: int = 20000
    staleness_s: float = 300.0
    finding_staleness_s: float = 1800.0
    clock: Callable[[], float] = time.time
    rejected_keep: int = 100

    _aggs: dict[SeriesLabels, Aggregate] = field(default_factory=dict)
    _findings: dict[tuple[str, SeriesLabels], Finding] = field(default_factory=dict)
    _statuses: dict[tuple[str, str], JobStatus] = field(default_factory=dict)
    # Kafka message key -> our key, so a tombstone (null value) removes the right entry.
    _by_msg_key: dict[tuple[str, bytes], Hashable] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    dropped: int = 0
    expired: int = 0
    consumer_errors: int = 0
    messages: Counter = field(default_factory=Counter)
    invalid: Counter = field(default_factory=Counter)
    last_message: dict[str, float] = field(default_factory=dict)
    rejected: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.rejected = deque(maxlen=self.rejected_keep)

    # ---- writes ----------------------------------------------------------------------------
    def _size(self) -> int:
        return len(self._aggs) + len(self._findings) + len(self._statuses)

    def _admit(self, table: dict, key: Hashable) -> bool:
        if key in table or self._size() < self.series_limit:
            return True
        self.dropped += 1
        return False

    def seen(self, role: str) -> None:
        with self._lock:
            self.messages[role] += 1
            self.last_message[role] = self.clock()

    def reject(self, role: str, reason: str, detail: str, where: str, raw: bytes | None) -> None:
        with self._lock:
            self.invalid[(role, reason)] += 1
            self.rejected.append(Rejected(role, reason, detail, where, (raw or b"")[:512]))

    def consumer_error(self) -> None:
        with self._lock:
            self.consumer_errors += 1

    def put_aggregate(self, agg: Aggregate, msg_key: bytes | None = None) -> bool:
        """Keep ``agg`` unless it is stale, older than what we hold, or over the limit."""
        with self._lock:
            if self.clock() - agg.window_end > self.staleness_s:
                return False
            old = self._aggs.get(agg.labels)
            if old is not None and old.window_end > agg.window_end:
                return False
            if not self._admit(self._aggs, agg.labels):
                return False
            self._aggs[agg.labels] = agg
            if msg_key is not None:
                self._by_msg_key[("aggregates", msg_key)] = agg.labels
            return True

    def put_finding(self, finding: Finding, msg_key: bytes | None = None) -> bool:
        """A firing finding is kept (latest wins); a resolved one removes it."""
        key = (finding.kind, finding.labels)
        with self._lock:
            if not finding.firing:
                self._findings.pop(key, None)
                return True
            if self.clock() - finding.updated_at > self.finding_staleness_s:
                return False
            old = self._findings.get(key)
            if old is not None and old.updated_at > finding.updated_at:
                return False
            if not self._admit(self._findings, key):
                return False
            self._findings[key] = finding
            if msg_key is not None:
                self._by_msg_key[("findings", msg_key)] = key
            return True

    def put_status(self, status: JobStatus) -> bool:
        key = (status.job_id, status.query)
        with self._lock:
            old = self._statuses.get(key)
            if old is not None and old.timestamp > status.timestamp:
                return False
            if not self._admit(self._statuses, key):
                return False
            self._statuses[key] = status
            return True

    def delete(self, role: str, msg_key: bytes) -> None:
        """A tombstone: forget the entry the message key pointed at."""
        with self._lock:
            key = self._by_msg_key.pop((role, msg_key), None)
            if key is None:
                return
            table = self._aggs if role == "aggregates" else self._findings
            table.pop(key, None)  # type: ignore[call-overload]

    def expire(self) -> int:
        """Drop series and findings past their staleness limit; returns how many."""
        with self._lock:
            return self._expire_locked(self.clock())

    def _expire_locked(self, now: float) -> int:
        old_aggs = [k for k, a in self._aggs.items() if now - a.window_end > self.staleness_s]
        old_findings = [
            k for k, f in self._findings.items() if now - f.updated_at > self.finding_staleness_s
        ]
        for k in old_aggs:
            del self._aggs[k]
        for k in old_findings:
            del self._findings[k]
        n = len(old_aggs) + len(old_findings)
        self.expired += n
        if n:
            live = set(self._aggs) | set(self._findings)
            self._by_msg_key = {mk: k for mk, k in self._by_msg_key.items() if k in live}
        return n

    # ---- reads -----------------------------------------------------------------------------
    def size(self) -> int:
        with self._lock:
            return self._size()

    def snapshot(self) -> Snapshot:
        """Expire, then copy everything a scrape needs (records themselves are immutable)."""
        with self._lock:
            self._expire_locked(self.clock())
            return Snapshot(
                aggregates=list(self._aggs.values()),
                findings=list(self._findings.values()),
                statuses=list(self._statuses.values()),
                series_limit=self.series_limit,
                dropped=self.dropped,
                expired=self.expired,
                messages=dict(self.messages),
                invalid=dict(self.invalid),
                last_message=dict(self.last_message),
                consumer_errors=self.consumer_errors,
            )
