"""Window statistics merged across micro-batches.

Each micro-batch aggregates its own events into *partial* rows per (window, series) with
mergeable statistics only (sums, minima, maxima, values taken at the latest event time). This
module merges them into the open windows, applies the event-time watermark, counts late events,
and turns a window into the finished row that ``records`` reads. Pure Python: the job keeps one
``OpenWindows`` per state bucket (``buckets``), saved as a JSON-able document in Spark's state
store.

Watermark: the newest event time of the whole fleet seen in earlier batches (each bounded by the
job's clock when its batch started) minus ``watermark_s``. An event is late when its window
ended at or before the watermark (the window was closed and evicted).
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
        "dup_unused_processes",
        "dup_used_max_idle_s",
        "dup_used_active_idle_s",
    ),
    "CLOSE_WAIT": ("oldest_state_age_s",),
}
SUMMARY_STATES = tuple(s for s in STATE_NAMES if s not in ("LISTEN", "CLOSE"))
SERIES = SERIES_FIELDS

MAX_FIELDS = (
    "last_event_s",
    "broker_id",
    "broker_endpoint",
    "client_library",
    "client_version",
    "summary_last_t",
    "summary_interval_s",
    "idle_at_close_max_s",
    "lifetime_max_s",
    "hb_t_last",
    "reopen_idle_max_s",
)
MIN_FIELDS = ("hb_t_first", "reopen_idle_min_s")
SUM_FIELDS = (
    "events",
    "opens",
    "closes_local",
    "closes_peer",
    "closes_unknown",
    "closes_after_idle",
    "closes_after_idle_local",
    "closes_after_idle_peer",
    "closes_broker_drop",
    "connects_failed",
    "connects_refused",
    "reopens_after_idle",
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
# Grouping keys of a partial row besides window and series (``partial_rows.PartialRows``): a
# batch may hold several rows of one window that differ only in these.
_PART_FIELDS = (
    "broker_endpoint",
    "client_library",
    "client_version",
    flat_col("ESTABLISHED", "dup_conn"),
)


def window_key(part: Mapping[str, Any]) -> str:
    """JSON-safe key of a (window, series)."""
    return "|".join(key_part("" if (v := part.get(k)) is None else str(v)) for k in _KEY_FIELDS)


def part_key(part: Mapping[str, Any]) -> str:
    """Which of a batch's partial rows of one window this is."""
    return "|".join(key_part("" if (v := part.get(k)) is None else str(v)) for k in _PART_FIELDS)


@dataclass
class BatchResult:
    rows: list[dict[str, Any]]  # finished rows of the windows this batch updated
    late: int  # events of this batch whose window had closed
    watermark_s: float | None  # watermark in effect for this batch
    max_event_s: float | None  # newest event time seen so far
    duplicates: int = 0  # partial rows already merged (a batch written again after a crash)


@dataclass
class OpenWindows:
    """The open windows of some series and the newest event time of the whole fleet.

    Partial rows carry the id of the batch that made them (``batch``). A window remembers the
    newest batch merged into it and which of that batch's rows it holds, so a batch written
    again after a crash is merged once (a window's rows arrive in batch order)."""

    window_s: float
    watermark_s: float
    open: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_event_s: float | None = None

    def watermark(self) -> float | None:
        return None if self.max_event_s is None else self.max_event_s - self.watermark_s

    def advance(self, max_event_s: float | None) -> None:
        """Event time moved on elsewhere in the fleet (the newest event time of a batch)."""
        self.max_event_s = _max(self.max_event_s, max_event_s)

    def apply(self, partials: Iterable[Mapping[str, Any]]) -> BatchResult:
        """Merge one batch's partial rows; evict the windows the new watermark closes."""
        wm = self.watermark()
        touched: dict[str, None] = {}  # insertion-ordered set
        late = duplicates = 0
        newest = self.max_event_s
        for part in partials:
            if wm is not None and part["window_start_s"] + self.window_s <= wm:
                late += int(part.get("events") or 0)
                continue
            key = window_key(part)
            w = self.open.get(key)
            if w is not None and _seen(w, part):
                duplicates += 1
                continue
            progress = part.get("progress_s")  # bounded by the job's clock (``clocks``)
            newest = _max(newest, part.get("last_event_s") if progress is None else progress)
            if w is None:
                w = self.open[key] = new_window(part)
            else:
                merge(w, part)
            _remember(w, part)
            touched[key] = None
        order = sorted(touched, key=lambda k: (self.open[k]["window_start_s"], k))
        rows = [finish(self.open[k], self.window_s) for k in order]
        self.max_event_s = newest
        self.evict()
        return BatchResult(rows, late, wm, self.max_event_s, duplicates)

    def evict(self) -> None:
        """Forget the windows the watermark closed."""
        wm = self.watermark()
        if wm is not None:
            for k in [k for k, w in self.open.items() if w["window_start_s"] + self.window_s <= wm]:
                del self.open[k]

    def to_state(self) -> dict[str, Any]:
        """Every open window, as rows under one field list (a dict per window would repeat its
        ~60 keys), with its key (recomputing keys would cost more than storing them)."""
        ws = list(self.open.values())
        fields = sorted(set().union(*ws))
        return {
            "window_s": self.window_s,
            "max_event_s": self.max_event_s,
            "open_keys": list(self.open),
            "open_fields": fields,
            "open_rows": [[w.get(f) for f in fields] for w in ws],
        }

    def check_compatible(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the setting when ``state`` was saved with other windows."""
        if not math.isclose(state["window_s"], self.window_s):
            raise ValueError(
                f"detectors.window_s: the checkpoint has {state['window_s']} s windows, the "
                f"config {self.window_s} s; use a new checkpoint to change it"
            )

    def load_state(self, state: Mapping[str, Any]) -> None:
        """The state ``to_state`` saved."""
        self.check_compatible(state)
        fields = state["open_fields"]
        self.open = {
            k: dict(zip(fields, row, strict=True))
            for k, row in zip(state["open_keys"], state["open_rows"], strict=True)
        }
        self.max_event_s = state["max_event_s"]


def _seen(w: Mapping[str, Any], part: Mapping[str, Any]) -> bool:
    batch = part.get("batch")
    if batch is None or w.get("_batch") is None:
        return False
    return batch < w["_batch"] or (batch == w["_batch"] and part_key(part) in w["_parts"])


def _remember(w: dict[str, Any], part: Mapping[str, Any]) -> None:
    batch = part.get("batch")
    if batch is None:
        return
    if w.get("_batch") != batch:
        w["_batch"], w["_parts"] = batch, []
    w["_parts"].append(part_key(part))
