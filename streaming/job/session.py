"""The job's SparkSession: settings every run needs, plus small-machine settings only when the
master is local. On a cluster (``--master spark://...``, ``k8s://...``, ``yarn``, or
``spark-submit``) nothing binds to loopback or caps the driver's memory: those belong to the
cluster's own configuration.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark generates one large Java method per query stage; HotSpot leaves methods over 8000
# bytecodes to the interpreter, which made the job's aggregation stage about a third slower
# (benchmarks/job/README.md). Let the JIT compile them.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
JOB_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": JIT_OPTIONS,
    "spark.executor.extraJavaOptions": JIT_OPTIONS,
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "false",
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
    (``$CONNMON_CACHE_DIR/jars/spark-kafka``, by default under ``deploy/local/.cache``). Empty
    when neither exists: then the cluster must provide them (``--jars``/``--packages``)."""
    env = os.environ.get("CONNMON_SPARK_JARS")
    if env:
        folder = Path(env)
    else:
        cache = os.environ.get("CONNMON_CACHE_DIR")
        root = Path(cache) if cache else Path(__file__).resolve().parents[2] / "deploy/local/.cache"
        folder = root / "jars" / "spark-kafka"
    return sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []


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
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in job_conf(master, conf, connector_jars() if jars is None else jars).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
