"""Where the stream is wired. The job is two queries sharing one checkpoint:

- **ingest** (``aggregates``): events topic -> decode -> partial window rows per series (one
  Spark aggregation) -> one record per state bucket and batch on the partials topic; rejected
  records to the dead-letter topic (``ingest``).
- **state**: partials topic -> Spark's state store, one key per bucket, event time from
  Spark's watermark (``buckets``) -> merged windows, detectors, finding lifecycle ->
  aggregates and findings topics.

Every record is written by Spark's own Kafka writer on the executors; the driver sees counts
only (an ``Observation`` per ingest batch, the state query's observed metrics). Replay runs the
same two steps over JSON-lines files, one after the other, with files in between."""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.job import buckets, migrate, parse
from streaming.job.checkpoint import (
    INGEST_QUERY,
    STATE_QUERY,
    Meta,
    join,
    last_commit,
    open_checkpoint,
    query_dir,
    read_meta,
)
from streaming.job.ingest import PARTS, RECORD_COLUMNS, Ingest, bucket_key
from streaming.job.session import connector_package, stop_query
from streaming.job.settings import JobSettings
from streaming.job.sinks import KafkaSink, dumps
from streaming.job.status import STATE_METRICS, StatusListener
from streaming.schema.status import JobStatus

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

log = logging.getLogger(__name__)

# A bucket's record for one batch holds all its partial rows; the partials topic allows records
# this large (``topics.spec``), and so does the ingest query's writer.
PARTIALS_MAX_BYTES = 16 * 1024 * 1024
# The record values the state query needs besides the rows, as Kafka headers (string values).
HEADERS = ("batch", "part", "now", "fleet", "t")
RECORD_TYPES = {"batch": "long", "part": "int", "now": "double", "fleet": "double", "t": "double"}
# A state batch reads at most this many ingest batches' records (each at most one per bucket
# and part), unless ``partials_max_offsets_per_trigger`` says otherwise: after an outage the
# state query catches up in batches of bounded size instead of one batch of the whole backlog.
PARTIALS_BATCHES_PER_TRIGGER = 8


# ---- Kafka options ---------------------------------------------------------------------------
def client_options(s: JobSettings) -> dict[str, str]:
    """Options every Kafka source and writer of the job shares (security settings pass through
    as ``kafka.*``)."""
    return {"kafka.bootstrap.servers": s.bootstrap_servers} | {
        f"kafka.{k}": v for k, v in s.kafka.items()
    }


def kafka_options(s: JobSettings) -> dict[str, str]:
    """Options of Spark's ``kafka`` source of the events topic."""
    opts = client_options(s) | {
        "subscribe": s.events_topic,
        "startingOffsets": s.starting_offsets,
        "failOnDataLoss": str(s.fail_on_data_loss).lower(),
    }
    if s.max_offsets_per_trigger is not None:
        opts["maxOffsetsPerTrigger"] = str(s.max_offsets_per_trigger)
    return opts


def writer_options(s: JobSettings) -> dict[str, str]:
    """Options of Spark's Kafka writer: lz4, as every connmon topic is written."""
    return {"kafka.compression.type": "lz4"} | client_options(s)


# ---- sources -------------------------------------------------------------------------------
def kafka_source(spark: SparkSession, s: JobSettings) -> DataFrame:
    """The events topic, only the columns the job reads."""
    try:
        raw = spark.readStream.format("kafka").options(**kafka_options(s)).load()
    except Exception as exc:
        if "Failed to find data source: kafka" not in str(exc):
            raise
        raise ConfigError(
            "spark.jars: Spark's Kafka connector is not on the classpath; run `make setup`, set "
            "CONNMON_SPARK_JARS to a folder of its jars, or pass --spark-conf "
            f"spark.jars.packages={connector_package()}"
        ) from None
    return raw.select(*parse.RAW_COLUMNS)


def file_source(spark: SparkSession, path: str) -> DataFrame:
    """JSON-lines files (a file, a folder or a glob) in the Kafka source's shape."""
    p = Path(path)
    reader = spark.readStream.format("text")
    if p.is_file():  # the file source wants a folder; select the one file by name
        reader = reader.option("pathGlobFilter", glob.escape(p.name))
        path = str(p.parent)
    raw = reader.load(path)
    return raw.select(  # parse.RAW_COLUMNS
        F.col("value").cast("binary").alias("value"),
        F.col("_metadata.file_path").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("long").alias("offset"),
        F.lit(None).cast("timestamp").alias("timestamp"),
    )


