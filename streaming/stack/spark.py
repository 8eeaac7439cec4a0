"""The development stack's SparkSession: the job's own session (``streaming.job.session``)
with Spark's Kafka connector fetched into the jar cache first.

The connector jars come from ``artifacts.jars("spark-kafka")`` (fetched once, then cached), never
from ``spark.jars.packages`` at run time: a session starts with no network access.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from streaming.job.session import job_session
from streaming.stack import artifacts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def kafka_connector_jars() -> list[str]:
    """Absolute paths of the connector jars that PySpark does not already ship."""
    artifacts.check_spark_version()
    return [str(p) for p in artifacts.jars("spark-kafka")]


def local_session(
    app_name: str = "connmon",
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The job's session (``streaming.job.session``) with the connector jars fetched into the
    cache first, so a fresh checkout needs no separate setup step."""
    return job_session(app_name, master, conf, jars=kafka_connector_jars())
