"""The job's SparkSession: settings every run needs, plus small-machine settings only when the
master is local. On a cluster (``--master spark://...``, ``k8s://...``, ``yarn``, or
``spark-submit``) nothing binds to loopback or caps the driver's memory: those belong to the
cluster's own configuration.

When this process starts Spark's JVM (not under ``spark-submit``), the JVM gets a session and
process group of its own: a SIGTERM or Ctrl-C sent to the driver's process group reaches only
the Python driver, which then stops the queries and Spark in order (``stop_session``). The JVM
still ends with the driver however it ends: it exits when its standard input, a pipe from the
driver, closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streaming.cachedir import cache_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

# Spark generates one large Java method per query stage; HotSpot leaves methods over 8000
# bytecodes to the interpreter, which made the job's aggregation stage about a third slower
# (benchmarks/job/README.md). Let the JIT compile them.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
JOB_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": JIT_OPTIONS,
    "spark.executor.extraJavaOptions": JIT_OPTIONS,
    "spark.sql.session.timeZone": "UTC",
    # Spark reuses at most this many generated classes (100 by default). The job's two queries
    # need more, and each class compiled again is new work for the JIT as well (measured at
    # 100k series: 104 classes compiled in 2 minutes with the default, 11 with this).
    "spark.sql.codegen.cache.maxEntries": "1000",
    "spark.sql.adaptive.enabled": "false",
    # Batch writes to Kafka (the ingest query's records and dead letters) through Spark's
    # DataSource V2 writer: with the V1 one, the write runs the frame outside the query Spark
    # reports, and the ``Observation`` of the batch's counts never receives them.
    "spark.sql.sources.useV1SourceList": "avro,csv,json,orc,parquet,text",
    "spark.ui.showConsoleProgress": "false",
    # pandas UDFs (the decoder's slow path) with pyarrow >= 2 want this on every executor
    "spark.executorEnv.PYARROW_IGNORE_TIMEZONE": "1",
    # The series' state: RocksDB on the executors, each batch's changes logged to the
    # checkpoint instead of a full snapshot per batch.
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
# One machine: few partitions, no UI, loopback only, a small driver.
LOCAL_CONF: dict[str, str] = {
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}
JARS_CONF = ("spark.jars", "spark.jars.packages")


def connector_package() -> str:
    """Maven coordinates of the connector for the installed PySpark."""
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def is_local(master: str) -> bool:
    return master.startswith("local")


def connector_jars() -> list[str]:
    """Spark's Kafka connector and its dependencies (PySpark does not ship them): the jars in
    ``$CONNMON_SPARK_JARS``, else in the jar cache that ``make setup`` fills
    (``jars/spark-kafka`` in the per-user cache, ``streaming.cachedir``), with
    Hadoop's S3A filesystem for ``s3a://`` checkpoints (``jars/s3a``) when the cache has it.
    Empty when neither exists: then the cluster must provide them (``--jars``/``--packages``)."""
    env = os.environ.get("CONNMON_SPARK_JARS")
    if env:
        folders = [Path(env)]
    else:
        root = cache_dir()
        folders = [root / "jars" / "spark-kafka", root / "jars" / "s3a"]
    return [str(p) for folder in folders if folder.is_dir() for p in sorted(folder.glob("*.jar"))]


def job_conf(
    master: str, conf: Mapping[str, str] | None = None, jars: list[str] | None = None
) -> dict[str, str]:
    """Spark conf for the job: ``JOB_CONF``, ``LOCAL_CONF`` for a local master, the connector
    jars unless the caller names its own, then the caller's settings."""
    conf = dict(conf or {})
    merged = dict(JOB_CONF)
    if is_local(master):
        merged.update(LOCAL_CONF)
    if jars and not any(k in conf for k in JARS_CONF):
        merged["spark.jars"] = ",".join(jars)
    merged.update(conf)
    return merged