def partials_source(spark: SparkSession, s: JobSettings, run_id: str, buckets: int) -> DataFrame:
    """The partials topic: this checkpoint's records (``RECORD_COLUMNS``, from the key, value
    and headers). Batches are capped, so a state query catching up after an outage applies
    a few ingest batches at a time; records deleted before they were read (retention, a
    topic created again) are skipped, and the status counts them (``status.lost_records``)."""
    cap = s.partials_max_offsets_per_trigger or PARTIALS_BATCHES_PER_TRIGGER * buckets * PARTS
    opts = client_options(s) | {
        "subscribe": s.partials_topic,
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "failOnDataLoss": "false",
        "maxOffsetsPerTrigger": str(cap),
    }
    raw = spark.readStream.format("kafka").options(**opts).load()

    def header(name: str) -> Any:
        return F.expr(f"CAST(filter(headers, h -> h.key = '{name}')[0].value AS STRING)")

    return raw.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        *[header(h).alias(h) for h in HEADERS],
    ).where(F.col("key").startswith(bucket_key(run_id, "")))


def state_stream(
    records: DataFrame,
    cfg: DetectorConfig,
    clock: buckets.BatchClock,
    topics: Mapping[str, str],
    latest_only: bool,
    initial: DataFrame | None = None,
    max_series: int | None = None,
) -> DataFrame:
    """Records (``RECORD_COLUMNS``) -> ``buckets.OUTPUT_SCHEMA`` rows, per bucket in the state
    store. Spark's watermark is the fleet's newest event time (each record's newest, bounded
    by the job's clock when its batch started). ``initial``: saved buckets (bucket, state) the
    query starts with (``migrate``)."""
    typed = {h: F.col(h).cast(t) for h, t in RECORD_TYPES.items()}
    newest = F.least(typed["t"], typed["now"])  # least() skips a null: no clock in a replay
    keyed = records.select(
        F.substring_index("key", ":", -1).cast("int").alias("bucket"),
        *[typed[h].alias(h) for h in ("batch", "part", "now", "fleet")],
        "value",
        F.timestamp_millis(F.round(newest * F.lit(1000)).cast("long")).alias("time"),
    )
    # The event-time column ends at the watermark: the operator gets no column to filter late
    # rows on, so Spark drops none of them (lateness is judged per window in the buckets) and
    # does not compile a new filter for every batch's watermark (new code for the JIT).
    return (
        keyed.withWatermark("time", "0 seconds")
        .drop("time")
        .groupBy("bucket")
        .transformWithState(
            buckets.make_processor(cfg, clock, topics, latest_only, max_series),
            buckets.OUTPUT_SCHEMA,
            "Update",
            "EventTime",
            initialState=None if initial is None else initial.groupBy("bucket"),
        )
    )


# ---- the live job --------------------------------------------------------------------------
@dataclass
class RunningJob:
    spark: SparkSession
    queries: list[StreamingQuery]
    listener: StatusListener
    sinks: list[KafkaSink]
    temp_dirs: list[str] = field(default_factory=list)

    def stop(self, wait_s: float = 0.0) -> bool:
        """Stop the queries, the last started first, each between two micro-batches when the
        running ones finish within ``wait_s`` in all (``stop_query``). False when a batch was
        abandoned (it runs again on restart)."""
        deadline = time.monotonic() + wait_s
        between = [
            stop_query(q, max(0.0, deadline - time.monotonic())) for q in reversed(self.queries)
        ]
        self.spark.streams.removeListener(self.listener)
        for sink in self.sinks:
            sink.close()
        for d in self.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)
        return all(between)


def package_zip(dest_dir: str) -> str:
    """The ``streaming`` package as a zip for executors (``addPyFile``)."""
    import streaming

    root = Path(streaming.__file__).parent
    out = Path(dest_dir) / "connmon-streaming.zip"
    with zipfile.ZipFile(out, "w") as z:
        for f in root.rglob("*.py"):
            z.write(f, f.relative_to(root.parent))
    return str(out)


def kafka_record_writer(s: JobSettings) -> Callable[[DataFrame], None]:
    """Writes records for the state query to the partials topic, the values the state query
    needs besides the rows as headers."""

    def write(df: DataFrame) -> None:
        headers = F.array(
            *[
                F.struct(F.lit(h).alias("key"), F.col(h).cast("binary").alias("value"))
                for h in HEADERS
            ]
        )
        (
            df.select("key", "value", headers.alias("headers"))
            .write.mode("append")
            .format("kafka")
            .options(**writer_options(s))
            .option("kafka.max.request.size", str(PARTIALS_MAX_BYTES))
            .option("topic", s.partials_topic)
            .save()
        )

    return write


