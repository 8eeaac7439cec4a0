"""The job's per-series state, split into buckets that Spark's state store keeps and its
executors process in parallel (the state query, ``pipeline``).

A series belongs to bucket ``hash(series) mod buckets`` (``bucket_column``). A bucket's state is
the open windows (``open_windows.OpenWindows``), the detectors' history and the firing findings
(``tracker.Tracker``) of its series: one value in the state store, read and written once per
batch that touches the bucket. Spark calls a Python stateful processor once per key and batch
(a quarter of a millisecond each, measured), so a key per series would not keep up with a
fleet; a bucket of series amortises that call.

The ingest query writes a bucket's partial rows of a batch as a few records (``ingest``), each
holding every row of its series, so a series always applies an ingest batch whole. A record
carries the batch's id and its part (which pass over the batch, which share of the series), and
the bucket remembers the newest batch and the parts of it it applied: a batch the ingest query
runs again after a crash is skipped. A record also carries the fleet's event time before its
batch, against which its rows are judged late or not, as if one process read every batch in
turn (the state query may read one ingest batch's records across two of its own batches).

Quiet buckets learn the fleet's event time from Spark's event-time watermark over the records'
newest event times: each bucket that holds anything sets an event-time timer for the next window
boundary, so its windows close and its findings resolve as when one process held every series.
The event-time column ends at the watermark (``pipeline.state_stream``), so Spark drops no row as
late: lateness is judged per window, against the fleet's time before each ingest batch.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson

from streaming.detectors.config import DetectorConfig
from streaming.job import worker
from streaming.job.clocks import HostBatch
from streaming.job.open_windows import SERIES, OpenWindows
from streaming.job.records import to_aggregates
from streaming.job.sinks import dumps
from streaming.job.tracker import Tracker
from streaming.schema.aggregates import Aggregate
from streaming.schema.status import INTERNAL_ERROR, STATE_UNREADABLE, dead_letter, error_detail
from streaming.schema.times import iso, iso_now

if TYPE_CHECKING:
    from pyspark.sql import Column

log = logging.getLogger(__name__)

# What the state query emits: records for the aggregates and findings topics, and, when there
# is something to count, one row with ``topic`` null holding the bucket's ``Emitted.stats``.
OUTPUT_SCHEMA = "topic string, key string, value string"
STATE_SCHEMA = "state binary"
# A saved bucket: the JSON's length (8 bytes, little-endian), then the JSON as a zstd frame
# (level 1, through pyarrow, which the executors load anyway). On this JSON zstd takes about half
# of zlib's CPU both ways and its output is a quarter smaller.
_LENGTH = 8
_MAX_JSON = 1 << 31  # a length beyond this is not a saved bucket's


@functools.cache
def _zstd() -> Any:
    import pyarrow as pa

    return pa.Codec("zstd", compression_level=1)


def compress(raw: bytes) -> bytes:
    """A bucket's JSON as it is saved."""
    return len(raw).to_bytes(_LENGTH, "little") + _zstd().compress(raw, asbytes=True)


def decompress(blob: bytes) -> bytes:
    """The JSON of a saved bucket."""
    size = int.from_bytes(blob[:_LENGTH], "little")
    if len(blob) <= _LENGTH or size > _MAX_JSON:
        raise ValueError(f"not a saved bucket: {len(blob)} bytes, length field {size}")
    return _zstd().decompress(memoryview(blob)[_LENGTH:], decompressed_size=size, asbytes=True)


