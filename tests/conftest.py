"""Shared fixtures: real Kafka (KRaft), real Spark, real Prometheus, all on 127.0.0.1.

Markers come from the folder: tests/unit -> unit, tests/integration -> integration,
tests/e2e -> e2e. Services are stopped at teardown whatever the test did.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import leftovers
import pytest

_MARK_BY_DIR = {"unit": "unit", "integration": "integration", "e2e": "e2e"}
# Every JVM a test starts (Kafka brokers, Spark, the Java client driver) lives for seconds to a
# few minutes and handles little data: HotSpot's optimising compiler (C2) would spend more CPU
# compiling than it saves, and G1's concurrent threads more than the serial collector on heaps
# this small. Both cut the CPU of the test files measured (README, "Tests"); they change how fast
# code runs, never what it does.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_TOKEN = pytest.StashKey[str]()
_FOUND = pytest.StashKey[str]()
_SCRATCH = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Mark this process's environment with a token of this session, so that every process a
    test starts can be found at the end; give every JVM a test starts the options above and a
    temporary directory of the session's, removed at its end."""
    config.stash[_TOKEN] = os.environ[leftovers.MARKER] = leftovers.new_token()
    # Tests kill jobs with SIGKILL on purpose, and a killed Spark cannot remove its scratch
    # files (RocksDB state stores, block manager, artifacts: about 30 MB a job) from /tmp.
    scratch = config.stash[_SCRATCH] = Path(tempfile.mkdtemp(prefix="connmon-tests-jvm-"))
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    options = f"{TEST_JVM_OPTIONS} -Djava.io.tmpdir={scratch}"
    given = os.environ.get("JAVA_TOOL_OPTIONS", "")
    if TEST_JVM_OPTIONS not in given:
        os.environ["JAVA_TOOL_OPTIONS"] = f"{given} {options}".strip()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test left a process running, a connection open or a Kafka client
    alive (every fixture is torn down by now)."""
    found = leftovers.find(session.config.stash[_TOKEN])
    shutil.rmtree(session.config.stash[_SCRATCH], ignore_errors=True)
    if found:
        lines = "\n".join(f"  {f}" for f in found)
        session.config.stash[_FOUND] = f"left behind after the last test:\n{lines}"
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = terminalreporter.config.stash.get(_FOUND, None)
    if found:
        terminalreporter.write_sep("=", "leftovers", red=True)
        terminalreporter.write_line(found)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        try:
            top = Path(item.fspath).relative_to(root).parts[0]
        except ValueError:
            continue
        mark = _MARK_BY_DIR.get(top)
        if mark:
            item.add_marker(getattr(pytest.mark, mark))


@pytest.fixture(autouse=True)
def _drop_cached_kafka_clients() -> Iterator[None]:
    """The agent keeps one metadata client per cluster for its whole life; a test's cluster
    is gone after the test, so its client goes too."""
    yield
    kafka_meta = sys.modules.get("streaming.agent.kafka_meta")
    if kafka_meta is not None:
        kafka_meta._admins.clear()


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator:
    """One single-broker KRaft cluster shared by the session (topics per test keep them apart)."""
    from streaming.stack.kafka import KafkaCluster

    cluster = KafkaCluster(brokers=1, name="connmon-test")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka_cluster_factory() -> Iterator[Callable]:
    """Start clusters with their own size and broker overrides; all stopped at teardown."""
    from streaming.stack.kafka import KafkaCluster

    started: list[KafkaCluster] = []

    def make(
        brokers: int = 1, overrides: dict[str, str] | None = None, host: str = "127.0.0.1"
    ) -> KafkaCluster:
        cluster = KafkaCluster(
            brokers=brokers, overrides=overrides or {}, name="connmon-test", host=host
        )
        started.append(cluster)
        return cluster.start()

    try:
        yield make
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local[2] SparkSession with the Kafka connector jars from the Maven cache."""
    from streaming.stack.spark import local_session

    session = local_session(app_name="connmon-tests", master="local[2]")
    try:
        yield session
    finally:
        session.stop()
        _stop_spark_jvm()


def _stop_spark_jvm() -> None:
    """End the JVM behind PySpark's gateway, which ``SparkSession.stop()`` leaves running
    until the interpreter exits (it exits when its stdin closes)."""
    import subprocess

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None
    if proc is not None:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def prometheus_factory() -> Iterator[Callable]:
    """Start Prometheus servers with the given scrape jobs (name -> targets, see
    ``streaming.stack.prometheus.connmon_jobs``) and rule files."""
    from streaming.stack.prometheus import PrometheusServer

    started: list[PrometheusServer] = []

    def make(
        scrape_jobs: dict[str, list[str]],
        rule_files: list[str | Path] = (),  # type: ignore[assignment]
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
    ) -> PrometheusServer:
        server = PrometheusServer(
            scrape_jobs=dict(scrape_jobs),
            rule_files=list(rule_files),
            scrape_interval_s=scrape_interval_s,
            evaluation_interval_s=evaluation_interval_s,
        )
        started.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/group name unique to this test."""
    import uuid

    return f"t-{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:8]}"
