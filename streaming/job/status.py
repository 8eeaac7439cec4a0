"""Job status: a StreamingQueryListener in the driver publishes one ``connmon.job-status``
record per micro-batch of the ingest query: Spark's progress (rates, duration) plus the fleet's
event time, the watermark and the dead-letter and late-event counts since the job started."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from streaming.job.checkpoint import INGEST_QUERY, STATE_QUERY
from streaming.job.ingest import BatchStats
from streaming.schema.status import JobStatus
from streaming.schema.times import epoch, iso

log = logging.getLogger(__name__)

JOB_QUERY = INGEST_QUERY  # the query status records speak of: the one reading the events


def status_from_progress(p: Any, job_id: str, stats: BatchStats | None) -> JobStatus:
    """One JobStatus from a StreamingQueryProgress (read as its JSON dict) and the newest
    processed batch's stats (None before the first batch)."""
    d = json.loads(p.json) if hasattr(p, "json") else p
    ts = d["timestamp"]
    batch_id = int(d["batchId"])
    rows = int(d.get("numInputRows") or 0)
    # Spark counts every read of the source: a batch with dead letters is read twice. The
    # batch's own count is exact; Spark's rates are scaled by the same factor.
    scale = 1.0
    if stats is not None and stats.batch_id == batch_id and rows:
        scale, rows = stats.input_rows / rows, stats.input_rows
    watermark = stats.watermark_s if stats is not None else None
    max_event = stats.max_event_s if stats is not None else None
    return JobStatus(
        job_id=job_id,
        query=d.get("name") or "",
        batch_id=batch_id,
        timestamp=iso(epoch(ts)),
        batch_duration_s=float(d.get("batchDuration") or 0) / 1000.0,
        input_rows_per_s=float(d.get("inputRowsPerSecond") or 0.0) * scale,
        processed_rows_per_s=float(d.get("processedRowsPerSecond") or 0.0) * scale,
        num_input_rows=rows,
        watermark=iso(watermark) if watermark is not None else None,
        watermark_delay_s=round(epoch(ts) - watermark, 3) if watermark is not None else None,
        dead_letter_total=stats.dead_letter_total if stats is not None else 0,
        late_events_total=stats.late_events_total if stats is not None else 0,
        last_event_time=iso(max_event) if max_event is not None else None,
        hosts=list(stats.hosts) if stats is not None else [],
    )


class StatusListener(StreamingQueryListener):
    """Publishes a JobStatus per progress event of the ingest query, and again with fresh
    counts after each batch of the state query (late events and produce errors happen there)."""

    def __init__(
        self,
        job_id: str,
        publish: Callable[[JobStatus], None],
        stats: Callable[[], BatchStats | None],
    ) -> None:
        self.job_id = job_id
        self.publish = publish
        self.stats = stats
        self._ingest: dict[str, Any] | None = None  # the ingest query's newest progress

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        p = event.progress
        if p.name == JOB_QUERY:
            self._ingest = json.loads(p.json)
        elif p.name != STATE_QUERY or self._ingest is None:
            return
        try:
            self.publish(status_from_progress(self._ingest, self.job_id, self.stats()))
        except Exception:  # a status record must never stop the job
            log.exception("could not publish job status")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass
