"""Fixtures of the Kafka client library identification tests (``streaming.agent.libraries``):
the pure parsers, fixture /proc trees, and real artifacts (the librdkafka bundled with
confluent-kafka, this very process, Go binaries built here, the kafka-clients jars of the local
stack). The fakes they share are in ``library_fakes``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(proc root, a container's root filesystem)."""
    proc, fs = tmp_path / "proc", tmp_path / "fs"
    proc.mkdir()
    fs.mkdir()
    yield proc, fs
