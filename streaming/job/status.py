"""Job status: a StreamingQueryListener in the driver publishes one ``connmon.job-status``
record per micro-batch of each query, about that query: Spark's progress (rates, duration,
rows, the input it left unread), the fleet's event time as the query sees it, and its own
counts: dead letters (ingest), late events and the hosts whose clocks are off (state), records
its code set aside (both). A query that stops completing batches stops its records, which the
alerts watch per query. The state query's counts reach the driver as Spark's observed metrics
(``STATE_METRICS``): the driver never reads a series."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from streaming.job.buckets import fleet_time
from streaming.job.checkpoint import INGEST_QUERY, STATE_QUERY
from streaming.job.clocks import HostBatch, HostClocks, merge_hosts
from streaming.job.ingest import BatchStats
from streaming.schema.status import JobStatus
from streaming.schema.times import epoch, iso

log = logging.getLogger(__name__)

STATE_METRICS = "state"  # the state query's observed metrics: ``stats``, the buckets' counts


@dataclass
class StateView:
    """What the state query's batches told the driver, since the job started."""

    max_event_s: float | None = None
    late_events_total: int = 0
    internal_errors_total: int = 0  # records the state query set aside
    # bucket -> (series, bytes) as each bucket was last saved
    buckets: dict[int, tuple[int, int]] = field(default_factory=dict)
    series_shed_total: int = 0  # series forgotten at the buckets' series limit


def fold_state_progress(d: dict[str, Any], view: StateView, clocks: HostClocks, now: float) -> None:
    """One state-query progress (its JSON dict) into ``view`` and ``clocks``: the fleet's
    newest event time (the batch's, or Spark's watermark) and the buckets' counts."""
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
    hosts: dict[str, HostBatch] = {}
    metrics = (d.get("observedMetrics") or {}).get(STATE_METRICS) or {}
    for text in metrics.get("stats") or []:
        stats = json.loads(text)
        view.late_events_total += int(stats.get("late") or 0)
        view.internal_errors_total += int(stats.get("internal_errors") or 0)
        if stats.get("bucket") is not None:
            view.buckets[int(stats["bucket"])] = (int(stats["series"]), int(stats["bytes"]))
            view.series_shed_total += int(stats.get("shed") or 0)
        merge_hosts(hosts, stats.get("hosts") or {})
    if hosts or clocks.hosts:
        clocks.update(hosts, now)


def offsets_behind(d: dict[str, Any]) -> int | None:
    """Records of the query's Kafka input that were not read when its batch was planned: the
    newest offsets Spark saw (``latestOffset``) minus where the batch ended, summed over
    partitions; None when the source does not say."""
    total, known = 0, False
    for src in d.get("sources") or []:
        latest, end = (_offsets(src.get(k)) for k in ("latestOffset", "endOffset"))
        for tp, n in latest.items():
            if tp in end:
                total += max(0, n - end[tp])
                known = True
    return total if known else None


def lost_records(d: dict[str, Any], rows: int) -> tuple[int, list[str]]:
    """Records of the query's Kafka input that were gone before its batch read them, and a
    line per partition that lost any. ``rows``: the records the batch read. The batch planned
    to read its offset ranges; in a topic that is neither compacted nor written in
    transactions every offset is a record, so the ranges minus the rows read were deleted
    first (retention). A partition whose offsets went back (the topic was created again) lost
    the records the new topic held before the batch."""
    planned, reset, lines = 0, 0, []
    for src in d.get("sources") or []:
        start, end = (_offsets(src.get(k)) for k in ("startOffset", "endOffset"))
        for tp, until in end.items():
            first = start.get(tp)
            if first is None:
                continue
            if until >= first:
                planned += until - first
            else:
                reset += until
                lines.append(f"{tp[0]}-{tp[1]}: offsets went back from {first} to {until}")
    lost = max(0, planned - rows) + reset
    if planned > rows:
        lines.append(f"{planned - rows} of the {planned} records planned were deleted first")
    return lost, lines


