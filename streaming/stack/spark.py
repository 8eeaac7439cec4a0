"""A local SparkSession with Spark's Kafka connector from the Maven cache on its classpath.

The connector jars come from ``artifacts.jars("spark-kafka")`` (fetched once, then cached), never
from ``spark.jars.packages`` at run time: a session starts with no network access.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from streaming.stack import artifacts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark generates one large Java method per query stage; HotSpot leaves methods over 8000
# bytecodes to the interpreter, which made the job's aggregation stage about a third slower
# (benchmarks/job/README.md). Let the JIT compile them.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
# Small-machine defaults: few shuffle partitions, no UI, loopback only, UTC everywhere.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.driver.extraJavaOptions": JIT_OPTIONS,
    "spark.executor.extraJavaOptions": JIT_OPTIONS,
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.sql.adaptive.enabled": "false",
}


def kafka_connector_jars() -> list[str]:
    """Absolute paths of the connector jars that PySpark does not already ship."""
    artifacts.check_spark_version()
    return [str(p) for p in artifacts.jars("spark-kafka")]


def session_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark conf for connmon: local defaults, connector jars, then caller overrides."""
    merged = dict(LOCAL_DEFAULTS)
    merged["spark.jars"] = ",".join(kafka_connector_jars())
    merged.update(conf or {})
    return merged


def local_session(
    app_name: str = "connmon",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create a SparkSession with the Kafka connector on its classpath."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", _python())
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in session_conf(conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _python() -> str:
    import sys

    return sys.executable