def bucket_column(buckets: int) -> Column:
    """The bucket of a partial row's series (Spark's xxhash64 of the series fields)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*[F.col(k) for k in SERIES]), F.lit(buckets)).cast("int")


def wall_clock(_agg: Aggregate) -> str:
    """Now (for state built outside a micro-batch, e.g. a migration)."""
    return iso_now()


# A clock per micro-batch: ``make_processor`` gives it the state query's batch time (ms).
BatchClock = Callable[[int], Callable[[Aggregate], str]]


def batch_clock(batch_ms: int) -> Callable[[Aggregate], str]:
    """``updated_at`` of the live job: the state query's micro-batch time, which Spark keeps
    in its offset log with the batch. A batch run again after a crash (its output written, its
    commit not) stamps its records as the first run did, so its second copy on a topic is
    byte for byte the first. Spark gives no time before the first batch (<= 0): now."""
    if batch_ms <= 0:
        return wall_clock
    when = iso(batch_ms / 1000.0)
    return lambda _agg: when


def window_end_clock(agg: Aggregate) -> str:
    """``updated_at`` of a replay: the window's end, so a replay is deterministic."""
    return agg.window_end


def at_window_end(_batch_ms: int) -> Callable[[Aggregate], str]:
    """A replay's ``BatchClock``: every batch stamps with the window's end."""
    return window_end_clock


class Record(NamedTuple):
    """One ingest batch's partial rows of one bucket (JSON lines), as the state query reads
    them. ``now``: the job's clock when that batch started (None in a replay); ``fleet``: the
    fleet's newest event time before that batch (None for the first after a start)."""

    batch: int
    part: int
    now: float | None
    fleet: float | None
    rows: str


@dataclass
class Applied:
    """The newest ingest batch a bucket applied: which of its parts, and the fleet's newest
    event time before it, which judges every part of it (a part may come in a later call)."""

    batch: int
    parts: list[int]
    newest_before: float | None


@dataclass
class Emitted:
    """What one bucket publishes for a call: aggregates, then findings, and what it counted."""

    aggregates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    findings: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    dead_letters: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    late: int = 0  # events whose window had closed
    duplicates: int = 0  # records of an ingest batch already applied (run again after a crash)
    hosts: dict[str, HostBatch] = field(default_factory=dict)  # hosts late or ahead only
    # The bucket's size once saved: (bucket, series, bytes); set by the Spark processor.
    size: tuple[int, int, int] | None = None
    shed: int = 0  # series forgotten at the bucket's series limit (``Bucket.shed``)

    def stats(self) -> dict[str, Any] | None:
        """The counts for the driver; None when there is nothing to count."""
        if not (self.late or self.duplicates or self.hosts or self.dead_letters or self.size):
            return None
        hosts = {h: b.to_dict() for h, b in self.hosts.items()}
        out = {
            "late": self.late,
            "duplicates": self.duplicates,
            "hosts": hosts,
            "internal_errors": len(self.dead_letters),
        }
        if self.size is not None:
            out.update(zip(("bucket", "series", "bytes"), self.size, strict=True))
            out["shed"] = self.shed
        return out

    def absorb(self, other: Emitted) -> None:
        """Add what ``other`` (a later call on the same bucket) publishes and counts."""
        self.aggregates += other.aggregates
        self.findings += other.findings
        self.dead_letters += other.dead_letters
        self.late += other.late
        self.duplicates += other.duplicates
        for host, b in other.hosts.items():
            self.hosts.setdefault(host, HostBatch()).merge(b.to_dict())


