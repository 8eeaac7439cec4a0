"""The job's per-series state, split into buckets that Spark's state store keeps and its
executors process in parallel.

A series belongs to bucket ``hash(series) mod buckets`` (``bucket_column``). A bucket's state is
the open windows (``open_windows.OpenWindows``), the detectors' history and the firing findings
(``tracker.Tracker``) of its series: one value in the state store, read and written once per
batch that touches the bucket. Spark calls a Python stateful processor once per key and batch,
at a few milliseconds each, so a key per series would not keep up with a fleet; a bucket of
series amortises that call.

A bucket's input for one ingest batch is its partial rows, then an *end* marker that the driver
writes once every row of the batch is written. The partials gate (``gate``) shows the state
query each ingest batch whole, but should it fail the state query may read a batch's rows across
two of its own batches, and a window must be judged on all of them, as when one process read
the batch. Rows wait in the bucket's state until their batch's end arrives. Now and then an end
marker carries a *tick*, the fleet's newest event time, and goes to every bucket: a bucket with
rows learns event time from them; the ticks close the windows and resolve the findings of quiet
buckets on the fleet's event time, as if one process held every series.
"""

from __future__ import annotations

import functools
import itertools
import math
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from streaming.detectors.config import DetectorConfig
from streaming.job import worker
from streaming.job.open_windows import SERIES, OpenWindows
from streaming.job.records import to_aggregates
from streaming.job.sinks import dumps
from streaming.job.tracker import Tracker
from streaming.schema.aggregates import Aggregate
from streaming.schema.times import iso, iso_now

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pyspark.sql import Column

END = "end"  # a record that closes an ingest batch for a bucket, not a partial row
TICK = "tick"  # in an end record: the fleet's newest event time
# What the stateful operator emits: records for the aggregates and findings topics, and one
# ``stats`` row per bucket and batch.
OUTPUT_SCHEMA = "kind string, key string, value string"
STATE_SCHEMA = "state binary"
# A bucket's saved state goes to Spark's state store as a list of pieces of at most this size.
# Spark's Python state server reads a value-state update with a single socket read, so one of
# more than a few tens of KiB (a bucket of a few thousand series) can arrive cut short and stop
# the query; a list state's values travel as Arrow batches, which are read in full.
STATE_PIECE_BYTES = 32 * 1024


def state_pieces(blob: bytes) -> list[tuple[bytes]]:
    """A saved bucket as list-state rows (``STATE_SCHEMA``), in order."""
    n = STATE_PIECE_BYTES
    return [(blob[i : i + n],) for i in range(0, len(blob), n)]


def joined_state(rows: Iterable[tuple[bytes]]) -> bytes | None:
    """The saved bucket from its list-state rows; None for none."""
    blob = b"".join(bytes(r[0]) for r in rows)
    return blob or None


# A saved bucket: ``ZSTD_MAGIC``, the JSON's length (8 bytes, little-endian), the JSON as a
# zstd frame (level 1, through pyarrow, which the executors load anyway). On this JSON zstd
# takes about half of zlib's CPU both ways and its output is a quarter smaller. A bucket saved
# as a zlib stream (an earlier connmon: it starts with 0x78, never with the magic) is still read.
ZSTD_MAGIC = b"Z1"


@functools.cache
def _zstd() -> Any:
    import pyarrow as pa

    return pa.Codec("zstd", compression_level=1)


def compress(raw: bytes) -> bytes:
    """A bucket's JSON as it is saved."""
    return ZSTD_MAGIC + len(raw).to_bytes(8, "little") + _zstd().compress(raw, asbytes=True)


def decompress(blob: bytes) -> bytes:
    """The JSON of a saved bucket (zstd, or zlib as earlier versions saved it)."""
    if not blob.startswith(ZSTD_MAGIC):
        return zlib.decompress(blob)
    n = len(ZSTD_MAGIC)
    size = int.from_bytes(blob[n : n + 8], "little")
    return _zstd().decompress(memoryview(blob)[n + 8 :], decompressed_size=size, asbytes=True)


def bucket_column(buckets: int) -> Column:
    """The bucket of a partial row's series (Spark's xxhash64 of the series fields)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(*[F.col(k) for k in SERIES]), F.lit(buckets)).cast("int")


def wall_clock(_agg: Aggregate) -> str:
    """``updated_at`` of the live job: now."""
    return iso_now()


def window_end_clock(agg: Aggregate) -> str:
    """``updated_at`` of a replay: the window's end, so a replay is deterministic."""
    return agg.window_end


@dataclass
class Emitted:
    """What one bucket publishes for a call: in order, aggregates then findings."""

    aggregates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    findings: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    late: int = 0  # events whose window had closed
    duplicates: int = 0  # partial rows written twice (an ingest batch re-run after a crash)


