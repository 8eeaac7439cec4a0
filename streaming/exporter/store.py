"""The exporter's current values: latest aggregate per series, active findings, job progress.

Bounded: at most ``series_limit`` entries (series + findings + job queries). At the limit,
findings and the series they are about are kept before quiet series (those without a firing
finding), and among quiet series the most recent ones: the quiet series with the oldest window
end (ties: the smallest labels) makes way for a newer one or for a finding's, and a quiet
series older than every quiet one held is refused. The order is the same whatever order the
messages came in, so a restart at the limit serves the same set. Between findings and their
series, the entry that goes stale first (event time plus its kind's staleness limit) makes way.
Each refusal or eviction counts as dropped. Job statuses are few and always kept.
Series not updated within the staleness limit are removed, so a client x broker pair that
disappeared does not keep its last value forever. Thread-safe: the consumer thread writes, scrapes
read a snapshot.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from streaming.exporter.parse import Aggregate, Finding, JobStatus, SeriesLabels
from streaming.schema.findings import KINDS

ROLES = ("aggregates", "findings", "job_status")

# Table versions are unique across stores, so a cache keyed by them never mixes two stores up.
_versions = itertools.count(1)


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
    fired: dict[tuple[str, str], int]
    last_message: dict[str, float]
    consumer_errors: int
    shard: int = 0
    shards: int = 1
    # Change whenever the aggregates (findings) held change: equal versions, equal contents.
    aggregates_version: int = 0
    findings_version: int = 0


class _ByTime:
    """One table's entries ordered by event time, oldest first, as a lazy heap.

    An update pushes a new (time, key) and leaves the old one behind; entries whose time no
    longer matches the table are skipped when they reach the top, and the heap is rebuilt when
    such leftovers outnumber the live entries. Keys (tuples of strings) break ties in time, so
    the order does not depend on arrival.
    """

    def __init__(self, table: dict, time_of: Callable[[Any], float]) -> None:
        self.table = table
        self.time_of = time_of
        self._heap: list[tuple[float, Any]] = []

    def push(self, key: Hashable, t: float) -> None:
        heapq.heappush(self._heap, (t, key))
        if len(self._heap) > 2 * len(self.table) + 64:
            self._heap = [(self.time_of(v), k) for k, v in self.table.items()]
            heapq.heapify(self._heap)

    def pop_older(self, limit_s: float, now: float) -> Iterator[Hashable]:
        """Yield the live keys more than ``limit_s`` old; the caller removes each from the table.

        Only the heap's top is looked at when nothing is that old: O(1) per scrape.
        """
        heap = self._heap
        while heap and now - heap[0][0] > limit_s:
            t, key = heapq.heappop(heap)
            item = self.table.get(key)
            if item is not None and self.time_of(item) == t:
                yield key

    def oldest(self, skip: Callable[[Any], bool] | None = None) -> tuple[float, Any] | None:
        """(time, key) of the oldest live entry whose key ``skip`` does not exclude, or None."""
        heap = self._heap
        aside: list[tuple[float, Any]] = []
        try:
            while heap:
                t, key = heap[0]
                item = self.table.get(key)
                if item is None or self.time_of(item) != t:
                    heapq.heappop(heap)
                elif skip is not None and skip(key):
                    aside.append(heapq.heappop(heap))
                else:
                    return t, key
            return None
        finally:
            for entry in aside:
                heapq.heappush(heap, entry)


@dataclass
class Store:
    series_limit: int = 20000
    staleness_s: float = 300.0
    finding_staleness_s: float = 1800.0
    clock: Callable[[], float] = time.time
    rejected_keep: int = 100
    shard: int = 0  # this exporter's shard index, of ``shards``
    shards: int = 1

    _aggs: dict[SeriesLabels, Aggregate] = field(default_factory=dict)
    _findings: dict[tuple[str, SeriesLabels], Finding] = field(default_factory=dict)
    _statuses: dict[tuple[str, str], JobStatus] = field(default_factory=dict)
    # Kafka message key <-> our key, so a tombstone (null value) removes the right entry.
    _by_msg_key: dict[tuple[str, bytes], Hashable] = field(default_factory=dict)
    _msg_key_of: dict[tuple[str, Hashable], bytes] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Series labels -> firing findings held about them: those series are kept at the limit.
    _finding_series: Counter = field(default_factory=Counter)
    dropped: int = 0
    expired: int = 0
    consumer_errors: int = 0
    messages: Counter = field(default_factory=Counter)
    invalid: Counter = field(default_factory=Counter)
    # (kind, severity) -> findings fired since start; a record from before the start (the
    # topic is read from the beginning) is not counted again.
    fired: Counter = field(default_factory=Counter)
    started: float = field(init=False, repr=False)
    last_message: dict[str, float] = field(default_factory=dict)
    rejected: deque = field(default_factory=deque)
    _by_time: dict[str, _ByTime] = field(init=False, repr=False)
    _version: dict[str, int] = field(init=False, repr=False)  # per table role

    def __post_init__(self) -> None:
        self.rejected = deque(maxlen=self.rejected_keep)
        self.started = self.clock()
        self._by_time = {
            "aggregates": _ByTime(self._aggs, lambda a: a.window_end),
            "findings": _ByTime(self._findings, lambda f: f.updated_at),
        }
        self._version = {role: next(_versions) for role in self._by_time}

    # ---- writes ----------------------------------------------------------------------------
    def _size(self) -> int:
        return len(self._aggs) + len(self._findings) + len(self._statuses)

    def _changed(self, role: str) -> None:
        self._version[role] = next(_versions)

    def _protected(self, labels: SeriesLabels) -> bool:
        """A series with a firing finding held: kept before quiet series at the limit."""
        return self._finding_series[labels] > 0

    def _admit(self, table: dict, key: Hashable, role: str | None, t: float | None) -> bool:
        """Room for ``key`` of ``role`` with event time ``t`` (None: a job status, always kept)?

        At the limit a stale series or finding is expired to make room. Else, one is dropped:
        the oldest quiet series (no firing finding) makes way for a newer quiet series, a
        finding, a series with a finding or a job status; a quiet series older than it is
        refused. With no quiet series held, the entry that would go stale first makes way if it
        goes stale before the new one, else the new one is refused. Going stale (event time plus
        the role's staleness limit) rather than age decides there, so a firing finding, written
        on change and heartbeat only, is not pushed out by its series' newer windows.
        """
        if key in table or self._size() < self.series_limit:
            return True
        now = self.clock()
        limits = {"aggregates": self.staleness_s, "findings": self.finding_staleness_s}
        candidates: list[tuple[float, str, Hashable]] = []
        for name, by_time in self._by_time.items():
            oldest = by_time.oldest()
            if oldest is None:
                continue
            if now - oldest[0] > limits[name]:
                self._remove(name, oldest[1])
                self.expired += 1
                return True
            candidates.append((oldest[0] + limits[name], name, oldest[1]))
        self.dropped += 1
        new_quiet = role == "aggregates" and not self._protected(key)  # type: ignore[arg-type]
        quiet = self._by_time["aggregates"].oldest(skip=self._protected)
        if quiet is not None:
            if new_quiet and t is not None and (t, key) <= quiet:
                return False
            self._remove("aggregates", quiet[1])
            return True
        if new_quiet or not candidates:
            return False
        old_stale, old_role, old_key = min(candidates, key=lambda c: c[0])
        if t is not None and role is not None and old_stale >= t + limits[role]:
            return False
        self._remove(old_role, old_key)
        return True

    def _put(self, role: str, key: Hashable, item: object, t: float, msg_key: bytes | None) -> None:
        by_time = self._by_time[role]
        old = by_time.table.get(key)
        by_time.table[key] = item
        if old is None and role == "findings":
            self._finding_series[key[1]] += 1  # type: ignore[index]
        if old is None or by_time.time_of(old) != t:
            by_time.push(key, t)
        if msg_key is not None:
            self._link(role, key, msg_key)
        self._changed(role)

    def _remove(self, role: str, key: Hashable) -> None:
        del self._by_time[role].table[key]
        if role == "findings":
            labels = key[1]  # type: ignore[index]
            self._finding_series[labels] -= 1
            if self._finding_series[labels] <= 0:
                del self._finding_series[labels]
        msg_key = self._msg_key_of.pop((role, key), None)
        if msg_key is not None:
            del self._by_msg_key[(role, msg_key)]
        self._changed(role)

    def _link(self, role: str, key: Hashable, msg_key: bytes) -> None:
        """Point ``msg_key`` at ``key``; each keeps at most one partner."""
        old_key = self._by_msg_key.get((role, msg_key))
        if old_key == key:
            return
        if old_key is not None:
            del self._msg_key_of[(role, old_key)]
        old_msg_key = self._msg_key_of.get((role, key))
        if old_msg_key is not None:
            del self._by_msg_key[(role, old_msg_key)]
        self._by_msg_key[(role, msg_key)] = key
        self._msg_key_of[(role, key)] = msg_key

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
        """Keep ``agg`` unless it is stale, older than what we hold, or too old for the limit."""
        with self._lock:
            if self.clock() - agg.window_end > self.staleness_s:
                return False
            old = self._aggs.get(agg.labels)
            if old is not None and old.window_end > agg.window_end:
                return False
            if not self._admit(self._aggs, agg.labels, "aggregates", agg.window_end):
                return False
            self._put("aggregates", agg.labels, agg, agg.window_end, msg_key)
            return True

    def put_finding(self, finding: Finding, msg_key: bytes | None = None) -> bool:
        """A firing finding is kept (latest wins); a resolved one removes it."""
        key = (finding.kind, finding.labels)
        with self._lock:
            if finding.fired and finding.updated_at >= self.started:
                old = self._findings.get(key)
                # A batch the job ran again publishes its firing again: count it once.
                if old is None or old.first_fired_at != finding.first_fired_at:
                    # Kinds this version does not know share one label value: bounded.
                    kind = finding.kind if finding.kind in KINDS else "other"
                    self.fired[(kind, finding.severity)] += 1
            if not finding.firing:
                if key in self._findings:
                    self._remove("findings", key)
                return True
            if self.clock() - finding.updated_at > self.finding_staleness_s:
                return False
            old = self._findings.get(key)
            if old is not None and old.updated_at > finding.updated_at:
                return False
            if not self._admit(self._findings, key, "findings", finding.updated_at):
                return False
            self._put("findings", key, finding, finding.updated_at, msg_key)
            return True

    def put_status(self, status: JobStatus) -> bool:
        key = (status.job_id, status.query)
        with self._lock:
            old = self._statuses.get(key)
            if old is not None and old.timestamp > status.timestamp:
                return False
            if not self._admit(self._statuses, key, None, None):
                return False
            self._statuses[key] = status
            return True

    def delete(self, role: str, msg_key: bytes) -> None:
        """A tombstone: forget the entry the message key pointed at."""
        with self._lock:
            key = self._by_msg_key.get((role, msg_key))
            if key is not None:
                self._remove(role, key)

    def _expire_locked(self, now: float) -> int:
        """Drop series and findings past their staleness limit (every snapshot does)."""
        n = 0
        for role, limit in (
            ("aggregates", self.staleness_s),
            ("findings", self.finding_staleness_s),
        ):
            for key in self._by_time[role].pop_older(limit, now):
                self._remove(role, key)
                n += 1
        self.expired += n
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
                fired=dict(self.fired),
                last_message=dict(self.last_message),
                consumer_errors=self.consumer_errors,
                shard=self.shard,
                shards=self.shards,
                aggregates_version=self._version["aggregates"],
                findings_version=self._version["findings"],
            )
