"""One scenario session for the whole e2e run: the three clusters, one agent, one job, one
exporter, one Prometheus, and every scenario's clients running concurrently (each scenario has
its own topics and app names, so they do not interfere). Tests then wait, each up to its
scenario's deadline, for what they expect.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def scenario_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Everything started once for the module that uses it (test_scenarios.py), and stopped
    when that module is done, whatever happened: three clusters, the job and the clients
    would otherwise keep two cores busy through every later test."""
    from streaming.scenarios import catalog
    from streaming.scenarios.runner import Session

    run_dir = Path(tmp_path_factory.mktemp("scenarios"))
    session = Session(catalog.get(), run_dir, connmon=True, say=lambda m: print(m, flush=True))
    session.start()
    try:
        session.read_findings()
        yield session
    finally:
        print(session.observer_report())
        session.stop()
