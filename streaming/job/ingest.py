"""The ``foreachBatch`` step of the ingest query: a micro-batch of raw records -> decoded ->
partial window rows (one Spark aggregation) -> records for the state query, a few per state
bucket; dead letters when the batch has any. Everything per row happens in Spark's own functions and
its Kafka writer; the driver gets counts only, through an ``Observation``.

Decoding happens here, not on the stream: Spark hands ``foreachBatch`` its batch as an already
computed RDD, so columns computed before it are computed in full for every row and every action
on the batch (measured: a third slower per batch, see benchmarks/job/README.md).

Records the built-in checks cannot vouch for (``parse.UNVERIFIED``: in a healthy fleet, none)
and rejected records are handled by a second read of the batch, only when it has any: there
``validate`` judges the unverified ones, rejected records go to the dead letters, and the
events it accepts become partial rows of their own (the batch's second pass).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from streaming.detectors.config import DetectorConfig
from streaming.job import clocks, parse, partial_rows
from streaming.job.buckets import bucket_column
from streaming.job.open_windows import SERIES
from streaming.schema.status import INTERNAL_ERROR

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# The columns of the records for the state query (``Ingest.records``), whatever carries them:
# all text, the last five numbers as text (``pipeline.RECORD_TYPES``).
RECORD_COLUMNS = ("key", "value", "batch", "part", "now", "fleet", "t")
# A bucket's partial rows of one pass over a batch go out as up to this many records, split by
# series, so that a record stays far below the partials topic's size limit even for a bucket of
# a hundred thousand series (about 600 bytes a row). Parts ``pass * PARTS + i``.
PARTS = 16


@dataclass(frozen=True)
class BatchStats:
    """What the status record needs from the newest ingest batch."""

    batch_id: int
    dead_letter_total: int  # since the job started
    input_rows: int = 0  # records of this batch: valid and rejected
    rejected: dict[str, int] = field(default_factory=dict)  # this batch's, by reason
    internal_errors_total: int = 0  # records the decoder failed on, since the job started
    newest_s: float | None = None  # the fleet's newest event time after it (bounded)


def bucket_key(run_id: str, bucket: int | str) -> str:
    """Kafka key of a bucket's records: one bucket's records stay in order on one partition,
    and records of another checkpoint's run are told apart (``bucket_key(run, "")`` is the
    run's prefix)."""
    return f"{run_id}:{bucket}"


# Writes a frame of ``RECORD_COLUMNS`` (Kafka in the live job, files in a replay); writes dead
# letters (``parse.dead_letters`` rows).
RecordWriter = Callable[["DataFrame"], None]
DeadLetterWriter = Callable[["DataFrame"], None]


