"""Where the stream is wired. The job is two queries sharing one checkpoint:

- **ingest** (``aggregates``): events topic -> decode -> partial window rows per series, written
  from the executors to the partials topic keyed by state bucket; rejected records to the
  dead-letter topic; then an end marker per bucket written to (now and then to every bucket,
  with the fleet's newest event time). A Kafka transaction around the batch's writes makes
  them visible to the state query together (``gate``).
- **state**: partials topic -> Spark's state store, one key per bucket (``buckets``) -> merged
  windows, detectors, finding lifecycle -> aggregates and findings, written from the executors.

The driver handles counts only, so its work per batch does not grow with the fleet. Replay runs
the same two steps over JSON-lines files, one after the other, with files in between."""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import logging
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.job import buckets, parse
from streaming.job.checkpoint import (
    INGEST_QUERY,
    STATE_QUERY,
    join,
    last_commit,
    open_checkpoint,
)
from streaming.job.gate import BatchGate
from streaming.job.ingest import (
    BatchContext,
    BatchCounts,
    CountsParam,
    Ingest,
    bucket_key,
    count_rows,
    counts_dict,
    merge_counts,
)
from streaming.job.session import connector_package, stop_query
from streaming.job.settings import JobSettings
from streaming.job.sinks import (
    CounterParam,
    KafkaSink,
    ProduceErrors,
    dumps,
    produce_kinds,
    produce_partition,
)
from streaming.job.status import StatusListener
from streaming.schema.status import JobStatus

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


# ---- sources -------------------------------------------------------------------------------
def kafka_options(s: JobSettings) -> dict[str, str]:
    """Options of Spark's ``kafka`` source (security settings pass through as ``kafka.*``)."""
    opts = {
        "kafka.bootstrap.servers": s.bootstrap_servers,
        "subscribe": s.events_topic,
        "startingOffsets": s.starting_offsets,
        "failOnDataLoss": str(s.fail_on_data_loss).lower(),
    }
    if s.max_offsets_per_trigger is not None:
        opts["maxOffsetsPerTrigger"] = str(s.max_offsets_per_trigger)
    opts.update({f"kafka.{k}": v for k, v in s.kafka.items()})
    return opts


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


# ---- the state query's source ---------------------------------------------------------------
def partials_source(spark: SparkSession, s: JobSettings, run_id: str) -> DataFrame:
    """The partials topic: this checkpoint's records, as ``bucket``/``value``. Read whole each
    trigger (no ``maxOffsetsPerTrigger``): partial rows are few per series and batch."""
    opts = kafka_options(s) | {
        "subscribe": s.partials_topic,
        "startingOffsets": "earliest",
        # Up to the ingest batch being written: its rows show when its gate commits (``gate``).
        "kafka.isolation.level": "read_committed",
    }
    opts.pop("maxOffsetsPerTrigger", None)
    raw = spark.readStream.format("kafka").options(**opts).load()
    return _by_bucket(
        raw.select(F.col("key").cast("string"), F.col("value").cast("string")), run_id
    )


def _by_bucket(df: DataFrame, run_id: str) -> DataFrame:
    return df.where(F.col("key").startswith(bucket_key(run_id, ""))).select(
        F.substring_index("key", ":", -1).cast("int").alias("bucket"), "value"
    )


def state_stream(
    partials: DataFrame, cfg: DetectorConfig, clock: Any, latest_only: bool
) -> DataFrame:
    """Partial rows and end markers -> ``buckets.OUTPUT_SCHEMA`` rows, per bucket in the state
    store."""
    return partials.groupBy("bucket").transformWithStateInPandas(
        buckets.make_processor(cfg, clock, latest_only), buckets.OUTPUT_SCHEMA, "Update", "None"
    )


# ---- executor-side writers ---------------------------------------------------------------------
def produce_partials(
    topic: str,
    bootstrap: str,
    conf: dict[str, str],
    errors: Any,
    counts: Any,
    ctx: BatchContext,
    rows: Any,
) -> None:
    """``foreachPartition`` body of the ingest query: valid partial rows to the partials topic,
    every row counted."""
    c = BatchCounts()
    produce_partition(topic, bootstrap, conf, errors, count_rows(rows, c, ctx))
    counts.add(counts_dict(c))


def produce_state(
    topics: dict[str, str], bootstrap: str, conf: dict[str, str], errors: Any, stats: Any, rows: Any
) -> None:
    """``foreachPartition`` body of the state query: aggregates and findings to their topics,
    the buckets' stats rows counted."""
    other = produce_kinds(topics, bootstrap, conf, errors, rows)
    _count_stats(other, stats)


