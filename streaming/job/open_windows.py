"""Window statistics merged across micro-batches.

Each micro-batch aggregates its own events into *partial* rows per (window, series) with
mergeable statistics only (sums, minima, maxima, values taken at the latest event time). This
module merges them into the open windows, applies the event-time watermark, counts late events
(per host); ``records`` reads a window's slots into an ``Aggregate``. Pure Python: the
job keeps one ``OpenWindows`` per state bucket (``buckets``), saved in Spark's state store.

Watermark: the fleet's newest event time (each event time bounded by the job's clock when its
batch started) minus ``watermark_s``. An event is late when its window ended at or before the
watermark (the window was closed and evicted).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from streaming.job.clocks import bounded
from streaming.schema.aggregates import SERIES_FIELDS, join_key, series_key
from streaming.schema.clients import (
    IDENTITY_FIELDS,
    LIBRARY_EVIDENCE,
    UNKNOWN_LIBRARY,
    version_tuple,
)
from streaming.schema.events import STATE_NAMES

# The process nearest its fd limit: a whole pair from one summary (``records`` picks the
# nearer of the two states' pairs).
_FDS = ("fds_open", "fds_limit")
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
        *_FDS,
    ),
    "CLOSE_WAIT": ("oldest_state_age_s", *_FDS),
}
SUMMARY_STATES = tuple(s for s in STATE_NAMES if s not in ("LISTEN", "CLOSE"))
SERIES = SERIES_FIELDS

MAX_FIELDS = (
    "last_event_s",
    "broker_id",
    "broker_endpoint",
    # Processes of the series paused at any summary of the window, and how (the larger name
    # when two disagree).
    "paused_processes",
    "paused_how",
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


def state_fields(state: str) -> tuple[str, ...]:
    return ("t", "count") + STATE_DETAIL.get(state, ())


def flat_col(state: str, name: str) -> str:
    """Name of one latest-summary field in a partial row."""
    return f"st_{state.lower()}__{name}"


# (state, names, flat column names), computed once: merge runs per partial row and state.
_STATE_COLS = tuple(
    (st, state_fields(st), tuple(flat_col(st, n) for n in state_fields(st)))
    for st in SUMMARY_STATES
)


# The identity sits where earlier versions kept it, among the maxima: a window they saved has
# the same slots, and loads without being rearranged (``load_state``).
_COPIED = (
    "window_start_s",
    *SERIES,
    *MAX_FIELDS[:3],
    *IDENTITY_FIELDS,
    *MAX_FIELDS[3:],
    *MIN_FIELDS,
)
# An open window is a list holding these fields by position: restoring a bucket is then a
# JSON parse, and saving one a JSON dump, with no per-window dict to build or take apart (a
# bucket holds thousands of windows and is restored and saved every batch). ``_<field>_t`` is
# the time of a value taken at the newest or oldest event (``HB_BY_TIME``).
WINDOW_FIELDS = (
    *_COPIED,
    *SUM_FIELDS,
    *(c for _state, _names, cols in _STATE_COLS for c in cols),
    *(f for f, _t, _newest in HB_BY_TIME),
    *(f"_{f}_t" for f, _t, _newest in HB_BY_TIME),
)
# Each field's slot in an open window.
SLOT = {f: i for i, f in enumerate(WINDOW_FIELDS)}
_START = SLOT["window_start_s"]
_SERIES_AT = tuple(SLOT[f] for f in SERIES)
_MAX_AT = tuple((SLOT[f], f) for f in MAX_FIELDS)
_MIN_AT = tuple((SLOT[f], f) for f in MIN_FIELDS)
_SUM_AT = tuple((SLOT[f], f) for f in SUM_FIELDS)
_KEY_AT = tuple(SLOT[f] for f in ("window_start_s", *SERIES))
_ID = slice(SLOT[IDENTITY_FIELDS[0]], SLOT[IDENTITY_FIELDS[-1]] + 1)
assert WINDOW_FIELDS[_ID] == IDENTITY_FIELDS  # adjacent slots: merged as one value
_LIBRARY = _ID.start
# Per state: its flat columns in a partial row and their slots in a window. A state's latest
# summary is taken as a whole.
_STATE_AT = tuple((cols, tuple(SLOT[c] for c in cols)) for _st, _names, cols in _STATE_COLS)
assert all(at == tuple(range(at[0], at[-1] + 1)) for _cols, at in _STATE_AT)  # adjacent slots
# (value position, its time's position, the partial row's fields, newest?)
_HB_AT = tuple((SLOT[f], SLOT[f"_{f}_t"], f, t, newest) for f, t, newest in HB_BY_TIME)


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


# Evidence, strongest first (``clients.LIBRARY_EVIDENCE``); null (an agent that does not say,
# which ``clients.proven`` takes for proof) just above "installed"; a level this version does
# not know (a newer agent's) below all.
_EVIDENCE_RANK: dict[str | None, int] = {
    e: 2 * (len(LIBRARY_EVIDENCE) - i) for i, e in enumerate(LIBRARY_EVIDENCE)
}
_EVIDENCE_RANK[None] = _EVIDENCE_RANK[LIBRARY_EVIDENCE[-1]] + 1


def _named(v: str | None) -> tuple[bool, str]:
    return (v is not None, v or "")


@functools.lru_cache(maxsize=4096)
def identity_rank(
    library: str | None, version: str | None, evidence: str | None, role: str | None
) -> tuple[Any, ...]:
    """Where a library identity (``IDENTITY_FIELDS``) stands: a window keeps the highest of
    its rows' identities, whole, so it names what one process was identified as.

    1. A known library beats none (null or ``unknown``).
    2. Stronger evidence (``_EVIDENCE_RANK``): a library proven in use beats one only
       installed. Advice then follows only from a library's own proof (merged field by
       field, one process's library could borrow another's).
    3. The newer version, compared as numbers (2.10.0 beats 2.9.0); one that does not parse
       loses to one that does.
    4. By name: library, version, evidence; then a role beats none (several clients per
       process by design: no duplicate_connections finding, the safe side).

    A total order on distinct identities: merging is order-independent, and merging a merged
    window again changes nothing."""
    if library is None or library == UNKNOWN_LIBRARY:
        return (False, _named(library), _named(role), _named(version), _named(evidence))
    parsed = version_tuple(version)
    return (
        True,
        _EVIDENCE_RANK.get(evidence, 0),
        parsed is not None,
        parsed or (),
        library,
        _named(version),
        evidence or "",
        _named(role),
    )


def _rank(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Total order on equal-time candidates, so merging is deterministic."""
    return tuple((v is not None, v if v is not None else 0) for v in values)


