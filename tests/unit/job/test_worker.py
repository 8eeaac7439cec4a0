"""The executors' per-task cost cut (``streaming.job.worker``), each in a fresh Python process:
it changes process-wide state (the collector)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys, time

    from pyspark.core.files import SparkFiles
    SparkFiles._is_running_on_worker = sys.argv[1] == "1"
    import pandas, pyarrow  # what a worker holds
    from streaming.job import buckets, worker
    worker.prepare()
    worker.prepare()
    t = time.perf_counter()
    gc.collect()
    print(json.dumps({"frozen": gc.get_freeze_count(), "collect_s": time.perf_counter() - t}))
    """
)


def _run(in_worker: bool) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, "1" if in_worker else "0"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_in_a_worker_the_imports_are_frozen_out_of_the_collector():
    r = _run(in_worker=True)
    assert r["frozen"] > 10_000  # the modules' objects: a collection no longer walks them


def test_outside_a_worker_nothing_changes():
    assert _run(in_worker=False)["frozen"] == 0
