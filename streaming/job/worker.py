"""Per-task overhead of the executors' Python workers, cut once per worker process.

Spark reuses a Python worker process for task after task, and before every task it runs
``importlib.invalidate_caches()`` and after every task ``gc.collect()``. With PySpark's own
archives on the workers' path (``pyspark.zip``, Py4J's zip, Spark's core jar), both cost more
than most of the job's tasks do:

- On Python 3.10 and 3.11, a zip importer re-reads its archive's whole directory when caches
  are invalidated, once per package imported from it: about 0.1 s of CPU per task on this
  job's workers, for archives that do not change while the worker lives. Python 3.12 made that
  lazy. ``prepare`` makes it lazy here too: an archive is read again only when its size or
  modification time changed.
- A full collection walks every object the worker holds, most of them modules and the
  libraries' own (pandas, pyarrow, PySpark). ``prepare`` moves what exists after the first
  task's imports out of the collector's reach (``gc.freeze``), so each later collection walks
  only what the tasks made.
- Restoring a state bucket makes hundreds of thousands of lists and dicts that live until its
  call returns and are then freed by reference counting (the state holds no cycles). At
  Python's default threshold (a young collection every 700 new containers) the collector walks
  them again and again: 7-10% of the state processor's CPU. ``prepare`` raises the threshold to
  ``GC_THRESHOLD``; the older generations keep their default ratios.
"""

from __future__ import annotations

import gc
import os
import sys
import zipimport
from typing import Any

_prepared = False
GC_THRESHOLD = (20_000, 10, 10)  # young collection every 20,000 new containers


def _archive_stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _make_lazy(original: Any) -> Any:
    def invalidate_caches(self: Any) -> None:
        """Read the archive's directory again only when the archive changed."""
        stamp = _archive_stamp(self.archive)
        if stamp is not None and getattr(self, "_connmon_stamp", None) == stamp:
            return
        original(self)
        self._connmon_stamp = stamp

    return invalidate_caches


def _in_worker() -> bool:
    from pyspark.core.files import SparkFiles

    return bool(getattr(SparkFiles, "_is_running_on_worker", False))


def prepare() -> None:
    """Cut this worker process's per-task overhead (above). Idempotent and cheap: call it at
    the start of every function that runs on an executor. Does nothing outside a PySpark
    worker (the driver, replay, tests)."""
    global _prepared
    if _prepared or not _in_worker():
        return
    _prepared = True
    if sys.version_info < (3, 12):
        cls: Any = zipimport.zipimporter
        cls.invalidate_caches = _make_lazy(cls.invalidate_caches)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
