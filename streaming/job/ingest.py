"""The ``foreachBatch`` step of the ingest query: a micro-batch of raw records -> decoded ->
partial window rows (one Spark aggregation) -> written, keyed by state bucket, for the state
query; then, when the fleet's event time has moved on by ``tick_every_s``, one tick per bucket
with the fleet's newest event time; dead letters when the batch has any. The driver handles
counts only: partial rows go from the executors to their sink.

The fleet's event time is bounded by the job's clock and partial rows behind the watermark are
dropped and counted here, per host (``clocks``), so the state query rarely sees a late one.

Decoding happens here, not on the stream: Spark hands ``foreachBatch`` its batch as an already
computed RDD, so columns computed before it are computed in full for every row and every action
on the batch (measured: a third slower per batch, see benchmarks/job/README.md)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from streaming.detectors.config import DetectorConfig
from streaming.job import clocks, parse, partial_rows
from streaming.job.buckets import END, TICK, bucket_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchStats:
    """What the status record needs from the newest ingest batch (and the state query's late
    count)."""

    batch_id: int
    watermark_s: float | None
    max_event_s: float | None
    dead_letter_total: int  # since the job started
    late_events_total: int  # since the job started
    input_rows: int = 0  # records of this batch: valid and rejected
    hosts: list[dict[str, Any]] = field(default_factory=list)  # clocks.HostClocks.snapshot


@dataclass
class BatchCounts:
    """Counted while a batch's partial rows are written."""

    events: Counter[str] = field(default_factory=Counter)  # reason ("" = valid) -> records
    max_event_s: float | None = None  # newest event time, bounded by the job's clock
    buckets: set[int] = field(default_factory=set)  # buckets that got rows
    late: int = 0  # events of rows behind the watermark: counted, not written
    hosts: dict[str, clocks.HostBatch] = field(default_factory=dict)  # reported hosts only

    @property
    def rejected(self) -> dict[str, int]:
        return {r: n for r, n in self.events.items() if r}


@dataclass(frozen=True)
class BatchContext:
    """What the executors need to know of the batch whose partial rows they write. Kept out of
    the Spark plan: a literal that changes every batch makes Spark generate and compile its
    code again every batch."""

    batch: int
    window_s: float
    now: float | None = None  # the job's clock when the batch started (None: replay)
    watermark_s: float | None = None  # rows of windows ending at or before it are late
    tolerance_s: float = 0.0  # an event newer than now by more than this: clock ahead


# The columns of a batch's partial rows (``Ingest.rows``), in the order ``count_rows`` reads them.
PARTIAL_COLUMNS = (
    "bucket",
    "key",
    "value",
    "reason",
    "events",
    "host",
    "window_start_s",
    "last_event_s",
)


class Record(NamedTuple):
    key: str
    value: str


# Writes a batch's partial rows (``Ingest.rows``) through ``count_rows`` and returns the
# counts; writes end markers ``(key, value)``.
PartialsWriter = Callable[["DataFrame", BatchContext], BatchCounts]
EndWriter = Callable[[list[tuple[str, dict[str, Any]]]], None]


def bucket_key(run_id: str, bucket: int | str) -> str:
    """Kafka key of a partial row or end marker: one bucket's records stay in order on one
    partition, and records of another checkpoint's run are told apart (``bucket_key(run, "")``
    is the run's prefix)."""
    return f"{run_id}:{bucket}"


def tick_due(ticked: float | None, newest: float | None, every_s: float) -> bool:
    """Whether the fleet's newest event time has moved on enough since the last tick."""
    return newest is not None and (ticked is None or newest - ticked >= every_s)


def count_rows(rows: Iterable[Any], counts: BatchCounts, ctx: BatchContext) -> Iterator[Record]:
    """``rows`` (tuples in ``PARTIAL_COLUMNS`` order) -> the valid rows that are not late, as
    records for the partials topic (the value gets the batch id and the event time bounded by
    the job's clock, ``progress_s``); every row's events counted by reason, and per host the
    hosts with late rows or a clock ahead of the job's (``counts.hosts``)."""
    hosts: dict[str, clocks.HostBatch] = {}
    report: set[str] = set()
    wm, now = ctx.watermark_s, ctx.now
    ahead_after = None if now is None else now + ctx.tolerance_s
    # By position (``PARTIAL_COLUMNS``): a Spark Row's attribute lookup is a list search.
    for bucket, key, value, reason, events, host, window_start_s, last in rows:
        counts.events[reason or ""] += events
        if reason is not None:
            continue
        late = wm is not None and window_start_s + ctx.window_s <= wm
        h = hosts.get(host)
        if h is None:
            h = hosts[host] = clocks.HostBatch()
        h.add(events, late, last)
        if late or (ahead_after is not None and last > ahead_after):
            report.add(host)
        if late:
            counts.late += events
            continue
        counts.buckets.add(bucket)
        progress = clocks.bounded(last, now)
        if counts.max_event_s is None or progress > counts.max_event_s:
            counts.max_event_s = progress
        tail = f',"batch":{ctx.batch},"progress_s":{progress!r}}}'
        yield Record(key, value[:-1] + tail)
    for host in report:
        counts.hosts[host] = hosts[host]