class Bucket:
    """The windows, history and firing findings of one bucket's series."""

    def __init__(self, cfg: DetectorConfig, clock: Callable[[Aggregate], str]) -> None:
        self.cfg = cfg
        self.windows = OpenWindows(cfg.window_s, cfg.watermark_s)
        self.tracker = Tracker(cfg, clock)
        self.applied: Applied | None = None  # the newest ingest batch it applied
        self.timer_ms: int | None = None  # the event-time timer set in Spark (watermark, ms)
        # the window boundary (s) of a time step that failed (a bug, set aside as a dead
        # letter): it and the boundaries before it count as judged
        self.failed_s: float | None = None

    @classmethod
    def load(
        cls, blob: bytes | None, cfg: DetectorConfig, clock: Callable[[Aggregate], str]
    ) -> Bucket:
        b = cls(cfg, clock)
        if blob is not None:
            doc = orjson.loads(decompress(blob))
            b.windows.load_state(doc["windows"])
            b.tracker.load_state(doc["tracker"])
            applied = doc["applied"]
            b.applied = None if applied is None else Applied(*applied)
            b.timer_ms = doc["timer_ms"]
            b.failed_s = doc.get("failed_s")
        return b

    def dump(self) -> bytes:
        doc = {
            "windows": self.windows.to_state(),
            "tracker": self.tracker.to_state(),
            "applied": None if self.applied is None else dataclasses.astuple(self.applied),
            "timer_ms": self.timer_ms,
        }
        if self.failed_s is not None:
            doc["failed_s"] = self.failed_s
        return compress(orjson.dumps(doc))

    def shed(self, limit: int | None) -> int:
        """Keep at most ``limit`` series; returns how many were forgotten. Series without a
        firing finding go first, the one seen longest ago first (a client that went away, or
        an address that churned); a series with a firing finding is kept, so the finding still
        resolves. A series forgotten that comes back starts anew, without history."""
        t = self.tracker
        over = 0 if limit is None else len(t.history) - limit
        if over <= 0:
            return 0
        firing = t.firing_series()
        quiet = sorted(
            (s for s in t.history if s not in firing),
            key=lambda s: (t.history.newest_end(s), s),
        )[:over]
        gone = set(quiet)
        t.forget(gone)
        self.windows.drop(gone)
        return len(gone)

    def series(self) -> int:
        """Series the bucket holds (each has its windows in the detectors' history)."""
        return len(self.tracker.history)

    def empty(self) -> bool:
        """Nothing left to remember: the state can be dropped (an ingest batch written again
        after that would be applied again, but a bucket is only emptied long after its last
        rows, when its windows, history and findings have all expired)."""
        t = self.tracker
        return not (self.windows.open or t.history or t.findings)

    def process(self, records: Iterable[Record], fleet_s: float | None) -> Emitted:
        """Apply the ingest batches' records in batch order, each whole and judged against
        the fleet's event time before it; then move the fleet's event time on to ``fleet_s``
        (from Spark's watermark; None before it has one): windows close, findings of quiet
        series resolve. Without records (a timer), only the latter."""
        em = self.apply_records(records)
        self._advance(fleet_s, em)
        return em

    def apply_records(self, records: Iterable[Record]) -> Emitted:
        """``process`` but the last step: the records, each ingest batch after the time step
        to the fleet's time before it."""
        em = Emitted()
        ordered = sorted(records, key=lambda r: (r.batch, r.part))
        for batch, group in itertools.groupby(ordered, key=lambda r: r.batch):
            new = []
            for r in group:
                if self._seen(r):
                    em.duplicates += 1
                else:
                    new.append(r)
            if not new:
                continue
            if self.applied is None or self.applied.batch != batch:
                self._advance(new[0].fleet, em)
                self.applied = Applied(batch, [], self.windows.max_event_s)
            rows = [orjson.loads(line) for r in new for line in r.rows.split("\n")]
            self._apply(rows, new[0].now, self.applied.newest_before, em)
            self.applied.parts.extend(r.part for r in new)
        return em

    def _seen(self, r: Record) -> bool:
        """Applied already: a record of an older batch, or a part of the newest one (a batch
        is written whole before the next, so its records come before the next batch's)."""
        a = self.applied
        return a is not None and (r.batch < a.batch or (r.batch == a.batch and r.part in a.parts))

    def _advance(self, fleet_s: float | None, em: Emitted) -> None:
        """The fleet's event time moved on to ``fleet_s``: once it is in a later window than
        the findings were last judged in, windows close, quiet series' findings resolve."""
        self.windows.advance(fleet_s)
        boundary = self._next_boundary()
        if boundary is None or (self.failed_s is not None and boundary <= self.failed_s):
            return
        if (self.tracker.max_window_end or "") < iso(boundary):
            self._apply([], None, "own", em)
        self.failed_s = None

    def _apply(
        self,
        partials: list[dict[str, Any]],
        now: float | None,
        newest_before: float | None | Literal["own"],
        em: Emitted,
    ) -> None:
        """One ingest batch's rows (or none) through windows, detectors, findings; late or not
        against the fleet's time ``newest_before`` the batch ("own": the windows' own)."""
        result = self.windows.apply(partials, bound=now, newest_before=newest_before)
        em.late += result.late
        self._count_hosts(partials, result.late_by_host, now, em)
        aggs, host_rates = to_aggregates(result.windows, self.cfg.window_s)
        out = self.tracker.process(aggs, host_rates, fleet_end=self._fleet_end())
        em.aggregates += [(a.series, a.to_dict()) for a in out.aggregates]
        em.findings += [(f.key, f.to_dict()) for f in out.findings]

    def _count_hosts(
        self,
        partials: list[dict[str, Any]],
        late: Mapping[str, int],
        now: float | None,
        em: Emitted,
    ) -> None:
        """Hosts with late events or a clock ahead of the job's (``clocks``): in a healthy
        fleet, none, and nothing is built."""
        ahead_after = None if now is None else now + self.cfg.clock_skew_tolerance_s
        report = set(late)
        if ahead_after is not None:
            report.update(p["host"] for p in partials if (p.get("last_event_s") or 0) > ahead_after)
        if not report:
            return
        # One pass over the rows: after an outage most hosts are late at once.
        newest: dict[str, float] = {}
        events: dict[str, int] = {}
        for p in partials:
            host = p["host"]
            if host in report:
                t = p.get("last_event_s") or 0.0
                newest[host] = max(newest.get(host, t), t)
                events[host] = events.get(host, 0) + int(p.get("events") or 0)
        for host in report:
            t = newest.get(host)
            offset = None if now is None or t is None else t - now
            em.hosts.setdefault(host, HostBatch()).add(
                events.get(host, 0), late.get(host, 0), offset
            )

    def _next_boundary(self, fleet_s: float | None = None) -> float | None:
        """The end of the window the bucket's newest event time is in (seconds); with
        ``fleet_s``, the one a time step to it would judge up to (``_advance``)."""
        t = self.windows.max_event_s
        if fleet_s is not None and (t is None or fleet_s > t):
            t = fleet_s
        if t is None:
            return None
        w = self.cfg.window_s
        return (math.floor(t / w) + 1) * w

    def _fleet_end(self) -> str | None:
        end = self._next_boundary()
        return None if end is None else iso(end)

    def next_timer_ms(self) -> int | None:
        """When Spark should call this bucket without rows: once the watermark says the fleet's
        event time passed the next window boundary (windows close, stale findings resolve,
        history expires); None when the bucket holds nothing. After a time step failed, not
        before its boundary: the watermark passed the boundaries before it."""
        end = self._next_boundary()
        if end is None or self.empty():
            return None
        if self.failed_s is not None and end < self.failed_s:
            end = self.failed_s
        return int(round(end * 1000))


def process_or_set_aside(
    saved: bytes | None,
    records: list[Record],
    fleet_s: float | None,
    cfg: DetectorConfig,
    clock: Callable[[Aggregate], str],
    latest_only: bool,
    where: str,
) -> tuple[Bucket, Emitted]:
    """``Bucket.process`` on the bucket ``saved``, such that neither a record nor the bucket's
    state can stop the job. ``where`` names the bucket in dead-letter keys and the log;
    ``latest_only``: of each series only its newest aggregate (for a compacted topic).

    A saved state that cannot be read is set aside (``load_or_set_aside``) and the bucket
    starts empty. When processing fails (a bug), it is done again step by step from the saved
    state: each record, and each time step (the fleet's time moving on to a later window:
    windows close, findings resolve), on its own. A record that fails is left out and becomes
    an ``internal_error`` dead letter (its rows as ``raw``, the exception as ``detail``, key
    ``<where>:<batch>:<part>``); a time step that fails becomes one (key
    ``<where>:time:<window boundary>``, no ``raw``), the bucket keeps what it was before the
    step and counts the boundary as judged (``Bucket.failed_s``): the next boundary is tried
    as usual, this one never again."""
    bucket, letter = load_or_set_aside(saved, cfg, clock, where)
    try:
        em = bucket.process(records, fleet_s)
    except Exception:
        log.exception("%s: processing failed; doing it again step by step", where)
    else:
        if letter is not None:
            em.dead_letters.insert(0, letter)
        return bucket, _latest(em) if latest_only else em
    bucket = Bucket.load(None if letter is not None else saved, cfg, clock)
    em = Emitted()
    if letter is not None:
        em.dead_letters.append(letter)
    for r in sorted(records, key=lambda r: (r.batch, r.part)):
        if not bucket._seen(r) and (bucket.applied is None or bucket.applied.batch != r.batch):
            bucket = _step_or_set_aside(bucket, r.fleet, em, where)
        before = bucket.dump()
        try:
            em.absorb(bucket.apply_records([r]))
        except Exception as exc:
            bucket = Bucket.load(before, cfg, clock)
            _set_aside(em, f"{where}:{r.batch}:{r.part}", INTERNAL_ERROR, exc, r.rows.encode())
    bucket = _step_or_set_aside(bucket, fleet_s, em, where)
    return bucket, _latest(em) if latest_only else em


