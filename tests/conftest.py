"""Shared fixtures: real Kafka (KRaft), real Spark, real Prometheus, all on 127.0.0.1.

Markers come from the folder: tests/unit -> unit, tests/integration -> integration,
tests/e2e -> e2e. Services are stopped at teardown whatever the test did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_MARK_BY_DIR = {"unit": "unit", "integration": "integration", "e2e": "e2e"}


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


@pytest.fixture
def prometheus_factory() -> Iterator[Callable]:
    """Start Prometheus servers scraping the given targets with the given rule files."""
    from streaming.stack.prometheus import PrometheusServer

    started: list[PrometheusServer] = []

    def make(
        scrape_targets: list[str],
        rule_files: list[str | Path] = (),  # type: ignore[assignment]
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
    ) -> PrometheusServer:
        server = PrometheusServer(
            scrape_targets=list(scrape_targets),
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
