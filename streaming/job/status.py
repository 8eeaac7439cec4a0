"""Job status: a StreamingQueryListener in the driver publishes one ``connmon.job-status``
record per micro-batch, with dead-letter and late-event totals kept next to the checkpoint."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from streaming.job.times import epoch, iso
from streaming.schema.status import JobStatus

log = logging.getLogger(__name__)

DEADLETTER_METRIC = "deadletter"  # name of the observe() metrics on the dead-letter query


class Totals:
    """Cumulative counters per query, counted once per batch id, saved as JSON."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[str, Any] = {"dead_letter": 0, "late": 0, "batches": {}}
        if path is not None and path.exists():
            self.data = json.loads(path.read_text())

    def add(self, query: str, batch_id: int, dead_letter: int, late: int) -> None:
        seen = self.data["batches"].get(query, -1)
        if batch_id <= seen:  # a re-run batch after a restart: already counted
            return
        self.data["batches"][query] = batch_id
        self.data["dead_letter"] += dead_letter
        self.data["late"] += late
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, self.path)


def status_from_progress(
    p: Any, job_id: str, totals: Totals, last_event_time: str | None
) -> JobStatus:
    """One JobStatus from a StreamingQueryProgress (read as its JSON dict)."""
    d = json.loads(p.json) if hasattr(p, "json") else p
    observed = (d.get("observedMetrics") or {}).get(DEADLETTER_METRIC) or {}
    late = sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in d.get("stateOperators", []))
    totals.add(d.get("name") or "", int(d["batchId"]), int(observed.get("rows") or 0), late)
    event_time = d.get("eventTime") or {}
    watermark = event_time.get("watermark")
    ts = d["timestamp"]
    max_event = event_time.get("max")
    delay = None
    if watermark and not watermark.startswith("1970-01-01"):
        delay = round(epoch(ts) - epoch(watermark), 3)
    else:
        watermark = None
    return JobStatus(
        job_id=job_id,
        query=d.get("name") or "",
        batch_id=int(d["batchId"]),
        timestamp=iso(epoch(ts)),
        batch_duration_s=float(d.get("batchDuration") or 0) / 1000.0,
        input_rows_per_s=float(d.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_s=float(d.get("processedRowsPerSecond") or 0.0),
        num_input_rows=int(d.get("numInputRows") or 0),
        watermark=iso(epoch(watermark)) if watermark else None,
        watermark_delay_s=delay,
        dead_letter_total=int(totals.data["dead_letter"]),
        late_events_total=int(totals.data["late"]),
        last_event_time=iso(epoch(max_event)) if max_event else last_event_time,
    )


class StatusListener(StreamingQueryListener):
    """Publishes a JobStatus per progress event of the job's queries."""

    def __init__(
        self,
        job_id: str,
        publish: Callable[[JobStatus], None],
        totals_path: Path | None,
        queries: tuple[str, ...] = ("aggregates", "deadletter"),
    ) -> None:
        self.job_id = job_id
        self.publish = publish
        self.totals = Totals(totals_path)
        self.queries = queries
        self.last_event_time: str | None = None
        self.history: list[JobStatus] = []
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        if event.progress.name not in self.queries:
            return
        try:
            with self._lock:
                status = status_from_progress(
                    event.progress, self.job_id, self.totals, self.last_event_time
                )
                self.last_event_time = status.last_event_time
                self.history.append(status)
                del self.history[:-100]
            self.publish(status)
        except Exception:  # a status record must never stop the job
            log.exception("could not publish job status")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass
