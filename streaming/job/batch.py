"""The ``foreachBatch`` step: the few updated window rows -> detectors -> aggregates and
findings published in order; detector state saved with the batch id."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from streaming.detectors.config import DetectorConfig
from streaming.job.records import to_aggregates
from streaming.job.sinks import Sink
from streaming.job.state_files import StateFiles
from streaming.job.tracker import Output, Tracker
from streaming.schema.aggregates import Aggregate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class BatchProcessor:
    """Callable for ``writeStream.foreachBatch``."""

    def __init__(
        self,
        cfg: DetectorConfig,
        sink: Sink,
        aggregates_topic: str,
        findings_topic: str,
        state: StateFiles,
        clock: Callable[[Aggregate], str],
        on_output: Callable[[Output], None] | None = None,
        latest_only: bool = True,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        self.aggregates_topic = aggregates_topic
        self.findings_topic = findings_topic
        self.state = state
        self.clock = clock
        self.on_output = on_output
        self.latest_only = latest_only  # compacted topic: only a series' newest window matters
        self.tracker = Tracker(cfg, clock)
        self.last_batch: int | None = None

    def _restore(self, batch_id: int) -> None:
        """Bring the tracker to the state right before ``batch_id`` (after a restart or a retry)."""
        if self.last_batch is not None and self.last_batch == batch_id - 1:
            return
        self.tracker = Tracker(self.cfg, self.clock)
        saved = self.state.load_before(batch_id)
        if saved is not None:
            self.tracker.load_state(saved[1])
            log.info("detector state restored from batch %d for batch %d", saved[0], batch_id)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        rows = [r.asDict(recursive=True) for r in df.collect()]
        t1 = time.perf_counter()
        self.process_rows(rows, batch_id)
        log.info(
            "batch %d: %d window row(s), spark %.2fs, detectors+publish %.2fs",
            batch_id,
            len(rows),
            t1 - t0,
            time.perf_counter() - t1,
        )

    def process_rows(self, rows: list[dict], batch_id: int) -> Output:
        self._restore(batch_id)
        aggs, host_rates = to_aggregates(rows, self.cfg.window_s)
        out = self.tracker.process(aggs, host_rates)
        aggs = [(a.series, a) for a in out.aggregates]
        if self.latest_only:
            aggs = list({k: a for k, a in aggs}.items())
        self.sink.publish(self.aggregates_topic, [(k, a.to_dict()) for k, a in aggs])
        self.sink.publish(self.findings_topic, [(f.key, f.to_dict()) for f in out.findings])
        self.state.save(batch_id, self.tracker.to_state())
        self.last_batch = batch_id
        if self.on_output is not None:
            self.on_output(out)
        if out.findings:
            log.info("batch %d: %d finding record(s)", batch_id, len(out.findings))
        return out
