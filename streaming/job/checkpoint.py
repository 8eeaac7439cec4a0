"""The job's checkpoint: a folder on any Hadoop filesystem (``file:``, ``hdfs:``, ``s3a:``, or a
local path) holding each query's Spark checkpoint and ``connmon.json``, the settings the saved
state depends on. Everything goes through Hadoop's FileSystem API in the driver's JVM, so a
checkpoint works wherever Spark's own does."""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from streaming.errors import ConfigError
from streaming.schema.status import INGEST_QUERY, STATE_QUERY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

META = "connmon.json"
# The job's two queries; one record per bucket and batch between them; each bucket's state one
# value in Spark's state store, with event-time timers.
LAYOUT = 4
# Where checkpoints written before the ingest query had its name keep its Spark checkpoint:
# such a checkpoint goes on from there (``query_dir``).
LEGACY_INGEST_DIR = "aggregates"


@dataclass(frozen=True)
class Meta:
    layout: int
    run_id: str  # tags the partials topic's records: an earlier checkpoint's are ignored
    window_s: float
    state_buckets: int


def query_dir(spark: SparkSession, checkpoint: str, query: str) -> str:
    """The folder of ``query``'s Spark checkpoint under ``checkpoint``: the ingest query's
    earlier folder where a checkpoint has only that one."""
    if (
        query == INGEST_QUERY
        and not exists(spark, join(checkpoint, INGEST_QUERY))
        and exists(spark, join(checkpoint, LEGACY_INGEST_DIR))
    ):
        return join(checkpoint, LEGACY_INGEST_DIR)
    return join(checkpoint, query)


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a path or a URI (``Path`` would turn ``s3a://b`` into ``s3a:/b``)."""
    return "/".join([base.rstrip("/"), *parts])


def _fs(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(uri)
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    return path.getFileSystem(conf), path


def read_text(spark: SparkSession, uri: str) -> str | None:
    fs, path = _fs(spark, uri)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    fs, path = _fs(spark, uri)
    out = fs.create(path, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


def exists(spark: SparkSession, uri: str) -> bool:
    fs, path = _fs(spark, uri)
    return bool(fs.exists(path))


def read_meta(spark: SparkSession, checkpoint: str) -> Meta | None:
    """The checkpoint's settings (None before the job first started on it); a checkpoint of
    another layout fails here."""
    uri = join(checkpoint, META)
    try:
        text = read_text(spark, uri)
    except Exception as exc:
        raise ConfigError(f"checkpoint: cannot read {uri}: {exc}") from exc
    if text is None:
        return None
    try:
        meta = Meta(**json.loads(text))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"checkpoint: {uri} is not a connmon checkpoint ({exc})") from exc
    if meta.layout != LAYOUT:
        raise ConfigError(f"checkpoint: {checkpoint} has layout {meta.layout}; use a new one")
    return meta


def open_checkpoint(
    spark: SparkSession,
    checkpoint: str,
    window_s: float,
    state_buckets: int,
    shuffle_partitions: int | None = None,
) -> Meta:
    """The checkpoint's settings, created on first use; a checkpoint saved with other windows,
    another bucket count, other shuffle partitions or by an earlier connmon fails here, naming
    the setting."""
    meta = read_meta(spark, checkpoint)
    if meta is None:
        if exists(spark, query_dir(spark, checkpoint, INGEST_QUERY)):
            raise ConfigError(
                f"checkpoint: {checkpoint} has no {META} (written by an earlier connmon); "
                "use a new one"
            )
        meta = Meta(LAYOUT, uuid.uuid4().hex[:12], window_s, state_buckets)
        write_text(spark, join(checkpoint, META), json.dumps(asdict(meta)))
        return meta
    saved = spark_shuffle_partitions(spark, checkpoint)
    check_settings(meta, checkpoint, window_s, state_buckets, shuffle_partitions, saved)
    return meta


def check_settings(
    meta: Meta,
    checkpoint: str,
    window_s: float,
    state_buckets: int,
    shuffle_partitions: int | None,
    saved_partitions: int | None = None,
) -> None:
    """Raise a ConfigError naming the first setting the checkpoint was saved with another value
    of, both values and how to move to a new checkpoint. Windows and buckets are in ``meta``;
    the state store's partitions are ``saved_partitions``, as Spark keeps them in its offset
    log (None before the state query's first batch: nothing to compare)."""
    move = f"to change it, start on a new checkpoint: --checkpoint NEW --migrate-from {checkpoint}"
    if not math.isclose(meta.window_s, window_s):
        raise ConfigError(
            f"detectors.window_s: the checkpoint has {meta.window_s} s windows, the config "
            f"{window_s} s; {move}"
        )
    if meta.state_buckets != state_buckets:
        raise ConfigError(
            f"state-buckets: the checkpoint has {meta.state_buckets}, the config "
            f"{state_buckets}; {move}"
        )
    saved = saved_partitions
    if None not in (saved, shuffle_partitions) and saved != shuffle_partitions:
        raise ConfigError(
            f"shuffle-partitions: the checkpoint has {saved}, the config {shuffle_partitions} "
            f"(Spark keeps a checkpoint's value and would ignore the new one); {move}"
        )


def recorded_shuffle_partitions(offset_log: str) -> int | None:
    """``spark.sql.shuffle.partitions`` as one file of Spark's offset log records it (the
    version, then the batch's metadata with the session conf the query keeps); None if absent."""
    lines = offset_log.lstrip("\0").splitlines()
    try:
        conf = json.loads(lines[1]).get("conf") or {}
        return int(conf["spark.sql.shuffle.partitions"])
    except (IndexError, ValueError, KeyError, TypeError, AttributeError):
        return None


def spark_shuffle_partitions(spark: SparkSession, checkpoint: str) -> int | None:
    """The state query's shuffle partitions as Spark recorded them in its newest offset log
    file (None before its first batch)."""
    batch = _newest(spark, join(checkpoint, STATE_QUERY, "offsets"))
    if batch is None:
        return None
    text = read_text(spark, join(checkpoint, STATE_QUERY, "offsets", str(batch)))
    return recorded_shuffle_partitions(text or "")


def uncommitted_offsets(
    spark: SparkSession, checkpoint: str, query: str
) -> tuple[int, list[tuple[str, int, int | None, int]]] | None:
    """The batch a query planned but did not commit (the one it failed in), with the offsets
    it reads: (batch, [(topic, partition, first or None if unknown, last)]); None when every
    planned batch was committed. Read from the query's offset log (Spark's own records)."""
    done = last_commit(spark, checkpoint, query)
    batch = _newest(spark, join(query_dir(spark, checkpoint, query), "offsets"))
    if batch is None or (done is not None and batch <= done):
        return None
    last = batch_end_offsets(spark, checkpoint, query, batch)
    first = batch_end_offsets(spark, checkpoint, query, batch - 1)
    ranges = [
        (topic, p, first.get((topic, p)), end - 1)
        for (topic, p), end in sorted(last.items())
        if first.get((topic, p)) is None or end > first[(topic, p)]
    ]
    return batch, ranges


def batch_end_offsets(
    spark: SparkSession, checkpoint: str, query: str, batch: int
) -> dict[tuple[str, int], int]:
    """Where a query's batch ends reading each (topic, partition); batch -1: where the query
    started. Read from Spark's offset log: a batch's file holds the version, the batch's
    metadata, then a line per source; the start is the source's own log (the version, then
    the offsets). Empty when there is no such batch."""
    if batch >= 0:
        parts, skip = ("offsets", str(batch)), 2
    else:
        parts, skip = ("sources", "0", "0"), 1
    text = (read_text(spark, join(query_dir(spark, checkpoint, query), *parts)) or "").lstrip("\0")
    out: dict[tuple[str, int], int] = {}
    for line in text.splitlines()[skip:]:
        try:
            topics = json.loads(line)
        except ValueError:
            continue
        if isinstance(topics, dict):
            for topic, offsets in topics.items():
                if isinstance(offsets, dict):
                    out.update({(topic, int(p)): int(o) for p, o in offsets.items()})
    return out


def _newest(spark: SparkSession, folder: str) -> int | None:
    """The highest batch number among a Spark log folder's files (None if none)."""
    fs, path = _fs(spark, folder)
    if not fs.exists(path):
        return None
    ids = [int(n) for st in fs.listStatus(path) if (n := st.getPath().getName()).isdigit()]
    return max(ids, default=None)


def last_commit(spark: SparkSession, checkpoint: str, query: str) -> int | None:
    """The newest batch a query committed to the checkpoint (None before its first)."""
    return _newest(spark, join(query_dir(spark, checkpoint, query), "commits"))