class Ingest:
    """Callable for ``writeStream.foreachBatch`` over raw records (Kafka source shape)."""

    def __init__(
        self,
        cfg: DetectorConfig,
        run_id: str,
        buckets: int,
        write_records: RecordWriter,
        write_dead_letters: DeadLetterWriter,
        max_age_s: float | None = None,
        max_future_s: float | None = None,
        bound_by_clock: bool = True,
        skip: tuple[tuple[int, int, int], ...] = (),
    ) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.buckets = buckets
        self.write_records = write_records
        self.write_dead_letters = write_dead_letters
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        self.skip = skip
        # Live, the fleet's event time never passes the job's clock; replay has no "now".
        self.bound_by_clock = bound_by_clock
        self.fleet_s: float | None = None  # the fleet's newest event time, bounded
        self.dead_letter_total = 0
        self.internal_errors_total = 0
        self.stats: BatchStats | None = None

    @cached_property
    def decode(self) -> parse.Decoder:
        return parse.Decoder(self.max_age_s, self.max_future_s, self.skip)

    @cached_property
    def aggregate(self) -> partial_rows.PartialRows:
        """Built on first use: Spark columns need a SparkContext."""
        return partial_rows.PartialRows(self.cfg)

    def records(
        self, partials: DataFrame, batch: int, first: int, now: float | None, fleet: float | None
    ) -> DataFrame:
        """Valid partial rows -> records (``RECORD_COLUMNS``), a bucket's rows in up to
        ``PARTS`` of them (``first`` + a hash of the series), each with its rows as JSON lines
        and their newest event time ``t``."""
        from pyspark.sql import functions as F

        fields = [F.col(c) for c in partials.columns if c != "reason"]
        # Salted: a hash of the series alone would pick the part from the bucket number.
        part = F.lit(first) + F.pmod(F.xxhash64(F.lit("part"), *[F.col(k) for k in SERIES]), PARTS)
        grouped = (
            partials.withColumn("bucket", bucket_column(self.buckets))
            .withColumn("part", part.cast("int"))
            .groupBy("bucket", "part")
            .agg(
                F.concat_ws("\n", F.collect_list(F.to_json(F.struct(*fields)))).alias("value"),
                F.max("last_event_s").alias("t"),
            )
        )
        # The batch's own values as text (the state query reads them as numbers): Spark compiles
        # a number into the code it generates, so a number that changes every batch made it
        # generate and compile four classes every batch (measured: 0.4 cores of JIT at 100k
        # series); text goes to the generated code by reference.
        return grouped.select(
            F.concat(F.lit(bucket_key(self.run_id, "")), F.col("bucket").cast("string")).alias(
                "key"
            ),
            "value",
            F.lit(str(batch)).alias("batch"),
            F.col("part").cast("string").alias("part"),
            F.lit(None if now is None else repr(now)).cast("string").alias("now"),
            F.lit(None if fleet is None else repr(fleet)).cast("string").alias("fleet"),
            F.col("t").cast("string").alias("t"),
        )

    def __call__(self, raw: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        now = time.time()
        bound = now if self.bound_by_clock else None
        decoded = self.decode(raw, now=now)
        valid = F.col("reason").isNull()
        seen = Observation(f"ingest-{batch_id}")
        partials = self.aggregate(decoded).observe(
            seen,
            F.sum(F.when(valid, F.col("events"))).alias("valid"),
            F.max(F.when(valid, F.col("last_event_s"))).alias("newest"),
            F.collect_list(F.when(~valid, F.struct("reason", "events"))).alias("rejected"),
        )
        self.write_records(self.records(partials.where(valid), batch_id, 0, bound, self.fleet_s))
        m = seen.get
        events: Counter[str] = Counter({"": int(m["valid"] or 0)})
        newest = [m["newest"]]
        t1 = time.perf_counter()
        if m["rejected"]:  # a second read of this batch, only when it holds such records
            counts, accepted_newest = self._second_read(decoded, batch_id, now, bound)
            events.update(counts)
            newest.append(accepted_newest)
        batch_newest = max((t for t in newest if t is not None), default=None)
        if batch_newest is not None:
            self.fleet_s = clocks.bounded(max(batch_newest, self.fleet_s or batch_newest), bound)
        rejected = {r: n for r, n in events.items() if r}
        self.dead_letter_total += sum(rejected.values())
        self.internal_errors_total += rejected.get(INTERNAL_ERROR, 0)
        self.stats = BatchStats(
            batch_id,
            self.dead_letter_total,
            sum(events.values()),
            rejected,
            self.internal_errors_total,
            self.fleet_s,
        )
        log.info(
            "batch %d: %d record(s), %d rejected; partial rows %.2fs, second read %.2fs",
            batch_id,
            sum(events.values()),
            sum(rejected.values()),
            t1 - t0,
            time.perf_counter() - t1,
        )

    def _second_read(
        self, decoded: DataFrame, batch_id: int, now: float, bound: float | None
    ) -> tuple[Counter[str], float | None]:
        """The batch's unverified records judged by ``validate``, its rejected records written
        as dead letters, the events ``validate`` accepted written as the batch's second pass.
        Returns that read's counts by reason ("" for the accepted events) and the newest
        accepted event time."""
        from pyspark.sql import functions as F

        rest = self.decode.verify(decoded.where(F.col("reason").isNotNull()), now)
        rest = rest.persist()
        try:
            valid = F.col("reason").isNull()
            counts: Counter[str] = Counter()
            newest = None
            newest_s = F.max(F.unix_micros("ts")) / F.lit(1e6)
            for r in rest.groupBy("reason").agg(F.count("*"), newest_s).collect():
                counts[r[0] or ""] = int(r[1])
                if r[0] is None:
                    newest = r[2]
            if len(counts) > (1 if counts[""] else 0):
                self.write_dead_letters(parse.dead_letters(rest))
            if counts[""]:
                accepted = self.aggregate(rest.where(valid))
                self.write_records(self.records(accepted, batch_id, PARTS, bound, self.fleet_s))
            return counts, newest
        finally:
            rest.unpersist()
