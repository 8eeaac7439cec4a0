"""Moving a job to a new checkpoint with another number of state-store partitions or state
buckets, keeping its state: open windows, detector history, firing findings
(``connmon job --checkpoint NEW --migrate-from OLD``).

Before the job first starts on NEW (``pipeline.start_job``):

1. OLD's ingest query must have committed every batch it planned (``check_source``): its
   records are then all on the partials topic, and NEW's ingest query starts where it ended.
   A job stopped with SIGTERM has; one that was killed may not (start it on OLD again, stop it).
2. OLD's state query runs once more on its own, to the end of the partials topic, so OLD's
   state holds every event its ingest query read (``pipeline``).
3. Spark's state data source reads OLD's buckets; each is split by series and the series are
   put in their buckets of the new count (``rebucket``) -> ``NEW/migrated/state`` (Parquet),
   and where OLD's ingest query ended -> ``NEW/migrated/offsets.json`` (``write``).
4. NEW's ``connmon.json`` is written after that: a migration cut short starts over.

The job then starts on NEW: its ingest query from those offsets, its state query with the
saved buckets as initial state, which Spark applies in the query's first batch only.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.job import rebucket
from streaming.job.buckets import STATE_SCHEMA, bucket_column
from streaming.job.checkpoint import (
    INGEST_QUERY,
    STATE_QUERY,
    Meta,
    batch_end_offsets,
    exists,
    join,
    last_commit,
    read_meta,
    read_text,
    uncommitted_offsets,
    write_text,
)
from streaming.job.open_windows import SERIES
from streaming.schema.times import iso_now

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FOLDER = "migrated"
_STATE = "state"
_OFFSETS = "offsets.json"


def check_source(spark: SparkSession, source: str) -> Meta:
    """OLD's settings, once it is known to be a checkpoint the job can move from."""
    meta = read_meta(spark, source)
    if meta is None:
        raise ConfigError(f"migrate-from: {source} is not a connmon checkpoint (no connmon.json)")
    pending = uncommitted_offsets(spark, source, INGEST_QUERY)
    if pending is not None:
        raise ConfigError(
            f"migrate-from: the job on {source} did not finish batch {pending[0]} of its ingest "
            "query (it was killed or failed); start it on that checkpoint again and stop it "
            "with SIGTERM, then migrate"
        )
    return meta


def same_windows(old: Meta, window_s: float) -> bool:
    """Whether OLD's state can move: open windows and history are per window of its length."""
    return math.isclose(old.window_s, window_s)


def _saved(spark: SparkSession, source: str) -> DataFrame:
    """OLD's saved buckets (``state``), as its state query last committed them."""
    return (
        spark.read.format("statestore")
        .option("path", join(source, STATE_QUERY))
        .option("stateVarName", "bucket")
        .load()
        .select("value.state")
    )


def resolved_findings(
    spark: SparkSession, source: str, old: Meta, cfg: DetectorConfig
) -> DataFrame:
    """OLD's firing findings as resolved records (key, value): for windows of another length,
    when the new checkpoint starts without OLD's state."""
    at = cfg.replace(window_s=old.window_s)
    now = iso_now()
    return spark.createDataFrame(
        _saved(spark, source).rdd.flatMap(
            lambda r: rebucket.resolved_findings(bytes(r.state), at, now)
        ),
        "key string, value string",
    )


def rebucketed(spark: SparkSession, source: str, cfg: DetectorConfig, buckets: int) -> DataFrame:
    """OLD's saved buckets as ``buckets`` new ones: (bucket, state), the state as saved."""
    saved = _saved(spark, source)
    series = spark.createDataFrame(
        saved.rdd.flatMap(lambda r: [(*f, p) for f, p in rebucket.split(bytes(r.state), cfg)]),
        ", ".join(f"{k} string" for k in SERIES) + ", part binary",
    )
    keyed = series.select(bucket_column(buckets).alias("bucket"), "part")
    merged = keyed.rdd.map(lambda r: (r.bucket, bytes(r.part))).groupByKey()
    return spark.createDataFrame(
        merged.map(lambda kv: (kv[0], rebucket.merge(kv[1]))), f"bucket int, {STATE_SCHEMA}"
    )


def write_state(
    spark: SparkSession, source: str, dest: str, cfg: DetectorConfig, buckets: int
) -> int:
    """OLD's state in ``buckets`` buckets, into NEW's ``migrated`` folder; returns how many
    buckets hold state."""
    state = rebucketed(spark, source, cfg, buckets)
    state.write.mode("overwrite").parquet(join(dest, FOLDER, _STATE))
    return spark.read.parquet(join(dest, FOLDER, _STATE)).count()


def write_offsets(spark: SparkSession, source: str, dest: str) -> None:
    """Where OLD's ingest query ended, into NEW's ``migrated`` folder."""
    done = last_commit(spark, source, INGEST_QUERY)
    ends = {} if done is None else batch_end_offsets(spark, source, INGEST_QUERY, done)
    offsets: dict[str, dict[str, int]] = {}
    for (topic, p), o in ends.items():
        offsets.setdefault(topic, {})[str(p)] = o
    write_text(spark, join(dest, FOLDER, _OFFSETS), json.dumps(offsets))


def initial_state(spark: SparkSession, checkpoint: str) -> DataFrame | None:
    """The buckets a migration saved for the state query's first batch (None if none)."""
    path = join(checkpoint, FOLDER, _STATE)
    return spark.read.parquet(path) if exists(spark, join(path, "_SUCCESS")) else None


def starting_offsets(spark: SparkSession, checkpoint: str) -> str | None:
    """Where a migration says the ingest query starts (Spark's JSON of offsets), or None."""
    text = read_text(spark, join(checkpoint, FOLDER, _OFFSETS))
    return text if text and json.loads(text) else None