def job_session(
    app_name: str, master: str, conf: Mapping[str, str] | None = None, jars: list[str] | None = None
) -> SparkSession:
    """Get or create the session. Under ``spark-submit`` the master and jars given there win:
    Spark ignores builder settings that are already fixed."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    options = {
        "spark.app.name": app_name,
        "spark.master": master,
        **job_conf(master, conf, connector_jars() if jars is None else jars),
    }
    _launch_gateway(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _launch_gateway(options: Mapping[str, str]) -> None:
    """Start Spark's JVM in a new session, as PySpark would start it on ``getOrCreate`` (same
    ``spark-submit`` command, same settings), unless it runs already or started this process
    (``spark-submit``)."""
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    # What SparkContext does with a gateway it launched itself; getOrCreate then reuses it.
    SparkContext._ensure_initialized(gateway=gateway)


# Spark's loggers that report stopping a query in the middle of a batch as a failure.
QUERY_STOP_LOGGER = "org.apache.spark.sql.execution.streaming"
TASK_STOP_LOGGERS = ("org.apache.spark.TaskContextImpl", "org.apache.spark.scheduler.DAGScheduler")


def stop_query(query: StreamingQuery, wait_s: float, poll_s: float = 0.1) -> bool:
    """Stop ``query`` once the micro-batch running now is committed: as soon as no trigger is
    active, or a batch has completed since the call (a query that is behind starts the next
    one at once; that one has only just begun and is given up). Past ``wait_s``, stop anyway
    and return False: the running batch is abandoned.

    Spark has no "stop after this batch", so a batch starting in the instant of the stop is
    abandoned too. An abandoned batch is not in the checkpoint's commit log: Spark runs it again
    on restart and the job writes its output again (keyed, or skipped as a duplicate)."""
    deadline = time.monotonic() + wait_s
    abandoned = False
    try:
        before = _progress_stamp(query.lastProgress)
        while query.isActive and query.status["isTriggerActive"]:
            progress = query.lastProgress
            if _progress_stamp(progress) != before and "addBatch" in progress["durationMs"]:
                break
            if time.monotonic() >= deadline:
                abandoned = True
                break
            time.sleep(poll_s)
    except Exception:  # the query or Spark is gone already: nothing left to wait for
        log.debug("status of %s", query.name, exc_info=True)
    # Reports of the stop as a failure: a foreachBatch call cut short fails in this process and
    # Py4J logs that with a traceback; Spark then logs the query's end as an error, and later,
    # from other threads, the cleanup of the cancelled tasks and the cancelling of a job group
    # with no job running (as between two batches).
    _set_jvm_levels(dict.fromkeys(TASK_STOP_LOGGERS, "OFF"))
    levels = _set_jvm_levels({QUERY_STOP_LOGGER: "OFF"})
    try:
        with _quiet("py4j"), _java_errors_as_such():
            query.stop()
    except Exception:  # already failed: nothing to stop
        log.debug("stopping %s", query.name, exc_info=True)
    finally:
        _set_jvm_levels(levels)
    return not abandoned


@contextlib.contextmanager
def _java_errors_as_such() -> Iterator[None]:
    """Inside the block, a Python callback (foreachBatch) failing on a Java exception hands the
    JVM that exception, not the Python traceback as text: Spark's pattern that looks for an
    interruption in such a text overflows the stream thread's stack on a long one, and the
    thread dies with a StackOverflowError printed in full."""
    from pyspark.core.context import SparkContext

    gateway = SparkContext._gateway
    params = gateway.__dict__.get("python_parameters") if gateway is not None else None
    if params is None:  # not Py4J's ClientServer (PYSPARK_PIN_THREAD=false)
        yield
        return
    before = params.propagate_java_exceptions
    params.propagate_java_exceptions = True
    try:
        yield
    finally:
        params.propagate_java_exceptions = before


def _progress_stamp(progress: dict[str, Any] | None) -> tuple[Any, Any] | None:
    """Tells one progress report from the next (no-data triggers report the same batch id)."""
    return None if progress is None else (progress.get("batchId"), progress.get("timestamp"))


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Nothing below CRITICAL from ``logger`` inside the block."""
    target = logging.getLogger(logger)
    level = target.level
    target.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        target.setLevel(level)


def _set_jvm_levels(levels: Mapping[str, str]) -> dict[str, str]:
    """Set log4j levels (by name) of the driver JVM's loggers; returns the levels they had."""
    from pyspark.core.context import SparkContext

    jvm = SparkContext._jvm
    before: dict[str, str] = {}
    try:
        log4j = jvm.org.apache.logging.log4j
        for logger, level in levels.items():
            before[logger] = str(log4j.LogManager.getLogger(logger).getLevel().name())
            log4j.core.config.Configurator.setLevel(logger, log4j.Level.getLevel(level))
    except Exception:  # no JVM, or another logging backend: leave them as they are
        log.debug("log levels %s", levels, exc_info=True)
    return before


def stop_session(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop Spark. When this process started Spark's JVM, close it and wait for it to exit
    (killed after ``timeout_s``), so that nothing of the job outlives the driver; under
    ``spark-submit`` the JVM is this process's parent and ends on its own."""
    from pyspark.core.context import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    # Not getattr: a missing attribute of the gateway is looked up in the JVM.
    proc = gateway.__dict__.get("proc") if gateway is not None else None
    if proc is None:
        return
    with SparkContext._lock:
        SparkContext._gateway = None
        SparkContext._jvm = None
    gateway.shutdown()
    proc.stdin.close()  # the gateway exits at the end of its input
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("Spark's JVM (pid %d) still runs after %.0fs; killing it", proc.pid, timeout_s)
        proc.kill()
        proc.wait()