class Bucket:
    """The windows, history and firing findings of one bucket's series."""

    def __init__(self, cfg: DetectorConfig, clock: Callable[[Aggregate], str]) -> None:
        self.cfg = cfg
        self.windows = OpenWindows(cfg.window_s, cfg.watermark_s)
        self.tracker = Tracker(cfg, clock)
        self.pending: list[dict[str, Any]] = []  # rows of batches whose end has not come yet

    @classmethod
    def load(
        cls, blob: bytes | None, cfg: DetectorConfig, clock: Callable[[Aggregate], str]
    ) -> Bucket:
        b = cls(cfg, clock)
        if blob is not None:
            doc = orjson.loads(decompress(blob))
            b.windows.load_state(doc["windows"])
            b.tracker.load_state(doc["tracker"])
            b.pending = doc["pending"]
        return b

    def dump(self) -> bytes:
        doc = {
            "windows": self.windows.to_state(),
            "tracker": self.tracker.to_state(),
            "pending": self.pending,
        }
        return compress(orjson.dumps(doc))

    def empty(self) -> bool:
        """Nothing left to remember: the state can be dropped (the next tick brings the
        fleet's event time back)."""
        t = self.tracker
        return not (self.windows.open or t.history or t.findings or self.pending)

    def process(self, records: Iterable[dict[str, Any]], latest_only: bool = True) -> Emitted:
        """Partial rows and end markers: each ingest batch whose end arrived is applied, in
        batch order, with all its rows; rows of a batch not yet ended wait."""
        em = Emitted()
        ends: dict[int, float | None] = {}  # batch -> its tick (None: none)
        for r in records:
            if END in r:
                t, prev = r.get(TICK), ends.get(r["batch"])
                ends[r["batch"]] = prev if t is None else t if prev is None else max(prev, t)
            else:
                self.pending.append(r)
        for batch in sorted(ends):
            due = sorted((r for r in self.pending if r["batch"] <= batch), key=lambda r: r["batch"])
            self.pending = [r for r in self.pending if r["batch"] > batch]
            groups = {b: list(rows) for b, rows in itertools.groupby(due, lambda r: r["batch"])}
            groups.setdefault(batch, [])
            for b in sorted(groups):
                self._apply(groups[b], ends[batch] if b == batch else None, em)
        if latest_only:  # a compacted topic: only a series' newest window matters
            em.aggregates = list(dict(em.aggregates).items())
        return em

    def _apply(self, parts: list[dict[str, Any]], tick: float | None, em: Emitted) -> None:
        """One ingest batch's rows (or only its tick) through windows, detectors, findings."""
        if not parts and tick is None:
            return
        result = self.windows.apply(parts)
        self.windows.advance(tick)
        self.windows.evict()
        em.late += result.late
        em.duplicates += result.duplicates
        aggs, host_rates = to_aggregates(result.rows, self.cfg.window_s)
        out = self.tracker.process(aggs, host_rates, fleet_end=self._fleet_end())
        em.aggregates += [(a.series, a.to_dict()) for a in out.aggregates]
        em.findings += [(f.key, f.to_dict()) for f in out.findings]

    def _fleet_end(self) -> str | None:
        t = self.windows.max_event_s
        if t is None:
            return None
        w = self.cfg.window_s
        return iso(math.floor(t / w) * w + w)


def output_frame(em: Emitted) -> pd.DataFrame:
    """One bucket's ``Emitted`` as rows of ``OUTPUT_SCHEMA``."""
    import pandas as pd

    kinds, keys, values = [], [], []
    for kind, records in (("aggregates", em.aggregates), ("findings", em.findings)):
        for key, value in records:
            kinds.append(kind)
            keys.append(key)
            values.append(dumps(value))
    kinds.append("stats")
    keys.append(None)
    values.append(dumps({"late": em.late, "duplicates": em.duplicates}))
    # Object arrays made here and not copied: pandas would otherwise scan each list to infer
    # its type, on every bucket of every batch.
    columns = {"kind": kinds, "key": keys, "value": values}
    return pd.DataFrame({k: _objects(v) for k, v in columns.items()}, copy=False)


def _objects(values: list[Any]) -> np.ndarray:
    import numpy as np

    a = np.empty(len(values), dtype=object)
    a[:] = values
    return a


def _records(frames: Iterator[pd.DataFrame]) -> list[dict[str, Any]]:
    return [orjson.loads(v) for pdf in frames for v in pdf["value"]]


def make_processor(
    cfg: DetectorConfig, clock: Callable[[Aggregate], str], latest_only: bool = True
) -> Any:
    """The ``transformWithStateInPandas`` processor over buckets (built here so importing this
    module needs no Spark)."""
    from pyspark.sql.streaming import StatefulProcessor

    class BucketProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            worker.prepare()
            self.state = handle.getListState("bucket", STATE_SCHEMA)

        def handleInputRows(  # noqa: N802 - Spark's API
            self,
            key: Any,
            rows: Iterator[pd.DataFrame],
            timerValues: Any,  # noqa: N803
        ) -> Iterator[pd.DataFrame]:
            blob = joined_state(self.state.get())  # an empty list yields no row
            bucket = Bucket.load(blob, cfg, clock)
            em = bucket.process(_records(rows), latest_only)
            if bucket.empty():
                self.state.clear()
            else:
                self.state.put(state_pieces(bucket.dump()))
            yield output_frame(em)

        def close(self) -> None:
            pass

    return BucketProcessor()
