"""Window statistics merged across micro-batches, outside Spark's state store.

Each micro-batch aggregates its own events into *partial* rows per (window, series) with
mergeable statistics only (sums, minima, maxima, values taken at the latest event time). This
module merges them into the open windows, applies the event-time watermark, counts late and
rejected events, and turns a window into the finished row that ``records`` reads. Pure Python:
its state is a JSON document saved with the detector state per batch id, so the job reads the
topic once (one query) and a restart re-runs a batch from the same state.

Watermark: the newest event time seen in earlier batches minus ``watermark_s``. An event is late
when its window ended at or before the watermark (the window was closed and evicted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.schema.aggregates import SERIES_FIELDS, key_part
from streaming.schema.events import STATE_NAMES

# Latest-summary fields kept per state; ESTABLISHED and CLOSE_WAIT carry more detail.
STATE_DETAIL = {
    "ESTABLISHED": (
        "max_idle_s",
        "processes",
        "max_per_process",
        "dup_processes",
        "dup_max_idle_s",
        "dup_conn",
    ),
    "CLOSE_WAIT": ("oldest_state_age_s",),
}
SUMMARY_STATES = tuple(s for s in STATE_NAMES if s not in ("LISTEN", "CLOSE"))
SERIES = SERIES_FIELDS

MAX_FIELDS = (
    "last_event_s",
    "broker_id",
    "broker_endpoint",
    "summary_last_t",
    "summary_interval_s",
    "idle_at_close_max_s",
    "lifetime_max_s",
    "hb_t_last",
)
MIN_FIELDS = ("hb_t_first",)
SUM_FIELDS = (
    "events",
    "opens",
    "closes_local",
    "closes_peer",
    "closes_unknown",
    "closes_after_idle",
    "closes_after_idle_local",
    "closes_after_idle_peer",
    "short_lived",
    "lifetime_sum_s",
    "lifetime_n",
    # CLOSE_WAIT summaries: n, sums of t, count, t*t and t*count (t relative to window start)
    "cw_n",
    "cw_st",
    "cw_sn",
    "cw_stt",
    "cw_stn",
)
# Values taken from the event with the newest (or oldest) time: (field, time field, newest?)
HB_BY_TIME = (("hb_fails_first", "hb_t_first", False), ("hb_fails_last", "hb_t_last", True))


def state_col(state: str) -> str:
    """Name of a state's latest-summary dict in a finished row."""
    return f"st_{state.lower()}"


def state_fields(state: str) -> tuple[str, ...]:
    return ("t", "count") + STATE_DETAIL.get(state, ())


def flat_col(state: str, name: str) -> str:
    """Name of one latest-summary field in a partial row."""
    return f"{state_col(state)}__{name}"


# (state, names, flat column names), computed once: merge runs per partial row and state.
_STATE_COLS = tuple(
    (st, state_fields(st), tuple(flat_col(st, n) for n in state_fields(st)))
    for st in SUMMARY_STATES
)