def _step_or_set_aside(bucket: Bucket, fleet_s: float | None, em: Emitted, where: str) -> Bucket:
    """The fleet's time moved on to ``fleet_s`` (``Bucket._advance``); should that fail, the
    bucket as it was before, its step's boundary counted as judged, and a dead letter."""
    before = bucket.dump()
    step = Emitted()
    try:
        bucket._advance(fleet_s, step)
    except Exception as exc:
        bucket = Bucket.load(before, bucket.cfg, bucket.tracker.clock)
        boundary = bucket._next_boundary(fleet_s)
        if boundary is not None:
            bucket.failed_s = boundary
        key = f"{where}:time:{'none' if boundary is None else iso(boundary)}"
        _set_aside(em, key, INTERNAL_ERROR, exc, None)
        return bucket
    em.absorb(step)
    return bucket


def load_or_set_aside(
    saved: bytes | None,
    cfg: DetectorConfig,
    clock: Callable[[Aggregate], str],
    where: str,
) -> tuple[Bucket, tuple[str, dict[str, Any]] | None]:
    """``Bucket.load``; a saved state it cannot read (corrupt bytes, a document of another
    version) gives an empty bucket and a ``state_unreadable`` dead letter (key
    ``<where>:state``) carrying the saved bytes as ``raw`` and the error as ``detail``."""
    try:
        return Bucket.load(saved, cfg, clock), None
    except Exception as exc:
        log.exception("%s: its saved state cannot be read; it starts empty", where)
        em = Emitted()
        _set_aside(em, f"{where}:state", STATE_UNREADABLE, exc, saved)
        return Bucket(cfg, clock), em.dead_letters[0]


def _set_aside(em: Emitted, key: str, reason: str, exc: Exception, raw: bytes | None) -> None:
    log.error("%s: set aside as a dead letter (%s): %s", key, reason, error_detail(exc))
    em.dead_letters.append((key, dead_letter(reason, error_detail(exc), raw, iso_now())))


def _latest(em: Emitted) -> Emitted:
    """Only each series' newest aggregate: the topic is compacted, so the others would only be
    overwritten."""
    em.aggregates = list(dict(em.aggregates).items())
    return em


def output_rows(em: Emitted, topics: Mapping[str, str]) -> Iterator[tuple[Any, ...]]:
    """One bucket's ``Emitted`` as rows of ``OUTPUT_SCHEMA``: ``topics`` names the topic of
    each kind (``aggregates``, ``findings``, ``deadletter``)."""
    for kind, records in (
        ("aggregates", em.aggregates),
        ("findings", em.findings),
        ("deadletter", em.dead_letters),
    ):
        topic = topics[kind]
        for key, value in records:
            yield (topic, key, dumps(value))
    stats = em.stats()
    if stats is not None:
        yield (None, None, dumps(stats))