def kafka_dead_letter_writer(s: JobSettings) -> Callable[[DataFrame], None]:
    """Writes dead letters (key ``partition:offset``: a batch run again writes the same keys)."""

    def write(df: DataFrame) -> None:
        (
            df.select("key", "value")
            .write.mode("append")
            .format("kafka")
            .options(**writer_options(s))
            .option("topic", s.deadletter_topic)
            .save()
        )

    return write


def start_job(spark: SparkSession, s: JobSettings, available_now: bool = False) -> RunningJob:
    """Start the job's two queries and the status listener. ``available_now``: process what
    the events topic holds, then stop (benchmarks; the state query then runs until stopped)."""
    temp_dirs: list[str] = []
    checkpoint = s.checkpoint
    if checkpoint is None:  # local mode only (validated): state does not survive a restart
        checkpoint = tempfile.mkdtemp(prefix="connmon-job-ckpt-")
        temp_dirs.append(checkpoint)
        log.warning("no --checkpoint: using %s, removed at exit", checkpoint)
    if not s.local:
        d = tempfile.mkdtemp(prefix="connmon-pyfiles-")
        temp_dirs.append(d)
        spark.sparkContext.addPyFile(package_zip(d))
    if s.migrate_from is not None and read_meta(spark, checkpoint) is None:
        migrate_state(spark, s, s.migrate_from, checkpoint)
    # The value Spark will use: --shuffle-partitions, unless --spark-conf or the cluster's own
    # defaults set spark.sql.shuffle.partitions.
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    meta = open_checkpoint(spark, checkpoint, s.detectors.window_s, s.state_buckets, partitions)
    resumed = last_commit(spark, checkpoint, STATE_QUERY)
    initial = None
    if resumed is not None:
        log.info("series state resumes after batch %d of the state query (%s)", resumed, checkpoint)
    else:
        initial = migrate.initial_state(spark, checkpoint)
    if last_commit(spark, checkpoint, INGEST_QUERY) is None:
        offsets = migrate.starting_offsets(spark, checkpoint)
        if offsets is not None:
            s = dataclasses.replace(s, starting_offsets=offsets)

    status_sink = KafkaSink(s.bootstrap_servers, dict(s.producer))
    ingest = Ingest(
        s.detectors,
        meta.run_id,
        meta.state_buckets,
        kafka_record_writer(s),
        kafka_dead_letter_writer(s),
        max_age_s=s.max_event_age_s,
        max_future_s=s.max_event_future_s,
        skip=s.skip,
    )

    def publish_status(st: JobStatus) -> None:
        status_sink.publish(s.status_topic, [(st.key, st.to_dict())], timeout_s=10)

    listener = StatusListener(
        s.job_id,
        publish_status,
        lambda: ingest.stats,
        s.detectors.watermark_s,
        s.detectors.clock_skew_tolerance_s,
        time.time,
    )
    spark.streams.addListener(listener)
    trigger: dict[str, Any] = {"processingTime": f"{int(s.trigger_s * 1000)} milliseconds"}
    ingest_writer = (
        kafka_source(spark, s)
        .writeStream.queryName(INGEST_QUERY)
        .foreachBatch(ingest)
        .option("checkpointLocation", query_dir(spark, checkpoint, INGEST_QUERY))
        .trigger(**({"availableNow": True} if available_now else trigger))
    )
    state_writer = state_query(spark, s, meta, checkpoint, initial).trigger(**trigger)
    queries: list[StreamingQuery] = []
    job = RunningJob(spark, queries, listener, [status_sink], temp_dirs)
    try:
        queries.append(state_writer.start())
        queries.append(ingest_writer.start())
    except BaseException:
        job.stop()
        raise
    return job


def state_query(
    spark: SparkSession, s: JobSettings, meta: Meta, checkpoint: str, initial: DataFrame | None
) -> DataStreamWriter:
    """The state query of the job on ``checkpoint``, all but its trigger."""
    topics = {
        "aggregates": s.aggregates_topic,
        "findings": s.findings_topic,
        "deadletter": s.deadletter_topic,
    }
    partials = partials_source(spark, s, meta.run_id, meta.state_buckets)
    out = state_stream(
        partials,
        s.detectors,
        buckets.batch_clock,
        topics,
        True,
        initial,
        s.state_max_series_per_bucket,
    )
    counted = out.observe(
        STATE_METRICS,
        F.collect_list(F.when(F.col("topic").isNull(), F.col("value"))).alias("stats"),
    )
    return (
        counted.where(F.col("topic").isNotNull())
        .writeStream.queryName(STATE_QUERY)
        .format("kafka")
        .options(**writer_options(s))
        .outputMode("update")
        .option("checkpointLocation", join(checkpoint, STATE_QUERY))
    )