# How merging treats each field a partial row carries, by name: (rule, slot, what else it
# needs). The series fields and a summary's fields other than its time have no rule of their
# own (a summary is taken whole, by its time).
_SUM, _MAX, _MIN, _SUMMARY, _BY_TIME, _IDENTITY = range(6)


def _merge_rules() -> dict[str, tuple[tuple[int, int, Any], ...]]:
    rules: dict[str, list[tuple[int, int, Any]]] = {}
    for i, f in _SUM_AT:
        rules.setdefault(f, []).append((_SUM, i, None))
    for i, f in _MAX_AT:
        rules.setdefault(f, []).append((_MAX, i, None))
    for i, f in _MIN_AT:
        rules.setdefault(f, []).append((_MIN, i, None))
    for cols, at in _STATE_AT:
        rules.setdefault(cols[0], []).append((_SUMMARY, at[0], (cols, at)))
    for i, it, f, t, newest in _HB_AT:
        rules.setdefault(t, []).append((_BY_TIME, it, (i, f, newest)))
    for f in IDENTITY_FIELDS:
        rules.setdefault(f, []).append((_IDENTITY, 0, None))
    return {f: tuple(r) for f, r in rules.items()}


_RULES = _merge_rules()
# A window no partial row was merged into: every sum at 0, every other slot null.
_EMPTY: list[Any] = [0 if f in SUM_FIELDS else None for f in WINDOW_FIELDS]


def empty_window() -> list[Any]:
    """A window no partial row was merged into."""
    return list(_EMPTY)


def merge(into: list[Any], part: Mapping[str, Any]) -> None:
    """Merge partial ``part`` into the window ``into`` (same window and series), in place.
    Driven by the fields the row has (the ingest query leaves nulls out of its JSON): sums
    add, maxima and minima keep the extreme, a state's latest summary is taken whole by its
    time, a heartbeat counter by its time, the library identity by ``identity_rank``."""
    get = part.get
    identity = False
    for f, v in part.items():
        if v is None or (rules := _RULES.get(f)) is None:
            continue
        for rule, i, extra in rules:
            if rule == _SUM:
                if v:
                    into[i] += v
            elif rule == _MAX:
                if (mine := into[i]) is None or v > mine:
                    into[i] = v
            elif rule == _MIN:
                if (mine := into[i]) is None or v < mine:
                    into[i] = v
            elif rule == _SUMMARY:
                cols, at = extra
                mine = into[i]
                if mine is None or v > mine:
                    into[at[0] : at[-1] + 1] = [get(c) for c in cols]
                elif v == mine:  # equal times: the larger values, so the order does not matter
                    theirs = tuple(get(c) for c in cols)
                    if _rank(theirs) > _rank(tuple(into[at[0] : at[-1] + 1])):
                        into[at[0] : at[-1] + 1] = theirs
            elif rule == _BY_TIME:
                at_value, name, newest = extra
                mine_t = into[i]
                if (
                    mine_t is None
                    or (v > mine_t if newest else v < mine_t)
                    or (v == mine_t and _rank((get(name),)) > _rank((into[at_value],)))
                ):
                    into[at_value], into[i] = get(name), v
            else:
                identity = True
    # Most rows carry the window's identity, or none next to a known one.
    mine = into[_LIBRARY]
    if identity and (get("client_library") is not None or mine is None or mine == UNKNOWN_LIBRARY):
        theirs = [get(f) for f in IDENTITY_FIELDS]
        if theirs != (ours := into[_ID]) and identity_rank(*theirs) > identity_rank(*ours):
            into[_ID] = theirs