class Ingest:
    """Callable for ``writeStream.foreachBatch`` over raw records (Kafka source shape)."""

    def __init__(
        self,
        cfg: DetectorConfig,
        run_id: str,
        buckets: int,
        write_partials: PartialsWriter,
        write_ends: EndWriter,
        write_dead_letters: Callable[[DataFrame, int], None],
        max_age_s: float | None = None,
        max_future_s: float | None = None,
        tick_every_s: float = 0.0,
        bound_by_clock: bool = True,
    ) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.buckets = buckets
        self.write_partials = write_partials
        self.write_ends = write_ends
        self.write_dead_letters = write_dead_letters
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        self.max_event_s: float | None = None  # newest event time since the job started
        # Every tick wakes every bucket (a Python call each, milliseconds): a bucket with rows
        # learns event time from them, so quiet buckets need the fleet's time only now and then.
        self.tick_every_s = tick_every_s
        self._ticked: float | None = None  # event time of the last tick
        self.dead_letter_total = 0
        self.late_total = 0
        # Live, the fleet's event time never passes the job's clock; replay has no "now".
        self.bound_by_clock = bound_by_clock
        self.hosts = clocks.HostClocks(cfg.clock_skew_tolerance_s)
        self.stats: BatchStats | None = None

    @cached_property
    def decode(self) -> parse.Decoder:
        return parse.Decoder(self.max_age_s, self.max_future_s)

    @cached_property
    def aggregate(self) -> partial_rows.PartialRows:
        """Built on first use: Spark columns need a SparkContext."""
        return partial_rows.PartialRows(self.cfg)

    def watermark(self) -> float | None:
        """Newest event time of earlier batches minus the watermark, as the state query's."""
        return None if self.max_event_s is None else self.max_event_s - self.cfg.watermark_s

    def rows(self, decoded: DataFrame) -> DataFrame:
        """The batch's partial rows for ``count_rows``: ``key`` and ``value`` (JSON, without
        the batch's own values), ``reason``, ``events``, ``host``, ``window_start_s``,
        ``last_event_s``. The same plan every batch, so Spark compiles it once."""
        from pyspark.sql import functions as F

        parts = self.aggregate(decoded)
        fields = [F.col(c) for c in parts.columns if c != "reason"]
        value = F.to_json(F.struct(*fields))
        key = F.concat(F.lit(bucket_key(self.run_id, "")), F.col("bucket").cast("string"))
        computed = {
            "key": F.when(F.col("reason").isNull(), key),
            "value": F.when(F.col("reason").isNull(), value),
        }
        return parts.withColumn("bucket", bucket_column(self.buckets)).select(
            *[computed[c].alias(c) if c in computed else F.col(c) for c in PARTIAL_COLUMNS]
        )

    def context(self, batch_id: int, now: float | None) -> BatchContext:
        return BatchContext(
            batch_id, self.cfg.window_s, now, self.watermark(), self.cfg.clock_skew_tolerance_s
        )

    def __call__(self, raw: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        now = time.time()
        df = self.decode(raw, now=now)
        bound = now if self.bound_by_clock else None
        counts = self.write_partials(self.rows(df), self.context(batch_id, bound))
        t1 = time.perf_counter()
        if counts.rejected:  # a second read of this batch, only when it holds bad records
            self.write_dead_letters(df, batch_id)
        if counts.hosts:
            fleet = counts.max_event_s if counts.max_event_s is not None else self.max_event_s
            self.hosts.update(counts.hosts, clocks.bounded(fleet, bound), now)
        if counts.max_event_s is not None and (
            self.max_event_s is None or counts.max_event_s > self.max_event_s
        ):
            self.max_event_s = counts.max_event_s
        # After the partial rows, on each bucket's partition: the end of this batch, for the
        # buckets that got rows, or for every bucket with the fleet's time when a tick is due.
        end: dict[str, Any] = {"batch": batch_id, END: True}
        if tick_due(self._ticked, self.max_event_s, self.tick_every_s):
            end[TICK], self._ticked = self.max_event_s, self.max_event_s
            to = range(self.buckets)
        else:
            to = sorted(counts.buckets)
        if to:
            self.write_ends([(bucket_key(self.run_id, b), end) for b in to])
        self.dead_letter_total += sum(counts.rejected.values())
        self.late_total += counts.late
        self.stats = BatchStats(
            batch_id,
            self.watermark(),
            self.max_event_s,
            self.dead_letter_total,
            self.late_total,
            sum(counts.events.values()),
            self.hosts.snapshot(now) if self.hosts.hosts else [],
        )
        log.info(
            "batch %d: %d record(s), %d rejected, %d late; partial rows %.2fs, dead letters and "
            "ends %.2fs",
            batch_id,
            sum(counts.events.values()),
            sum(counts.rejected.values()),
            counts.late,
            t1 - t0,
            time.perf_counter() - t1,
        )


def counts_dict(c: BatchCounts) -> dict[str, Any]:
    """``BatchCounts`` as the plain dict an executor sends back (``merge_counts`` reads it)."""
    return {
        "events": dict(c.events),
        "max_event_s": c.max_event_s,
        "buckets": sorted(c.buckets),
        "late": c.late,
        "hosts": {h: b.to_dict() for h, b in c.hosts.items()},
    }


def merge_counts(into: BatchCounts, other: Mapping[str, Any]) -> None:
    """Fold counts sent back from an executor (``counts_dict``)."""
    into.events.update(other.get("events") or {})
    into.buckets.update(other.get("buckets") or ())
    into.late += int(other.get("late") or 0)
    clocks.merge_hosts(into.hosts, other.get("hosts") or {})
    t = other.get("max_event_s")
    if t is not None and (into.max_event_s is None or t > into.max_event_s):
        into.max_event_s = t


class CountsParam:
    """Spark accumulator of ``BatchCounts`` (as plain dicts) from the executors."""

    def zero(self, _value: dict) -> dict:
        return counts_dict(BatchCounts())

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 - Spark's API
        c = BatchCounts()
        merge_counts(c, a)
        merge_counts(c, b)
        return counts_dict(c)