def migrate_state(spark: SparkSession, s: JobSettings, source: str, dest: str) -> None:
    """Move the state of the job on ``source`` into the new checkpoint ``dest`` (``migrate``):
    the old state query first applies what is left on the partials topic."""
    old = migrate.check_source(spark, source)
    log.info(
        "migrating the state of %s: its state query reads the partials topic to the end", source
    )
    as_old = dataclasses.replace(s, detectors=s.detectors.replace(window_s=old.window_s))
    drain = state_query(spark, as_old, old, source, None).trigger(availableNow=True).start()
    try:
        drain.awaitTermination()
    finally:
        drain.stop()
    if drain.exception() is not None:
        raise RuntimeError(f"migrate-from: the state query of {source} failed: {drain.exception()}")
    migrate.write_offsets(spark, source, dest)
    if migrate.same_windows(old, s.detectors.window_s):
        n = migrate.write_state(spark, source, dest, s.detectors, s.state_buckets)
        log.info(
            "migrated the state of %s (%d buckets) into %d of %d buckets on %s",
            source,
            old.state_buckets,
            n,
            s.state_buckets,
            dest,
        )
        return
    resolved = migrate.resolved_findings(spark, source, old, s.detectors).cache()
    (
        resolved.write.mode("append")
        .format("kafka")
        .options(**writer_options(s))
        .option("topic", s.findings_topic)
        .save()
    )
    log.warning(
        "%s has %s s windows, the config %s s: open windows and history cannot change length, "
        "so %s starts without them; its %d firing findings were published resolved",
        source,
        old.window_s,
        s.detectors.window_s,
        dest,
        resolved.count(),
    )


# ---- replay --------------------------------------------------------------------------------
@dataclass
class ReplayResult:
    findings: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]


REPLAY_RUN = "replay"


def replay(
    spark: SparkSession,
    events: str,
    cfg: DetectorConfig,
    max_age_s: float | None = None,
    max_future_s: float | None = None,
    state_buckets: int = 16,
) -> ReplayResult:
    """The live job's two steps over JSON-lines files, each run to the end (available-now),
    with files in between. Deterministic: records about a window are stamped with its end, not
    the wall clock, and come out in event-time order."""
    work = tempfile.mkdtemp(prefix="connmon-replay-")
    try:
        dead: list[dict[str, Any]] = []
        folder = f"{work}/partials"

        def keep_dead(df: DataFrame) -> None:
            dead.extend(json.loads(r.value) for r in df.select("value").collect())

        def write_records(df: DataFrame) -> None:
            df.select(*RECORD_COLUMNS).write.mode("append").json(folder)

        ingest = Ingest(
            cfg,
            REPLAY_RUN,
            state_buckets,
            write_records,
            keep_dead,
            max_age_s,
            max_future_s,
            bound_by_clock=False,
        )
        _run_to_end(
            file_source(spark, events).writeStream.foreachBatch(ingest),
            f"{work}/{INGEST_QUERY}",
        )
        out: list[Any] = []

        def collect(df: DataFrame, _batch_id: int) -> None:
            out.extend(df.collect())

        if Path(folder).exists():
            schema = ", ".join(f"{c} string" for c in RECORD_COLUMNS)
            records = spark.readStream.schema(schema).json(folder)
            kinds = {k: k for k in ("aggregates", "findings", "deadletter")}
            _run_to_end(
                state_stream(records, cfg, buckets.at_window_end, kinds, False)
                .writeStream.outputMode("update")
                .foreachBatch(collect),
                f"{work}/{STATE_QUERY}",
            )
        by_kind: dict[str, list[dict[str, Any]]] = {"aggregates": [], "findings": []}
        for r in out:
            if r.topic in by_kind:
                by_kind[r.topic].append(json.loads(r.value))
            elif r.topic == "deadletter":
                dead.append(json.loads(r.value))
        return ReplayResult(
            findings=sorted(by_kind["findings"], key=lambda f: f["updated_at"]),
            aggregates=sorted(by_kind["aggregates"], key=lambda a: a["window_end"]),
            dead_letters=sorted(dead, key=lambda d: (d["topic"] or "", dumps(d))),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_to_end(writer: Any, checkpoint: str) -> None:
    q = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"replay query failed: {q.exception()}")


def write_jsonl(
    path: str, records: list[dict[str, Any]], echo: Callable[[str], None] | None
) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            line = dumps(r)
            f.write(line + "\n")
            if echo is not None:
                echo(line)
