"""Finding lifecycle across windows: which findings fire, which resolve, which aggregates to
publish. Pure Python; its whole state is a JSON document that the job checkpoints per batch.

Rules:
- A series' newest window is evaluated by every detector (with its earlier windows as history);
  an update to an older window (late data) only refreshes the history.
- A finding fires as soon as a window holds; it is re-published when its severity, window or
  evidence change.
- It resolves when the newest window does not hold and the window before it (complete by then)
  did not hold either, so a partly filled window does not resolve a rate-based finding; or when
  its series has produced no window for ``finding_stale_s`` of event time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from streaming.detectors import DETECTORS
from streaming.detectors.config import DetectorConfig
from streaming.job.times import epoch as _epoch
from streaming.job.times import iso
from streaming.schema.aggregates import HOST_SERIES, Aggregate, series_key
from streaming.schema.findings import Finding

HOST_APP = HOST_SERIES  # app and broker of the host-level series (heartbeat counters only)
# What detectors read from a series' earlier windows (idle_churn, the CLOSE_WAIT trend) plus
# identity; the checkpointed history keeps only these.
HISTORY_FIELDS = (
    "side",
    "host",
    "app",
    "broker",
    "peer_host",
    "window_start",
    "window_end",
    "window_s",
    "opens",
    "closes_after_idle",
    "closes_after_idle_local",
    "closes_after_idle_peer",
    "idle_at_close_max_s",
    "close_wait_count",
)


@dataclasses.dataclass
class Output:
    aggregates: list[Aggregate]
    findings: list[Finding]


class Tracker:
    """Keeps recent windows per series and the last published finding per key."""

    def __init__(self, cfg: DetectorConfig, clock: Callable[[Aggregate], str]) -> None:
        self.cfg = cfg
        self.clock = clock  # updated_at for a record about this window
        self.history: dict[str, list[Aggregate]] = {}
        self.held: dict[str, dict[str, list[str]]] = {}  # series -> window_start -> kinds
        self.findings: dict[str, Finding] = {}
        self.max_window_end: str | None = None

    # ---- state --------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """JSON-ready state. History keeps only what detectors read from earlier windows."""
        return {
            "history_fields": list(HISTORY_FIELDS),
            "history": {
                s: [[getattr(a, f) for f in HISTORY_FIELDS] for a in ws]
                for s, ws in self.history.items()
            },
            "held": self.held,
            "findings": {k: f.to_dict() for k, f in self.findings.items()},
            "max_window_end": self.max_window_end,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        names = state["history_fields"]
        self.history = {
            s: [Aggregate(**dict(zip(names, row, strict=True))) for row in ws]
            for s, ws in state["history"].items()
        }
        self.held = state["held"]
        self.findings = {k: Finding.from_dict(f) for k, f in state["findings"].items()}
        self.max_window_end = state["max_window_end"]

    # ---- processing ---------------------------------------------------------------------
    def process(
        self, aggregates: Iterable[Aggregate], host_rates: dict[tuple[str, str], float]
    ) -> Output:
        """One batch of updated windows -> aggregates and findings to publish, in order."""
        batch = list(aggregates) + self._host_series(host_rates)
        out = Output([], [])
        for agg in sorted(batch, key=lambda a: (a.window_start, a.series)):
            self._update(agg, out)
        self._resolve_stale(out)
        self._prune()
        return out

    def _host_series(self, host_rates: dict[tuple[str, str], float]) -> list[Aggregate]:
        """A host-level series per heartbeat window: refused connects leave no socket, so a
        storm against a dead broker may show only in the host's counters."""
        aggs = []
        for (host, start), rate in host_rates.items():
            end = self._end_of(start)
            aggs.append(
                Aggregate(
                    side="client",
                    host=host,
                    app=HOST_APP,
                    broker=HOST_APP,
                    window_start=start,
                    window_end=end,
                    window_s=self.cfg.window_s,
                    host_attempt_fails_per_min=rate,
                )
            )
        return aggs

    def _end_of(self, start: str) -> str:
        return iso(_epoch(start) + self.cfg.window_s)  # type: ignore[return-value]

    def _update(self, agg: Aggregate, out: Output) -> None:
        windows = self.history.setdefault(agg.series, [])
        newest = windows[-1].window_start if windows else None
        windows[:] = [w for w in windows if w.window_start != agg.window_start] + [agg]
        windows.sort(key=lambda w: w.window_start)
        if self.max_window_end is None or agg.window_end > self.max_window_end:
            self.max_window_end = agg.window_end
        if newest is not None and agg.window_start < newest:
            self._record_held(agg, self._evaluate(agg, windows))
            return  # late update of an older window: history only
        if agg.app != HOST_APP:
            agg.updated_at = self.clock(agg)
            out.aggregates.append(agg)
        found = self._evaluate(agg, windows)
        self._record_held(agg, found)
        previous = self._previous_held(agg)
        for kind in DETECTORS:
            key = self._key(agg, kind)
            last = self.findings.get(key)
            if kind in found:
                f = found[kind]
                if last is None or last.status != "firing" or _changed(last, f):
                    f.updated_at = self.clock(agg)
                    self.findings[key] = f
                    out.findings.append(f)
            elif last is not None and last.status == "firing" and kind not in previous:
                self._resolve(key, last, agg.window_start, agg.window_end, agg, out)

    def _evaluate(self, agg: Aggregate, windows: list[Aggregate]) -> dict[str, Finding]:
        earlier = [w for w in windows if w.window_start < agg.window_start]
        found: dict[str, Finding] = {}
        for kind, detect in DETECTORS.items():
            for f in detect(agg, self.cfg, earlier):
                found[kind] = f
        return found

    def _record_held(self, agg: Aggregate, found: dict[str, Finding]) -> None:
        self.held.setdefault(agg.series, {})[agg.window_start] = sorted(found)

    def _previous_held(self, agg: Aggregate) -> set[str]:
        """Kinds that held in the window just before ``agg`` (empty if there was none)."""
        before = iso(_epoch(agg.window_start) - self.cfg.window_s)
        return set(self.held.get(agg.series, {}).get(before, []))

    @staticmethod
    def _key(agg: Aggregate, kind: str) -> str:
        return f"{kind}|{agg.client}|{agg.broker}"

    def _resolve(
        self, key: str, last: Finding, start: str, end: str, agg: Aggregate | None, out: Output
    ) -> None:
        resolved = dataclasses.replace(
            last,
            status="resolved",
            window_start=start,
            window_end=end,
            summary="Resolved: " + last.summary,
        )
        resolved.updated_at = self.clock(agg) if agg is not None else end
        self.findings[key] = resolved
        out.findings.append(resolved)

    def _resolve_stale(self, out: Output) -> None:
        if self.max_window_end is None:
            return
        horizon = _epoch(self.max_window_end) - self.cfg.finding_stale_s
        for key, f in sorted(self.findings.items()):
            if f.status != "firing":
                continue
            series = _series_of(f)
            windows = self.history.get(series)
            last_end = windows[-1].window_end if windows else f.window_end
            if _epoch(last_end) < horizon:
                self._resolve(key, f, f.window_start, self.max_window_end, None, out)

    def _prune(self) -> None:
        if self.max_window_end is None:
            return
        keep_s = max(self.cfg.idle_churn_window_s, self.cfg.finding_stale_s) + 2 * self.cfg.window_s
        horizon = _epoch(self.max_window_end) - keep_s
        for series in list(self.history):
            ws = self.history[series]
            # The two newest windows always (resolution looks one back); older ones only if a
            # detector can still use them: opens/idle closes (idle_churn), CLOSE_WAIT (trend).
            keep = ws[:-2] if len(ws) > 2 else []
            ws = [
                w
                for w in keep
                if _epoch(w.window_end) >= horizon
                and (w.opens or w.closes_after_idle or w.close_wait_count)
            ] + [w for w in ws[-2:] if _epoch(w.window_end) >= horizon]
            if ws:
                self.history[series] = ws
                starts = {w.window_start for w in ws}
                held = self.held.get(series, {})
                self.held[series] = {s: k for s, k in held.items() if s in starts}
            else:
                del self.history[series]
                self.held.pop(series, None)
        # Resolved findings whose series is gone need no memory.
        self.findings = {
            k: f
            for k, f in self.findings.items()
            if f.status == "firing" or _series_of(f) in self.history
        }


def _series_of(f: Finding) -> str:
    return series_key(f.side, f.host, f.app, f.broker, f.peer_host)


def _changed(last: Finding, new: Finding) -> bool:
    return (last.severity, last.window_start, last.evidence) != (
        new.severity,
        new.window_start,
        new.evidence,
    )
