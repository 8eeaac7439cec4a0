"""Job status: a StreamingQueryListener in the driver publishes one ``connmon.job-status``
record per micro-batch of either query, speaking of the ingest query's newest batch (Spark's
progress: rates, duration, rows; the dead letters since the job started) and of the state
query's view of event time (watermark, the fleet's newest event time, late events, the hosts
whose clocks are off). The state query's counts reach the driver as Spark's observed metrics
(``STATE_METRICS``): the driver never reads a series."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from streaming.job.buckets import fleet_time
from streaming.job.checkpoint import INGEST_QUERY, STATE_QUERY
from streaming.job.clocks import HostBatch, HostClocks, merge_hosts
from streaming.job.ingest import BatchStats
from streaming.schema.status import JobStatus
from streaming.schema.times import epoch, iso

log = logging.getLogger(__name__)

JOB_QUERY = INGEST_QUERY  # the query status records speak of: the one reading the events
STATE_METRICS = "state"  # the state query's observed metrics: ``stats``, the buckets' counts


@dataclass
class StateView:
    """What the state query's batches told the driver, since the job started."""

    watermark_s: float | None = None
    max_event_s: float | None = None
    late_events_total: int = 0
    internal_errors_total: int = 0  # records the state query set aside


def fold_state_progress(
    d: dict[str, Any], view: StateView, clocks: HostClocks, watermark_s: float, now: float
) -> None:
    """One state-query progress (its JSON dict) into ``view`` and ``clocks``: the fleet's
    newest event time (the batch's, or Spark's watermark), the job's watermark (``watermark_s``
    behind that) and the buckets' counts."""
    event_time = d.get("eventTime") or {}
    newest = []
    wm = event_time.get("watermark")
    fleet = fleet_time(round(epoch(wm) * 1000)) if wm is not None else None
    if fleet is not None:
        newest.append(fleet)
    if event_time.get("max") is not None:
        newest.append(epoch(event_time["max"]))
    for t in newest:
        if view.max_event_s is None or t > view.max_event_s:
            view.max_event_s = t
    if view.max_event_s is not None:
        view.watermark_s = view.max_event_s - watermark_s
    hosts: dict[str, HostBatch] = {}
    metrics = (d.get("observedMetrics") or {}).get(STATE_METRICS) or {}
    for text in metrics.get("stats") or []:
        stats = json.loads(text)
        view.late_events_total += int(stats.get("late") or 0)
        view.internal_errors_total += int(stats.get("internal_errors") or 0)
        merge_hosts(hosts, stats.get("hosts") or {})
    if hosts or clocks.hosts:
        clocks.update(hosts, now)


def status_from_progress(
    p: Any, job_id: str, stats: BatchStats | None, view: StateView, hosts: list[dict[str, Any]]
) -> JobStatus:
    """One JobStatus from the ingest query's StreamingQueryProgress (or its JSON dict), its
    newest batch's stats (None before the first batch) and the state query's view."""
    d = json.loads(p.json) if hasattr(p, "json") else p
    ts = d["timestamp"]
    batch_id = int(d["batchId"])
    rows = int(d.get("numInputRows") or 0)
    # Spark counts every read of the source: a batch with dead letters is read twice. The
    # batch's own count is exact; Spark's rates are scaled by the same factor.
    scale = 1.0
    if stats is not None and stats.batch_id == batch_id and rows:
        scale, rows = stats.input_rows / rows, stats.input_rows
    wm = view.watermark_s
    return JobStatus(
        job_id=job_id,
        query=d.get("name") or "",
        batch_id=batch_id,
        timestamp=iso(epoch(ts)),
        batch_duration_s=float(d.get("batchDuration") or 0) / 1000.0,
        input_rows_per_s=float(d.get("inputRowsPerSecond") or 0.0) * scale,
        processed_rows_per_s=float(d.get("processedRowsPerSecond") or 0.0) * scale,
        num_input_rows=rows,
        watermark=iso(wm) if wm is not None else None,
        watermark_delay_s=round(epoch(ts) - wm, 3) if wm is not None else None,
        dead_letter_total=stats.dead_letter_total if stats is not None else 0,
        late_events_total=view.late_events_total,
        last_event_time=iso(view.max_event_s) if view.max_event_s is not None else None,
        hosts=hosts,
        internal_errors_total=view.internal_errors_total
        + (stats.internal_errors_total if stats is not None else 0),
    )


class StatusListener(StreamingQueryListener):
    """Publishes a JobStatus after each batch of the ingest query, and again after each batch
    of the state query (late events and clocks are counted there)."""

    def __init__(
        self,
        job_id: str,
        publish: Callable[[JobStatus], None],
        stats: Callable[[], BatchStats | None],
        watermark_s: float,
        clock_tolerance_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.job_id = job_id
        self.publish = publish
        self.stats = stats
        self.watermark_s = watermark_s
        self.clock = clock
        self.view = StateView()
        self.clocks = HostClocks(clock_tolerance_s)
        self._ingest: dict[str, Any] | None = None  # the ingest query's newest progress

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            p = event.progress
            d = json.loads(p.json)
            now = self.clock()
            if p.name == JOB_QUERY:
                self._ingest = d
            elif p.name == STATE_QUERY:
                fold_state_progress(d, self.view, self.clocks, self.watermark_s, now)
            else:
                return
            if self._ingest is not None:
                hosts = self.clocks.snapshot(now) if self.clocks.hosts else []
                self.publish(
                    status_from_progress(self._ingest, self.job_id, self.stats(), self.view, hosts)
                )
        except Exception:  # a status record must never stop the job
            log.exception("could not publish job status")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass
