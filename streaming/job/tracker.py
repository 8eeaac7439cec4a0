"""Finding lifecycle across windows: which findings fire, which resolve, which aggregates to
publish. Pure Python; the job keeps one ``Tracker`` per state bucket (``buckets``), its state a
JSON-able document in Spark's state store.

Rules:
- A series' newest window is evaluated by every detector (with its earlier windows as history);
  an update to an older window (late data) only refreshes the history.
- A finding fires once it held in ``fire_after_windows`` consecutive windows of its series
  (default 1: as soon as a window holds; a window evaluated several times while it fills held a
  kind if any evaluation did); it is published again only when it changes in a way a reader
  acts on, or as a heartbeat (``detectors.changes``). The firing finding kept is the one last
  published, with the end of the newest window it held in (``last_seen_at``).
- Its severity follows the same hysteresis (``_severity``): up once a level held in
  ``fire_after_windows`` windows, down once the current level did not hold in the windows that
  resolve the kind.
- It resolves once it did not hold in ``resolve_after_windows`` consecutive windows (default 2:
  the newest and the one before it, complete by then, so a partly filled window does not
  resolve a rate-based finding), a window the series did not produce counting as not holding;
  or when its series has produced no window for ``finding_stale_s`` of event time.

Only firing findings are remembered: a resolved one behaves exactly like none.

Expiry goes through heaps ordered by a series' newest window end, and a series' old windows are
pruned when it is next touched or when it expires, which leaves every detector the same history
a prune of all series each batch would.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import heapq
from collections.abc import Callable, Iterable
from typing import Any

from streaming.detectors import (
    DETECTORS,
    detect_all,
    fold,
    hysteresis_windows,
    resolve_windows,
)
from streaming.detectors.changes import change
from streaming.detectors.config import DetectorConfig
from streaming.job.history import HISTORY_FIELDS, History
from streaming.schema.aggregates import CONNMON_APPS, HOST_SERIES, Aggregate
from streaming.schema.clients import IDENTITY_FIELDS
from streaming.schema.findings import SEVERITIES, Finding, finding_key, finding_key_tail
from streaming.schema.times import epoch, iso

HOST_APP = HOST_SERIES  # app and broker of the host-level series (heartbeat counters only)


@dataclasses.dataclass
class Output:
    aggregates: list[Aggregate]
    findings: list[Finding]


class Tracker:
    """Keeps recent windows per series and the last published finding per key."""

    def __init__(self, cfg: DetectorConfig, clock: Callable[[Aggregate], str]) -> None:
        self.cfg = cfg
        self.clock = clock  # updated_at for a record about this window
        self.history = History()
        # series -> window_start -> kind -> highest severity it held at in that window
        self.held: dict[str, dict[str, dict[str, str]]] = {}
        self.findings: dict[str, Finding] = {}  # firing only: the last published record
        self.max_window_end: str | None = None
        self._keep_s = max(cfg.idle_churn_window_s, cfg.finding_stale_s) + 2 * cfg.window_s
        self._quiet_n = {kind: resolve_windows(kind, cfg) for kind in DETECTORS}
        self._hysteresis_n = hysteresis_windows(cfg)
        # (newest window end, series): candidates for the stale check, then for removal
        self._stale_heap: list[tuple[float, str]] = []
        self._stale_end: dict[str, float] = {}  # series -> end of its live stale-heap entry
        self._expire_heap: list[tuple[float, str]] = []

    # ---- state --------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """JSON-ready state. History keeps only what detectors read from earlier windows."""
        return {
            "history_fields": list(HISTORY_FIELDS),
            "history": self.history.rows(),
            "held": self.held,
            "findings": {k: f.to_dict() for k, f in self.findings.items()},
            "max_window_end": self.max_window_end,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """The state ``to_state`` saved."""
        self.history.load(state["history_fields"], state["history"])
        self.held = {s: {w: _held(h) for w, h in ws.items()} for s, ws in state["held"].items()}
        self.findings = {k: Finding.from_dict(f) for k, f in state["findings"].items()}
        self.max_window_end = state["max_window_end"]
        self._stale_end = {s: epoch(self.history.newest_end(s)) for s in self.history}
        self._stale_heap = [(end, s) for s, end in self._stale_end.items()]
        heapq.heapify(self._stale_heap)
        self._expire_heap = []

    def firing_series(self) -> set[str]:
        """Series with a firing finding."""
        keys = set(self.findings)
        return {
            s
            for s, ws in self.history.items()
            if any(self._key(ws[-1], kind) in keys for kind in DETECTORS)
        }

    def forget(self, series: set[str]) -> None:
        """Drop ``series``' history as if they had expired (their firing findings stay)."""
        for s in series:
            self.history.pop(s)
            self.held.pop(s, None)
            self._stale_end.pop(s, None)

    # ---- processing ---------------------------------------------------------------------
    def process(
        self,
        aggregates: Iterable[Aggregate],
        host_rates: dict[tuple[str, str], float],
        fleet_end: str | None = None,
    ) -> Output:
        """One batch of updated windows -> aggregates and findings to publish, in order.
        ``fleet_end``: end of the window of the fleet's newest event, so series that went
        quiet resolve and expire even when no series this tracker holds moved on."""
        if fleet_end is not None and (self.max_window_end or "") < fleet_end:
            self.max_window_end = fleet_end
        batch = list(aggregates) + self._host_series(host_rates)
        out = Output([], [])
        horizon = self._horizon()  # as the previous batch left it
        touched: set[str] = set()
        for agg in sorted(batch, key=lambda a: (a.window_start, a.series)):
            if agg.series not in touched:
                touched.add(agg.series)
                self._prune_series(agg.series, horizon)
            self._update(agg, out)
        # One live entry per series: pushed when its newest end moved, or when its entry was
        # already taken for the stale check (the newest window may have fired again since).
        for series in touched:
            end = epoch(self.history[series][-1].window_end)
            if self._stale_end.get(series) != end:
                self._stale_end[series] = end
                heapq.heappush(self._stale_heap, (end, series))
        self._resolve_stale(out)
        horizon = self._horizon()
        for series in touched:
            self._prune_series(series, horizon)
        self._expire(horizon)
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
        return iso(epoch(start) + self.cfg.window_s)  # type: ignore[return-value]

    def _update(self, agg: Aggregate, out: Output) -> None:
        windows = self.history.setdefault(agg.series, [])
        if agg.client_library is None:
            _carry_library(agg, windows)
        newest = windows[-1].window_start if windows else None
        if newest is None or agg.window_start > newest:
            windows.append(agg)  # a new newest window
        elif agg.window_start == newest:
            windows[-1] = agg  # the newest window again, with more of its events: the usual case
        else:
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
        recent = self._recent_held(agg)
        fire_n = self.cfg.fire_after_windows
        tail = finding_key_tail(agg.client, agg.cluster, agg.broker)
        for kind in DETECTORS:
            key = kind + tail
            last = self.findings.get(key)
            if kind in found:
                f = found[kind]
                if last is None:
                    if not all(kind in h for h in recent[:fire_n]):
                        continue  # held, but not yet in enough consecutive windows
                    f.severity = self._severity(None, kind, recent)
                    f.first_fired_at, why = agg.window_start, "fired"
                else:
                    f.severity = self._severity(last.severity, kind, recent)
                    why = change(last, f, self.cfg.finding_heartbeat_s)
                    if why is None:
                        # The published record stands; the copy keeps it as it went out.
                        last = self.findings[key] = copy.copy(last)
                        last.last_seen_at = agg.window_end
                        continue
                    f.first_fired_at = last.first_fired_at or last.window_start
                f.change, f.last_seen_at, f.updated_at = why, agg.window_end, self.clock(agg)
                self.findings[key] = f
                out.findings.append(f)
            elif last is not None and not any(kind in h for h in recent[: self._quiet_n[kind]]):
                self._resolve(key, last, agg.window_start, agg.window_end, agg, out)

    def _evaluate(self, agg: Aggregate, windows: list[Aggregate]) -> dict[str, Finding]:
        if agg.app in CONNMON_APPS and not self.cfg.include_connmon:
            return {}
        earlier = [w for w in windows if w.window_start < agg.window_start]
        return fold(
            detect_all(agg, self.cfg, earlier),
            lambda kind: self._key(agg, kind) in self.findings,
        )

    def _record_held(self, agg: Aggregate, found: dict[str, Finding]) -> None:
        """What held in ``agg``'s window: a kind that held at any evaluation of the window, at
        the highest severity it had (a rate that wavers around a threshold within a window
        held there). Windows where nothing held are not stored."""
        if not found:
            return
        window = self.held.setdefault(agg.series, {}).setdefault(agg.window_start, {})
        for kind, f in found.items():
            before = window.get(kind)
            if before is None or _RANK[f.severity] > _RANK[before]:
                window[kind] = f.severity

    def _recent_held(self, agg: Aggregate) -> list[dict[str, str]]:
        """What held in ``agg``'s window and each one before it, newest first, as far back as
        hysteresis looks (a window the series did not produce: nothing)."""
        held = self.held.get(agg.series, {})
        starts = _starts_back(agg.window_start, self.cfg.window_s, self._hysteresis_n)
        return [held.get(s, _NOTHING) for s in starts]

    def _severity(self, current: str | None, kind: str, recent: list[dict[str, str]]) -> str:
        """Severity with the hysteresis of firing: it rises to a level once the kind held at
        that level or above in ``fire_after_windows`` consecutive windows, and falls below
        ``current`` only once it did not reach ``current`` in ``resolve_windows`` of them.
        ``current`` None: the severity a finding fires with."""
        rise = min(_RANK.get(h.get(kind, ""), -1) for h in recent[: self.cfg.fire_after_windows])
        if current is None or rise > _RANK[current]:
            return SEVERITIES[max(rise, 0)]
        fall = max(_RANK.get(h.get(kind, ""), -1) for h in recent[: self._quiet_n[kind]])
        return SEVERITIES[max(fall, 0)] if fall < _RANK[current] else current

    @staticmethod
    def _key(agg: Aggregate, kind: str) -> str:
        return finding_key(kind, agg.client, agg.cluster, agg.broker)

    def _resolve(
        self, key: str, last: Finding, start: str, end: str, agg: Aggregate | None, out: Output
    ) -> None:
        when = self.clock(agg) if agg is not None else end
        del self.findings[key]
        out.findings.append(last.resolved(start, end, when))

    def _horizon(self) -> float | None:
        """Windows ending before this can no longer matter to any detector."""
        if self.max_window_end is None:
            return None
        return epoch(self.max_window_end) - self._keep_s

    def _resolve_stale(self, out: Output) -> None:
        """Resolve firing findings of series without a window for ``finding_stale_s``."""
        if self.max_window_end is None:
            return
        stale = epoch(self.max_window_end) - self.cfg.finding_stale_s
        due: set[str] = set()  # resolving removes a key: each must come once
        while self._stale_heap and self._stale_heap[0][0] < stale:
            end, series = heapq.heappop(self._stale_heap)
            if self._stale_end.get(series) != end:
                continue  # superseded: the series has a newer window and a newer entry
            del self._stale_end[series]
            ws = self.history.get(series)
            if not ws:
                continue  # gone
            last = ws[-1]
            due.update(k for kind in DETECTORS if (k := self._key(last, kind)) in self.findings)
            heapq.heappush(self._expire_heap, (end, series))
        for key in sorted(due):
            f = self.findings[key]
            self._resolve(key, f, f.window_start, self.max_window_end, None, out)

    def _expire(self, horizon: float | None) -> None:
        """Forget series whose newest window is older than the horizon."""
        while horizon is not None and self._expire_heap and self._expire_heap[0][0] < horizon:
            end, series = heapq.heappop(self._expire_heap)
            if series in self.history and epoch(self.history.newest_end(series)) == end:
                self._prune_series(series, horizon)

    def _prune_series(self, series: str, horizon: float | None) -> None:
        if horizon is None or series not in self.history:
            return
        if epoch(self.history.newest_end(series)) < horizon:
            self.forget({series})  # every window ended before it: nothing is kept
            return
        ws = self.history[series]
        if len(ws) <= 2 and epoch(ws[0].window_end) >= horizon:
            return  # the usual case: nothing to prune
        # The two newest windows always (resolution looks one back); older ones only if a
        # detector can still use them: re-opens and idle closes (idle_churn), CLOSE_WAIT (trend).
        keep = [
            w
            for w in ws[:-2]
            if epoch(w.window_end) >= horizon
            and (w.opens or w.closes_after_idle or w.close_wait_count or w.reopens_after_idle)
        ] + [w for w in ws[-2:] if epoch(w.window_end) >= horizon]
        if len(keep) == len(ws):
            return
        if keep:
            self.history[series] = keep
            # Hysteresis looks back this far whatever the history keeps.
            n = self._hysteresis_n
            since = iso(epoch(keep[-1].window_start) - (n - 1) * self.cfg.window_s)
            starts = {w.window_start for w in keep}
            held = {s: k for s, k in self.held.get(series, {}).items() if s in starts or s >= since}
            if held:
                self.held[series] = held
            else:
                self.held.pop(series, None)
        else:
            self.forget({series})


_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_NOTHING: dict[str, str] = {}


def _held(saved: list[str] | dict[str, str]) -> dict[str, str]:
    """A window's saved kinds; a state written before severities were kept names kinds only."""
    return saved if isinstance(saved, dict) else dict.fromkeys(saved, "warning")


def _carry_library(agg: Aggregate, windows: list[Aggregate]) -> None:
    """A window none of whose events named the client library (only sockets of no process, a
    close) keeps the library identity its series' earlier windows named, whole (the role of a
    Kafka process with it): the process did not change library, and a finding (its advice)
    must not flip between the library's and none."""
    for w in reversed(windows):
        if w.window_start < agg.window_start and w.client_library is not None:
            for name in IDENTITY_FIELDS:
                setattr(agg, name, getattr(w, name))
            return


@functools.lru_cache(maxsize=256)
def _starts_back(start: str, window_s: float, n: int) -> tuple[str, ...]:
    """``start`` and the ``n - 1`` window starts before it (a batch's series share a few
    windows, so this is cached)."""
    t = epoch(start)
    return tuple(iso(t - i * window_s) for i in range(n))