def _offsets(raw: Any) -> dict[tuple[str, str], int]:
    """A Kafka source's offsets (``{topic: {partition: offset}}``, or that as JSON text)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    if not isinstance(raw, dict):
        return {}
    return {
        (topic, str(p)): int(n)
        for topic, parts in raw.items()
        if isinstance(parts, dict)
        for p, n in parts.items()
        if isinstance(n, int)
    }


def _status(
    d: dict[str, Any], job_id: str, newest_s: float | None, watermark_s: float, **fields: Any
) -> JobStatus:
    """The fields every query's record has, from its progress ``d``; ``newest_s``: the
    fleet's newest event time in the query's view (None before it has one)."""
    ts = epoch(d["timestamp"])
    wm = None if newest_s is None else newest_s - watermark_s
    return JobStatus(
        job_id=job_id,
        query=d.get("name") or "",
        batch_id=int(d["batchId"]),
        timestamp=iso(ts),
        batch_duration_s=float(d.get("batchDuration") or 0) / 1000.0,
        input_rows_per_s=float(d.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_s=float(d.get("processedRowsPerSecond") or 0.0),
        num_input_rows=int(d.get("numInputRows") or 0),
        watermark=None if wm is None else iso(wm),
        watermark_delay_s=None if wm is None else round(ts - wm, 3),
        last_event_time=None if newest_s is None else iso(newest_s),
        offsets_behind=offsets_behind(d),
        **fields,
    )


def ingest_status(
    d: dict[str, Any], job_id: str, stats: BatchStats | None, watermark_s: float
) -> JobStatus:
    """The ingest query's record, from its progress (JSON dict) and its newest batch's stats
    (None before the first batch)."""
    st = _status(
        d,
        job_id,
        None if stats is None else stats.newest_s,
        watermark_s,
        dead_letter_total=0 if stats is None else stats.dead_letter_total,
        late_events_total=0,
        internal_errors_total=0 if stats is None else stats.internal_errors_total,
    )
    # Spark counts every read of the source: a batch with dead letters is read twice. The
    # batch's own count is exact; Spark's rates are scaled by the same factor.
    if stats is not None and stats.batch_id == st.batch_id and st.num_input_rows:
        scale = stats.input_rows / st.num_input_rows
        st.num_input_rows = stats.input_rows
        st.input_rows_per_s *= scale
        st.processed_rows_per_s *= scale
    return st


def state_status(
    d: dict[str, Any], job_id: str, view: StateView, hosts: list[dict[str, Any]], watermark_s: float
) -> JobStatus:
    """The state query's record, from its progress (JSON dict) and its view so far."""
    return _status(
        d,
        job_id,
        view.max_event_s,
        watermark_s,
        dead_letter_total=0,
        late_events_total=view.late_events_total,
        internal_errors_total=view.internal_errors_total,
        hosts=hosts,
        state_series=sum(n for n, _b in view.buckets.values()),
        state_bytes=sum(b for _n, b in view.buckets.values()),
        state_bucket_series_max=max((n for n, _b in view.buckets.values()), default=0),
        state_bucket_bytes_max=max((b for _n, b in view.buckets.values()), default=0),
        state_series_shed_total=view.series_shed_total,
    )


class StatusListener(StreamingQueryListener):
    """Publishes a JobStatus after each batch of each query, about that query."""

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
        self.lost: dict[str, int] = {}  # by query: input records deleted before it read them

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        try:
            p = event.progress
            d = json.loads(p.json)
            now = self.clock()
            if p.name == INGEST_QUERY:
                st = ingest_status(d, self.job_id, self.stats(), self.watermark_s)
            elif p.name == STATE_QUERY:
                fold_state_progress(d, self.view, self.clocks, now)
                hosts = self.clocks.snapshot(now) if self.clocks.hosts else []
                st = state_status(d, self.job_id, self.view, hosts, self.watermark_s)
            else:
                return
            self._count_lost(d, st)
            self.publish(st)
        except Exception:  # a status record must never stop the job
            log.exception("could not publish job status")

    def _count_lost(self, d: dict[str, Any], st: JobStatus) -> None:
        lost, lines = lost_records(d, st.num_input_rows)
        if lost:
            self.lost[st.query] = self.lost.get(st.query, 0) + lost
            log.warning(
                "query %s, batch %d: %d record(s) of its input were deleted before it read "
                "them (%s). What they held is missing from their windows; the job goes on "
                "with its state. Keep the topic's retention.ms above the longest time the "
                "query may be stopped or behind.",
                st.query,
                st.batch_id,
                lost,
                "; ".join(lines),
            )
        st.input_lost_total = self.lost.get(st.query, 0)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass
