"""The ``foreachBatch`` step of the job's one query: a micro-batch of raw records -> decoded ->
partial window rows (one Spark aggregation) -> merged windows -> detectors -> aggregates and
findings published in order; dead letters written when the batch has any; all state saved with
the batch id.

Decoding happens here, not on the stream: Spark hands ``foreachBatch`` its batch as an already
computed RDD, so columns computed before it are computed in full for every row and every action
on the batch (measured: a third slower per batch, see benchmarks/job/README.md)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.job import parse, windows
from streaming.job.partials import BatchResult, WindowState
from streaming.job.records import to_aggregates
from streaming.job.sinks import Sink
from streaming.job.state_files import StateFiles
from streaming.job.tracker import Output, Tracker
from streaming.schema.aggregates import Aggregate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchStats:
    """What the status record needs from a processed batch."""

    batch_id: int
    watermark_s: float | None
    max_event_s: float | None
    dead_letter_total: int
    late_events_total: int
    input_rows: int = 0


def check_checkpoint(state: StateFiles, cfg: DetectorConfig) -> None:
    """Fail at start, naming the setting, when the checkpoint's saved state cannot be used."""
    try:
        saved = state.load_before(sys.maxsize)
        if saved is None:
            return
        if "windows" not in saved.snapshot:
            raise ConfigError(
                f"checkpoint: {state.dir.parent} was written by an older job layout; use a new one"
            )
        # Only the settings are checked: the first batch loads the windows themselves.
        WindowState(cfg.window_s, cfg.watermark_s).check_compatible(saved.snapshot["windows"])
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


class BatchProcessor:
    """Callable for ``writeStream.foreachBatch`` over raw records (Kafka source shape)."""

    def __init__(
        self,
        cfg: DetectorConfig,
        sink: Sink,
        aggregates_topic: str,
        findings_topic: str,
        state: StateFiles,
        clock: Callable[[Aggregate], str],
        write_dead_letters: Callable[[DataFrame, int], None],
        max_age_s: float | None = None,
        max_future_s: float | None = None,
        on_output: Callable[[Output], None] | None = None,
        latest_only: bool = True,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        self.aggregates_topic = aggregates_topic
        self.findings_topic = findings_topic
        self.state = state
        self.clock = clock
        self.write_dead_letters = write_dead_letters
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        self.on_output = on_output
        self.latest_only = latest_only  # compacted topic: only a series' newest window matters
        self.tracker = Tracker(cfg, clock)
        self.windows = self._new_windows()
        # The batch whose saved state the in-memory state equals; None while a batch is in
        # flight (a failure midway then forces a reload) or before anything was saved.
        self._base: int | None = None
        self.stats: BatchStats | None = None
        self.timings = (0.0, 0.0, 0.0)  # last batch: detectors, publish, state save (s)

    @cached_property
    def decode(self) -> parse.Decoder:
        return parse.Decoder(self.max_age_s, self.max_future_s)

    @cached_property
    def partials(self) -> windows.Partials:  # built on first use: Columns need a SparkContext
        return windows.Partials(self.cfg)

    def _new_windows(self) -> WindowState:
        return WindowState(self.cfg.window_s, self.cfg.watermark_s)

    def _restore(self, batch_id: int) -> int | None:
        """Bring the state to right before ``batch_id`` (after a restart or a retry); returns
        the batch whose saved state it is (below ``batch_id - 1`` if a file was lost)."""
        if self._base != batch_id - 1:
            self._reload(batch_id)
        base, self._base = self._base, None
        return base

    def _reload(self, batch_id: int) -> None:
        self.tracker = Tracker(self.cfg, self.clock)
        self.windows = self._new_windows()
        saved = self.state.load_before(batch_id)
        self._base = None if saved is None else saved.batch_id
        if saved is not None:
            self.tracker.load_state(saved.snapshot["tracker"], [d["tracker"] for d in saved.deltas])
            self.windows.load_state(saved.snapshot["windows"], [d["windows"] for d in saved.deltas])
            log.info(
                "detector state restored from batch %d (%d delta(s)) for batch %d",
                saved.batch_id,
                len(saved.deltas),
                batch_id,
            )

    def __call__(self, raw: DataFrame, batch_id: int) -> None:
        t0 = time.perf_counter()
        df = self.decode(raw, now=time.time())
        rows = [r.asDict() for r in self.partials(df).collect()]
        t1 = time.perf_counter()
        base = self._restore(batch_id)
        result = self.windows.apply(rows)
        if result.rejected:  # a second read of this batch, only when it holds bad records
            self.write_dead_letters(df, batch_id)
        t2 = time.perf_counter()
        out = self._publish(result, batch_id, base)
        detect, publish, save = self.timings
        log.info(
            "batch %d: %d partial row(s) -> %d window(s), %d dead letter(s), %d late; "
            "spark %.2fs, merge+dead letters %.2fs, detectors %.2fs, publish %.2fs, state %.2fs",
            batch_id,
            len(rows),
            len(result.rows),
            sum(result.rejected.values()),
            result.late,
            t1 - t0,
            t2 - t1,
            detect,
            publish,
            save,
        )
        if out.findings:
            log.info("batch %d: %d finding record(s)", batch_id, len(out.findings))

    def process_partials(self, rows: list[dict[str, Any]], batch_id: int) -> Output:
        """The driver side of a batch from already collected partial rows (no dead letters)."""
        base = self._restore(batch_id)
        return self._publish(self.windows.apply(rows), batch_id, base)

    def _publish(self, result: BatchResult, batch_id: int, base: int | None) -> Output:
        t0 = time.perf_counter()
        aggs, host_rates = to_aggregates(result.rows, self.cfg.window_s)
        out = self.tracker.process(aggs, host_rates)
        # A delta must sit on the state saved for the batch before; if that file is missing
        # (lost after a crash), the state came from an older one: start a new snapshot. Decided
        # before publishing, so a broken chain fails the batch before anything is sent.
        snapshot = base != batch_id - 1 or self.state.wants_snapshot(batch_id)
        pairs = [(a.series, a) for a in out.aggregates]
        if self.latest_only:
            pairs = list({k: a for k, a in pairs}.items())
        t1 = time.perf_counter()
        self.sink.publish(self.aggregates_topic, [(k, a.to_dict()) for k, a in pairs])
        self.sink.publish(self.findings_topic, [(f.key, f.to_dict()) for f in out.findings])
        t2 = time.perf_counter()
        state = {
            name: part.to_state() if snapshot else part.to_delta()
            for name, part in (("tracker", self.tracker), ("windows", self.windows))
        }
        self.state.save(batch_id, state, snapshot)
        self._base = batch_id
        self.timings = (t1 - t0, t2 - t1, time.perf_counter() - t2)
        self.stats = BatchStats(
            batch_id,
            result.watermark_s,
            result.max_event_s,
            self.windows.dead_letter_total,
            self.windows.late_total,
            result.input_rows,
        )
        if self.on_output is not None:
            self.on_output(out)
        return out