def fleet_time(watermark_ms: int) -> float | None:
    """The fleet's newest event time (seconds) from Spark's watermark (ms); None before the
    first batch set one (Spark reports 0)."""
    return None if watermark_ms <= 0 else watermark_ms / 1000.0


def make_processor(
    cfg: DetectorConfig,
    clock: BatchClock,
    topics: Mapping[str, str],
    latest_only: bool = True,
    max_series: int | None = None,
) -> Any:
    """The ``transformWithState`` processor over buckets (built here so importing this module
    needs no Spark). ``clock``: the ``updated_at`` of a batch's records, from its time;
    ``max_series``: most series a bucket keeps (``Bucket.shed``)."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    out = Row(*OUTPUT_SCHEMA.replace(",", "").split()[::2])

    class BucketProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            worker.prepare()
            self.handle = handle
            self.state = handle.getValueState("bucket", STATE_SCHEMA)

        def handleInputRows(  # noqa: N802 - Spark's API
            self,
            key: Any,
            rows: Iterator[Any],
            timerValues: Any,  # noqa: N803
        ) -> Iterator[Any]:
            records = [Record(r.batch, r.part, r.now, r.fleet, r.value) for r in rows]
            return self._run(key, records, timerValues, None)

        def handleInitialState(  # noqa: N802 - Spark's API
            self,
            key: Any,
            initialState: Any,  # noqa: N803
            timerValues: Any,  # noqa: N803
        ) -> None:
            """A bucket a migration saved (``migrate``): kept as it is, with its timer. One
            this cannot read is kept as it is too, without a timer: the bucket's next rows set
            it aside (``load_or_set_aside``) and count it."""
            blob = bytes(initialState.state)
            try:
                bucket = Bucket.load(blob, cfg, clock)
            except Exception:
                log.exception("bucket %s: the state migrated cannot be read", key[0])
                self.state.update((blob,))
                return
            bucket.timer_ms = bucket.next_timer_ms()
            if bucket.timer_ms is not None:
                self.handle.registerTimer(bucket.timer_ms)
            self.state.update((bucket.dump(),))

        def handleExpiredTimer(  # noqa: N802 - Spark's API
            self,
            key: Any,
            timerValues: Any,
            expiredTimerInfo: Any,  # noqa: N803
        ) -> Iterator[Any]:
            return self._run(key, [], timerValues, expiredTimerInfo.getExpiryTimeInMs())

        def _run(
            self, key: Any, records: list[Record], timer_values: Any, fired: int | None
        ) -> Any:
            saved = self.state.get()
            fleet = fleet_time(timer_values.getCurrentWatermarkInMs())
            blob = None if saved is None else bytes(saved[0])
            where = f"bucket {key[0]}"
            stamp = clock(timer_values.getCurrentProcessingTimeInMs())
            bucket, em = process_or_set_aside(blob, records, fleet, cfg, stamp, latest_only, where)
            if fired is not None and bucket.timer_ms == fired:
                bucket.timer_ms = None  # Spark deletes a timer once it has fired
            want = bucket.next_timer_ms()
            if want != bucket.timer_ms:
                if bucket.timer_ms is not None:
                    self.handle.deleteTimer(bucket.timer_ms)
                if want is not None:
                    self.handle.registerTimer(want)
                bucket.timer_ms = want
            try:
                em.shed = bucket.shed(max_series)
            except Exception as exc:  # a bug: the bucket goes on unbounded this once
                _set_aside(em, f"{where}:shed", INTERNAL_ERROR, exc, None)
            if bucket.empty():
                self.state.clear()
                em.size = (int(key[0]), 0, 0)
            else:
                saved_now = bucket.dump()
                self.state.update((saved_now,))
                em.size = (int(key[0]), bucket.series(), len(saved_now))
            return iter([out(*r) for r in output_rows(em, topics)])

        def close(self) -> None:
            pass

    return BucketProcessor()
