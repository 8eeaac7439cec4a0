"""The job with its checkpoint on an S3-compatible server (moto's server mode on 127.0.0.1),
through Hadoop's S3A filesystem and the settings a user passes with ``--spark-conf``: SIGKILL
and a restart from the checkpoint on S3 lose no finding and add no key, as with a local one."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from job_helpers import Topics, _kill_group, sigkill_and_restart

from streaming.job.session import connector_jars
from streaming.stack import artifacts
from streaming.stack.ports import free_port

BUCKET = "connmon-checkpoints"
REGION = "us-east-1"
ACCESS_KEY = "connmon-test"
SECRET_KEY = "connmon-test-secret"


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    client: Any  # boto3's S3 client for it

    def keys(self, prefix: str) -> list[str]:
        """Every object key in the bucket under ``prefix``."""
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def spark_conf(self) -> dict[str, str]:
        """What the job needs to reach this server through S3A (no TLS, path-style URLs)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
        }


def _wait_for_port(proc: subprocess.Popen, port: int, log: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"moto's server exited: {log.read_text()[-2000:]}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"moto's server did not listen on {port} within {timeout_s:.0f}s")


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 and a free port, with the bucket created; stopped at
    teardown."""
    port = free_port()
    log = tmp_path / "moto.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=open(log, "ab"),  # noqa: SIM115 - owned by the child
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_port(proc, port, log)
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        client.create_bucket(Bucket=BUCKET)
        yield S3Server(endpoint, client)
    finally:
        _kill_group(proc, signal.SIGTERM, timeout_s=10)


def test_s3a_jars_fit_pysparks_hadoop_and_go_on_the_jobs_classpath():
    """hadoop-aws of PySpark's Hadoop version, AWS SDK modules of the minor line it is built
    with, nothing PySpark ships already, no 560 MB SDK bundle; the job takes them all."""
    folder = artifacts.ensure("s3a", quiet=True)
    assert artifacts.check_hadoop_version() == artifacts.pyspark_hadoop_version()
    hadoop = artifacts.pom_property("s3a", "hadoop.version")
    parent = artifacts.cache_dir() / "m2/org/apache/hadoop/hadoop-project" / hadoop
    built_with = re.search(
        r"<aws-java-sdk-v2.version>([^<]+)<", (parent / f"hadoop-project-{hadoop}.pom").read_text()
    )
    assert built_with, parent
    sdk = artifacts.pom_property("s3a", "aws-sdk.version")
    assert sdk.split(".")[:2] == built_with.group(1).split(".")[:2]

    names = {artifacts._artifact_name(j): j.name for j in folder.glob("*.jar")}
    assert names["hadoop-aws"] == f"hadoop-aws-{hadoop}.jar"
    for module in ("s3", "s3-transfer-manager", "sts", "apache-client", "annotations"):
        assert names[module] == f"{module}-{sdk}.jar"
    assert "bundle" not in names
    assert not {"hadoop-client-api", "httpclient", "netty-common", "slf4j-api"} & set(names)
    assert artifacts.jars("s3a") == sorted(folder.glob("*.jar"))
    assert {str(j) for j in folder.glob("*.jar")} <= set(connector_jars())


def test_sigkill_and_restart_from_an_s3_checkpoint_lose_no_finding_and_add_no_key(
    kafka_cluster, spark, s3_server, unique_name, tmp_path
):
    artifacts.ensure("s3a", quiet=True)  # the job's session takes the S3A jars from this cache
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    prefix = f"{unique_name}/ckpt"
    checkpoint = f"s3a://{BUCKET}/{prefix}"
    conf = [arg for k, v in s3_server.spark_conf().items() for arg in ("--spark-conf", f"{k}={v}")]

    def committed() -> bool:
        keys = s3_server.keys(f"{prefix}/state/commits/")
        return any(k.rsplit("/", 1)[-1].isdigit() for k in keys)

    log = sigkill_and_restart(t, spark, tmp_path, checkpoint, committed, extra_args=conf)
    assert "series state resumes after batch" in log and f"({checkpoint})" in log
    keys = s3_server.keys(f"{prefix}/")
    assert f"{prefix}/connmon.json" in keys
    for query in ("ingest", "state"):
        assert any(k.startswith(f"{prefix}/{query}/commits/") for k in keys), query
    # the state store's changelog files, written by the executors
    assert any(k.startswith(f"{prefix}/state/state/") and k.endswith(".changelog") for k in keys)