def new_window(part: Mapping[str, Any]) -> list[Any]:
    """An open window started from its first partial row: its key's fields, and the row
    merged into an empty window."""
    w = empty_window()
    for i in _KEY_AT:
        w[i] = part.get(WINDOW_FIELDS[i])
    merge(w, part)
    return w


_KEY_FIELDS = ("window_start_s", *SERIES)


def window_key(part: Mapping[str, Any]) -> str:
    """JSON-safe key of a (window, series)."""
    return join_key(["" if (v := part.get(k)) is None else str(v) for k in _KEY_FIELDS])


@dataclass
class BatchResult:
    windows: list[list[Any]]  # the windows this batch updated (copies of their slots)
    late: int  # events of this batch whose window had closed
    watermark_s: float | None  # watermark in effect for this batch
    max_event_s: float | None  # newest event time seen so far
    late_by_host: dict[str, int] = field(default_factory=dict)  # the late events, per host


@dataclass
class OpenWindows:
    """The open windows of some series and the newest event time of the whole fleet."""

    window_s: float
    watermark_s: float
    open: dict[str, list[Any]] = field(default_factory=dict)  # key -> ``WINDOW_FIELDS`` values
    max_event_s: float | None = None

    def watermark(self) -> float | None:
        return None if self.max_event_s is None else self.max_event_s - self.watermark_s

    def drop(self, series: set[str]) -> None:
        """Forget the open windows of ``series`` (keys as ``aggregates.series_key`` makes)."""
        for key, w in list(self.open.items()):
            side, host, app, cluster, broker, peer = (w[i] for i in _SERIES_AT)
            if side is None or app is None or broker is None:
                continue  # a host's heartbeat counters: no series of its own
            if series_key(side, host, app, cluster, broker, peer) in series:
                del self.open[key]

    def advance(self, max_event_s: float | None) -> None:
        """Event time moved on elsewhere in the fleet."""
        self.max_event_s = _max(self.max_event_s, max_event_s)

    def apply(
        self,
        partials: Iterable[Mapping[str, Any]],
        bound: float | None = None,
        newest_before: float | None | Literal["own"] = "own",
    ) -> BatchResult:
        """Merge one batch's partial rows; evict the windows the new watermark closes.
        ``bound``: the job's clock when the batch started; a row's event time beyond it is
        evidence of the fleet's event time only up to it (``clocks``). ``newest_before``: the
        fleet's newest event time before the batch (None: unknown, nothing is late), against
        which its rows are judged late, when rows of the batch were merged already; by default
        the newest these windows have seen."""
        before = self.max_event_s if newest_before == "own" else newest_before
        wm = None if before is None else before - self.watermark_s
        touched: dict[str, None] = {}  # insertion-ordered set
        late = 0
        late_by_host: dict[str, int] = {}
        newest = self.max_event_s
        for part in partials:
            if wm is not None and part["window_start_s"] + self.window_s <= wm:
                n = int(part.get("events") or 0)
                late += n
                host = part["host"]
                late_by_host[host] = late_by_host.get(host, 0) + n
                continue
            key = window_key(part)
            newest = _max(newest, bounded(part.get("last_event_s"), bound))
            w = self.open.get(key)
            if w is None:
                self.open[key] = new_window(part)
            else:
                merge(w, part)
            touched[key] = None
        order = sorted(touched, key=lambda k: (self.open[k][_START], k))
        windows = [list(self.open[k]) for k in order]
        self.max_event_s = newest
        self.evict()
        return BatchResult(windows, late, wm, self.max_event_s, late_by_host)

    def evict(self) -> None:
        """Forget the windows the watermark closed."""
        wm = self.watermark()
        if wm is not None:
            for k in [k for k, w in self.open.items() if w[_START] + self.window_s <= wm]:
                del self.open[k]

    def to_state(self) -> dict[str, Any]:
        """Every open window, as rows under one field list, with its key (recomputing keys
        would cost more than storing them)."""
        return {
            "window_s": self.window_s,
            "max_event_s": self.max_event_s,
            "open_keys": list(self.open),
            "open_fields": WINDOW_FIELDS,
            "open_rows": list(self.open.values()),
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
        fields, rows = tuple(state["open_fields"]), state["open_rows"]
        if fields != WINDOW_FIELDS:  # saved by a version with other fields: by name
            at = {f: i for i, f in enumerate(fields)}
            rows = [[row[at[f]] if f in at else None for f in WINDOW_FIELDS] for row in rows]
            for row in rows:  # a counter that version did not keep counted nothing
                for i, _f in _SUM_AT:
                    if row[i] is None:
                        row[i] = 0
        self.open = dict(zip(state["open_keys"], rows, strict=True))
        self.max_event_s = state["max_event_s"]