_COPIED = ("window_start_s", *SERIES, *MAX_FIELDS, *MIN_FIELDS)


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _min(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _rank(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Total order on equal-time candidates, so merging is deterministic."""
    return tuple((v is not None, v if v is not None else 0) for v in values)


def merge(into: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Merge partial ``part`` into ``into`` (same window and series), in place."""
    for f in MAX_FIELDS:
        into[f] = _max(into.get(f), part.get(f))
    for f in MIN_FIELDS:
        into[f] = _min(into.get(f), part.get(f))
    for f in SUM_FIELDS:
        into[f] = (into.get(f) or 0) + (part.get(f) or 0)
    for _state, _names, cols in _STATE_COLS:
        if part.get(cols[0]) is None:
            continue
        mine = tuple(into.get(c) for c in cols)
        theirs = tuple(part.get(c) for c in cols)
        if mine[0] is None or (theirs[0], _rank(theirs)) > (mine[0], _rank(mine)):
            into.update(zip(cols, theirs, strict=True))
    for f, t, newest in HB_BY_TIME:
        mine_t, theirs_t = into.get(f"_{f}_t"), part.get(t)
        if theirs_t is None:
            continue
        better = (
            mine_t is None
            or (theirs_t > mine_t if newest else theirs_t < mine_t)
            or (theirs_t == mine_t and _rank((part.get(f),)) > _rank((into.get(f),)))
        )
        if better:
            into[f], into[f"_{f}_t"] = part.get(f), theirs_t


def new_window(part: Mapping[str, Any]) -> dict[str, Any]:
    """An open window started from its first partial row: ``merge`` into an empty window,
    spelled out (most partial rows of a batch open a window)."""
    w: dict[str, Any] = {k: part.get(k) for k in _COPIED}
    for f in SUM_FIELDS:
        w[f] = part.get(f) or 0
    for _state, _names, cols in _STATE_COLS:
        if part.get(cols[0]) is not None:
            for c in cols:
                w[c] = part.get(c)
    for f, t, _newest in HB_BY_TIME:
        if part.get(t) is not None:
            w[f], w[f"_{f}_t"] = part.get(f), part[t]
    return w


def _slope(w: Mapping[str, Any]) -> float | None:
    """``covar_pop(t, count) / var_pop(t)`` over the window's CLOSE_WAIT summaries."""
    n = w.get("cw_n") or 0
    if n < 2:
        return None
    mt, mc = w["cw_st"] / n, w["cw_sn"] / n
    var = w["cw_stt"] / n - mt * mt
    if var <= 1e-9:  # all at one instant (t is relative to the window start, so no cancellation)
        return None
    return (w["cw_stn"] / n - mt * mc) / var


_FINISHED = (*SERIES, *MAX_FIELDS, *MIN_FIELDS, *SUM_FIELDS, *(f for f, _t, _n in HB_BY_TIME))
_STATE_ROW = tuple((state_col(st), names, cols) for st, names, cols in _STATE_COLS)


def finish(w: Mapping[str, Any], window_s: float) -> dict[str, Any]:
    """An open window as the row ``records.to_aggregate`` reads."""
    get = w.get
    row: dict[str, Any] = {k: get(k) for k in _FINISHED}
    row["window_start_s"] = w["window_start_s"]
    row["window_end_s"] = w["window_start_s"] + window_s
    for col, names, cols in _STATE_ROW:
        if get(cols[0]) is None:
            row[col] = None
        else:
            row[col] = {n: get(c) for n, c in zip(names, cols, strict=True)}
    row["close_wait_slope_per_s"] = _slope(w)
    n = w.get("lifetime_n") or 0
    row["lifetime_avg_s"] = w["lifetime_sum_s"] / n if n else None
    return row


_KEY_FIELDS = ("window_start_s", *SERIES)


def window_key(part: Mapping[str, Any]) -> str:
    """JSON-safe key of a (window, series)."""
    return "|".join(key_part("" if (v := part.get(k)) is None else str(v)) for k in _KEY_FIELDS)


@dataclass
class BatchResult:
    rows: list[dict[str, Any]]  # finished rows of the windows this batch updated
    late: int  # events of this batch whose window had closed
    rejected: dict[str, int]  # dead-letter reason -> records of this batch
    watermark_s: float | None  # watermark in effect for this batch
    max_event_s: float | None  # newest event time seen so far
    input_rows: int = 0  # records of this batch: valid, late and rejected


@dataclass
class WindowState:
    """The open windows, the newest event time and the job's cumulative bad-input counts."""

    window_s: float
    watermark_s: float
    open: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_event_s: float | None = None
    late_total: int = 0
    dead_letter_total: int = 0
    # since the last to_state/to_delta: windows merged into, windows evicted
    _changed: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _evicted: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def watermark(self) -> float | None:
        return None if self.max_event_s is None else self.max_event_s - self.watermark_s

    def apply(self, partials: Iterable[Mapping[str, Any]]) -> BatchResult:
        """Merge one batch's partial rows; evict the windows the new watermark closes."""
        wm = self.watermark()
        touched: dict[str, None] = {}  # insertion-ordered set
        late = 0
        rejected: dict[str, int] = {}
        newest = self.max_event_s
        input_rows = 0
        for part in partials:
            events = int(part.get("events") or 0)
            input_rows += events
            if part.get("reason") is not None:
                rejected[part["reason"]] = rejected.get(part["reason"], 0) + events
                continue
            if wm is not None and part["window_start_s"] + self.window_s <= wm:
                late += events
                continue
            newest = _max(newest, part.get("last_event_s"))
            key = window_key(part)
            w = self.open.get(key)
            if w is None:
                self.open[key] = new_window(part)
                self._evicted.discard(key)
            else:
                merge(w, part)
            touched[key] = None
        order = sorted(touched, key=lambda k: (self.open[k]["window_start_s"], k))
        rows = [finish(self.open[k], self.window_s) for k in order]
        self.max_event_s = newest
        self.late_total += late
        self.dead_letter_total += sum(rejected.values())
        self._changed.update(touched)
        new_wm = self.watermark()
        if new_wm is not None:
            closed = [
                k for k, w in self.open.items() if w["window_start_s"] + self.window_s <= new_wm
            ]
            for k in closed:
                del self.open[k]
            self._evicted.update(closed)
        return BatchResult(rows, late, rejected, wm, self.max_event_s, input_rows)

    def to_state(self) -> dict[str, Any]:
        """Every open window (a snapshot)."""
        self._changed, self._evicted = set(), set()
        return {"window_s": self.window_s, **self._counters(), **_as_rows(self.open.values())}

    def to_delta(self) -> dict[str, Any]:
        """Windows merged into or evicted since the last ``to_state``/``to_delta``: in a live
        fleet every series touches its current window each batch, but the open windows of the
        watermark's span are several times more."""
        changed, self._changed = self._changed, set()
        evicted, self._evicted = self._evicted, set()
        touched = [self.open[k] for k in sorted(changed) if k in self.open]
        return {
            "window_s": self.window_s,
            **self._counters(),
            **_as_rows(touched),
            "evicted": sorted(evicted),
        }

    def _counters(self) -> dict[str, Any]:
        return {
            "max_event_s": self.max_event_s,
            "late_total": self.late_total,
            "dead_letter_total": self.dead_letter_total,
        }

    def check_compatible(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the setting when ``state`` was saved with other windows."""
        if not math.isclose(state["window_s"], self.window_s):
            raise ValueError(
                f"detectors.window_s: the checkpoint has {state['window_s']} s windows, the "
                f"config {self.window_s} s; use a new checkpoint to change it"
            )

    def load_state(
        self, state: Mapping[str, Any], deltas: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        """A snapshot from ``to_state`` followed by the deltas saved after it, in order."""
        self.check_compatible(state)
        self.open = {}
        for part in (state, *deltas):
            for k in part.get("evicted", ()):
                self.open.pop(k, None)
            if "open" in part:  # written before open windows were saved as rows
                opened = part["open"]
            else:
                fields = part["open_fields"]
                opened = [dict(zip(fields, row, strict=True)) for row in part["open_rows"]]
            self.open.update((window_key(w), w) for w in opened)
            self.max_event_s = part["max_event_s"]
            self.late_total = part["late_total"]
            self.dead_letter_total = part["dead_letter_total"]
        self._changed, self._evicted = set(), set()


def _as_rows(windows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Windows as rows under one field list: a dict per window repeated its ~60 keys."""
    ws = list(windows)
    fields = sorted(set().union(*ws))
    return {"open_fields": fields, "open_rows": [[w.get(f) for f in fields] for w in ws]}
