"""Where the stream is wired: sources (Kafka or JSON-lines files) -> the shared
transformations -> sinks. Live job and replay differ only in source, trigger and sinks."""

from __future__ import annotations

import functools
import glob
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.job import parse
from streaming.job.batch import BatchProcessor, check_checkpoint
from streaming.job.session import connector_package
from streaming.job.settings import JobSettings
from streaming.job.sinks import (
    CounterParam,
    KafkaSink,
    MemorySink,
    ProduceErrors,
    Sink,
    dumps,
    produce_partition,
)
from streaming.job.state_files import StateFiles
from streaming.job.status import JOB_QUERY, StatusListener
from streaming.schema.aggregates import Aggregate
from streaming.schema.status import JobStatus
from streaming.schema.times import iso

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


# ---- sinks ---------------------------------------------------------------------------------
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
        for (topic, error), n in counts.value.items():
            errors.add(topic, error, n, detail="from the executors")

    return write


# ---- the live job --------------------------------------------------------------------------
@dataclass
class RunningJob:
    spark: SparkSession
    queries: list[StreamingQuery]
    listener: StatusListener
    sinks: list[Sink]
    temp_dirs: list[str] = field(default_factory=list)

    def stop(self) -> None:
        for q in self.queries:
            try:
                q.stop()
            except Exception:  # already failed: nothing to stop
                log.debug("stopping %s", q.name, exc_info=True)
        self.spark.streams.removeListener(self.listener)
        for sink in self.sinks:
            sink.close()
        for d in self.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)


def package_zip(dest_dir: str) -> str:
    """The ``streaming`` package as a zip for executors (``addPyFile``)."""
    import streaming

    root = Path(streaming.__file__).parent
    out = Path(dest_dir) / "connmon-streaming.zip"
    with zipfile.ZipFile(out, "w") as z:
        for f in root.rglob("*.py"):
            z.write(f, f.relative_to(root.parent))
    return str(out)


def start_job(spark: SparkSession, s: JobSettings, available_now: bool = False) -> RunningJob:
    """Start the job's query (one read of the events topic) and the status listener.
    ``available_now``: process what the topic holds, then stop (benchmarks)."""
    temp_dirs: list[str] = []
    checkpoint = s.checkpoint
    if checkpoint is None:  # local mode only (validated): state does not survive a restart
        checkpoint = tempfile.mkdtemp(prefix="connmon-job-ckpt-")
        temp_dirs.append(checkpoint)
        log.warning("no --checkpoint: using %s, removed at exit", checkpoint)
    Path(checkpoint).mkdir(parents=True, exist_ok=True)
    check_checkpoint(StateFiles(checkpoint), s.detectors)
    if not s.local:
        d = tempfile.mkdtemp(prefix="connmon-pyfiles-")
        temp_dirs.append(d)
        spark.sparkContext.addPyFile(package_zip(d))

    errors = ProduceErrors()
    sink = KafkaSink(s.bootstrap_servers, s.producer, errors)
    status_sink = KafkaSink(s.bootstrap_servers, s.producer, errors)

    def publish_status(st: JobStatus) -> None:
        st.produce_errors = errors.totals()
        status_sink.publish(s.status_topic, [(s.job_id, st.to_dict())], timeout_s=10)

    processor = BatchProcessor(
        s.detectors,
        sink,
        s.aggregates_topic,
        s.findings_topic,
        StateFiles(checkpoint),
        clock=lambda _agg: iso(_now()),  # type: ignore[arg-type,return-value]
        write_dead_letters=kafka_dead_letter_writer(s, errors),
        max_age_s=s.max_event_age_s,
        max_future_s=s.max_event_future_s,
    )
    listener = StatusListener(s.job_id, publish_status, lambda: processor.stats)
    spark.streams.addListener(listener)
    trigger: dict[str, Any] = (
        {"availableNow": True}
        if available_now
        else {"processingTime": f"{int(s.trigger_s * 1000)} milliseconds"}
    )
    writer = (
        kafka_source(spark, s)
        .writeStream.queryName(JOB_QUERY)
        .foreachBatch(processor)
        .option("checkpointLocation", str(Path(checkpoint) / JOB_QUERY))
        .trigger(**trigger)
    )
    queries: list[StreamingQuery] = []
    job = RunningJob(spark, queries, listener, [sink, status_sink], temp_dirs)
    try:
        queries.append(writer.start())
    except BaseException:
        job.stop()
        raise
    return job


def _now() -> float:
    import time

    return time.time()


# ---- replay --------------------------------------------------------------------------------
@dataclass
class ReplayResult:
    findings: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]


def replay(
    spark: SparkSession,
    events: str,
    cfg: DetectorConfig,
    max_age_s: float | None = None,
    max_future_s: float | None = None,
) -> ReplayResult:
    """The live job's transformations over JSON-lines files, run to the end (available-now).
    Deterministic: records about a window are stamped with its end, not the wall clock."""
    import json

    work = tempfile.mkdtemp(prefix="connmon-replay-")
    try:
        dead: list[dict[str, Any]] = []

        def keep_dead(df: DataFrame, _batch_id: int) -> None:
            rows = parse.dead_letters(df).select("value").collect()
            dead.extend(json.loads(r.value) for r in rows)

        sink = MemorySink()
        processor = BatchProcessor(
            cfg,
            sink,
            "aggregates",
            "findings",
            StateFiles(work),
            clock=_window_end,
            write_dead_letters=keep_dead,
            max_age_s=max_age_s,
            max_future_s=max_future_s,
            latest_only=False,
        )
        q = (
            file_source(spark, events)
            .writeStream.foreachBatch(processor)
            .option("checkpointLocation", f"{work}/{JOB_QUERY}")
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"replay query failed: {q.exception()}")
        return ReplayResult(
            findings=[v for _, v in sink.records.get("findings", [])],
            aggregates=[v for _, v in sink.records.get("aggregates", [])],
            dead_letters=sorted(dead, key=lambda d: (d["topic"] or "", dumps(d))),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _window_end(agg: Aggregate) -> str:
    return agg.window_end


def write_jsonl(
    path: str, records: list[dict[str, Any]], echo: Callable[[str], None] | None
) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            line = dumps(r)
            f.write(line + "\n")
            if echo is not None:
                echo(line)
