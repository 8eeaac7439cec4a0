"""The executors' per-task overhead cuts (``streaming.job.worker``), each in a fresh Python
process: they change process-wide state (the zip importer class, the collector)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import gc, importlib, json, sys, zipimport

    archive, in_worker, rewrite = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
    sys.path.insert(0, archive)
    import zipped_a  # a zip importer now holds the archive's directory

    reads = []
    original = zipimport._read_directory
    def counting(path):
        reads.append(path)
        return original(path)
    zipimport._read_directory = counting

    from pyspark.core.files import SparkFiles
    SparkFiles._is_running_on_worker = in_worker
    from streaming.job import worker
    worker.prepare()
    worker.prepare()
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()

    importlib.invalidate_caches()  # first: records the archive's stamp
    before = len(reads)
    for _ in range(5):
        importlib.invalidate_caches()
    unchanged = len(reads) - before

    exec(open(rewrite).read())  # the archive changes: a module added
    importlib.invalidate_caches()
    import zipped_b
    print(json.dumps({"frozen": frozen, "threshold": threshold, "unchanged_reads": unchanged,
                      "b": zipped_b.VALUE}))
    """
)
REWRITE = textwrap.dedent(
    """
    import os, zipfile
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("zipped_b.py", "VALUE = 2\\n")
    st = os.stat(archive)
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    """
)


def _run(tmp_path: Path, in_worker: bool) -> dict:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_a.py", "VALUE = 1\n")
    rewrite = tmp_path / "rewrite.py"
    rewrite.write_text(REWRITE)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(archive), "1" if in_worker else "0", str(rewrite)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_in_a_worker_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(tmp_path):
    r = _run(tmp_path, in_worker=True)
    if sys.version_info < (3, 12):  # later Pythons invalidate lazily by themselves
        assert r["unchanged_reads"] == 0
    assert r["b"] == 2  # the changed archive's new module is found
    assert r["frozen"] > 0
    assert r["threshold"][0] >= 10_000


def test_outside_a_worker_nothing_changes(tmp_path):
    r = _run(tmp_path, in_worker=False)
    if sys.version_info < (3, 12):  # Python's own behaviour: a read per invalidation
        assert r["unchanged_reads"] == 5
    assert r["b"] == 2
    assert r["frozen"] == 0
    assert r["threshold"] == [700, 10, 10]  # Python's default