def _count_stats(rows: list[Any], stats: Any) -> None:
    total: dict[str, int] = {}
    for kind, _key, value in rows:  # by position, as ``produce_kinds`` reads them
        if kind == "stats":
            for k, n in json.loads(value).items():
                total[k] = total.get(k, 0) + n
    stats.add(total)


def kafka_dead_letter_writer(
    s: JobSettings, errors: ProduceErrors
) -> Callable[[DataFrame, int], None]:
    """Writes a decoded batch's rejected records to the dead-letter topic (key
    ``partition:offset``, so a re-run batch writes the same keys again) from the executors,
    with the same producer settings and error handling as every other write of the job."""

    def write(df: DataFrame, _batch_id: int) -> None:
        counts = df.sparkSession.sparkContext.accumulator({}, CounterParam())
        body = functools.partial(
            produce_partition, s.deadletter_topic, s.bootstrap_servers, dict(s.producer), counts
        )
        parse.dead_letters(df).select("key", "value").foreachPartition(body)
        _add_errors(errors, counts.value)

    return write


def _add_errors(errors: ProduceErrors, counts: dict[tuple[str, str], int]) -> None:
    for (topic, error), n in counts.items():
        errors.add(topic, error, n, detail="from the executors")


# ---- the live job --------------------------------------------------------------------------
@dataclass
class RunningJob:
    spark: SparkSession
    queries: list[StreamingQuery]
    listener: StatusListener
    sinks: list[KafkaSink]
    gate: BatchGate
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
        self.gate.shutdown()
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


@dataclass
class StateTotals:
    """The state query's counts since the job started."""

    late: int = 0


def start_job(spark: SparkSession, s: JobSettings, available_now: bool = False) -> RunningJob:
    """Start the job's two queries and the status listener. ``available_now``: process what
    the events topic holds, then stop (benchmarks; the state query then runs until stopped)."""
    temp_dirs: list[str] = []
    checkpoint = s.checkpoint
    if checkpoint is None:  # local mode only (validated): state does not survive a restart
        checkpoint = tempfile.mkdtemp(prefix="connmon-job-ckpt-")
        temp_dirs.append(checkpoint)
        log.warning("no --checkpoint: using %s, removed at exit", checkpoint)
    meta = open_checkpoint(spark, checkpoint, s.detectors.window_s, s.state_buckets)
    resumed = last_commit(spark, checkpoint, STATE_QUERY)
    if resumed is not None:
        log.info("series state resumes after batch %d of the state query (%s)", resumed, checkpoint)
    if not s.local:
        d = tempfile.mkdtemp(prefix="connmon-pyfiles-")
        temp_dirs.append(d)
        spark.sparkContext.addPyFile(package_zip(d))

    errors = ProduceErrors()
    producer = dict(s.producer)
    end_sink = KafkaSink(s.bootstrap_servers, producer, errors)
    status_sink = KafkaSink(s.bootstrap_servers, producer, errors)
    totals = StateTotals()
    sc = spark.sparkContext

    def write_partials(df: DataFrame, ctx: BatchContext) -> BatchCounts:
        errs = sc.accumulator({}, CounterParam())
        counts = sc.accumulator(CountsParam().zero({}), CountsParam())
        body = functools.partial(
            produce_partials, s.partials_topic, s.bootstrap_servers, producer, errs, counts, ctx
        )
        df.foreachPartition(body)
        _add_errors(errors, errs.value)
        c = BatchCounts()
        merge_counts(c, counts.value)
        return c

    def write_ends(records: list[tuple[str, dict[str, Any]]]) -> None:
        end_sink.publish(s.partials_topic, records)

    def write_outputs(df: DataFrame, batch_id: int) -> None:
        errs = sc.accumulator({}, CounterParam())
        stats = sc.accumulator({}, CounterParam())
        topics = {"aggregates": s.aggregates_topic, "findings": s.findings_topic}
        df.foreachPartition(
            functools.partial(produce_state, topics, s.bootstrap_servers, producer, errs, stats)
        )
        _add_errors(errors, errs.value)
        totals.late += stats.value.get("late", 0)
        if stats.value.get("duplicates"):  # an ingest batch written again after a crash
            log.info(
                "state batch %d: %d partial row(s) already merged, skipped",
                batch_id,
                stats.value["duplicates"],
            )

    ingest = Ingest(
        s.detectors,
        meta.run_id,
        meta.state_buckets,
        write_partials,
        write_ends,
        kafka_dead_letter_writer(s, errors),
        max_age_s=s.max_event_age_s,
        max_future_s=s.max_event_future_s,
        tick_every_s=s.detectors.window_s / 4,
    )

    gate = BatchGate(s.bootstrap_servers, s.partials_topic, meta.run_id, producer)

    def ingest_batch(raw: DataFrame, batch_id: int) -> None:
        gate.open()
        try:
            ingest(raw, batch_id)
        except BaseException:
            gate.abort()
            raise
        gate.close()

    def publish_status(st: JobStatus) -> None:
        st.produce_errors = errors.totals()
        st.partials_gate_failures_total = gate.failures_total
        status_sink.publish(s.status_topic, [(s.job_id, st.to_dict())], timeout_s=10)

    def stats() -> Any:
        st = ingest.stats
        if st is None:
            return None
        return dataclasses.replace(st, late_events_total=st.late_events_total + totals.late)

    listener = StatusListener(s.job_id, publish_status, stats)
    spark.streams.addListener(listener)
    trigger: dict[str, Any] = {"processingTime": f"{int(s.trigger_s * 1000)} milliseconds"}
    ingest_writer = (
        kafka_source(spark, s)
        .writeStream.queryName(INGEST_QUERY)
        .foreachBatch(ingest_batch)
        .option("checkpointLocation", join(checkpoint, INGEST_QUERY))
        .trigger(**({"availableNow": True} if available_now else trigger))
    )
    state_writer = (
        state_stream(partials_source(spark, s, meta.run_id), s.detectors, buckets.wall_clock, True)
        .writeStream.queryName(STATE_QUERY)
        .outputMode("update")
        .foreachBatch(write_outputs)
        .option("checkpointLocation", join(checkpoint, STATE_QUERY))
        .trigger(**trigger)
    )
    queries: list[StreamingQuery] = []
    job = RunningJob(spark, queries, listener, [end_sink, status_sink], gate, temp_dirs)
    try:
        # Each query's jobs run in the scheduler pool of its name (``session.POOLS_FILE``): a
        # query's thread takes the pool set when it starts.
        sc.setLocalProperty("spark.scheduler.pool", STATE_QUERY)
        queries.append(state_writer.start())
        sc.setLocalProperty("spark.scheduler.pool", INGEST_QUERY)
        queries.append(ingest_writer.start())
    except BaseException:
        job.stop()
        raise
    finally:
        sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    return job


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
        folder = Path(work) / "partials"
        folder.mkdir()

        def keep_dead(df: DataFrame, _batch_id: int) -> None:
            rows = parse.dead_letters(df).select("value").collect()
            dead.extend(json.loads(r.value) for r in rows)

        def write_partials(df: DataFrame, ctx: BatchContext) -> BatchCounts:
            c = BatchCounts()
            rows = list(count_rows(df.collect(), c, ctx))
            _write_lines(folder / f"{ctx.batch:08d}.txt", [(r.key, r.value) for r in rows])
            return c

        def write_ends(records: list[tuple[str, dict[str, Any]]]) -> None:
            path = folder / f"{records[0][1]['batch']:08d}-end.txt"
            _write_lines(path, [(k, dumps(v)) for k, v in records])

        ingest = Ingest(
            cfg,
            REPLAY_RUN,
            state_buckets,
            write_partials,
            write_ends,
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

        lines = spark.readStream.format("text").load(str(folder))
        split = lines.select(
            F.substring_index("value", "\t", 1).alias("key"),
            F.expr("substring(value, instr(value, '\t') + 1)").alias("value"),
        )
        _run_to_end(
            state_stream(_by_bucket(split, REPLAY_RUN), cfg, buckets.window_end_clock, False)
            .writeStream.outputMode("update")
            .foreachBatch(collect),
            f"{work}/{STATE_QUERY}",
        )
        by_kind: dict[str, list[dict[str, Any]]] = {"aggregates": [], "findings": []}
        for r in out:
            if r.kind in by_kind:
                by_kind[r.kind].append(json.loads(r.value))
        return ReplayResult(
            findings=sorted(by_kind["findings"], key=lambda f: f["updated_at"]),
            aggregates=sorted(by_kind["aggregates"], key=lambda a: a["window_end"]),
            dead_letters=sorted(dead, key=lambda d: (d["topic"] or "", dumps(d))),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_lines(path: Path, records: list[tuple[str, str]]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for key, value in records:
            f.write(f"{key}\t{value}\n")
    tmp.rename(path)


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
