"""Open windows (``open_windows``: a list of slots per window) -> ``Aggregate`` records.

The one derivation of a window's published values, read straight from its slots: which
per-state summary is current, the CLOSE_WAIT slope and average lifetime from their sums, the
process nearest its fd limit, the host's failed connects per minute from heartbeat counters,
ISO times.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from streaming.job.open_windows import SLOT, SUM_FIELDS, SUMMARY_STATES, flat_col
from streaming.schema.aggregates import Aggregate
from streaming.schema.clients import IDENTITY_FIELDS
from streaming.schema.fds import nearest_limit
from streaming.schema.times import iso

Window = Sequence[Any]  # an open window's slots, ``open_windows.WINDOW_FIELDS``


def _num(v: Any) -> float | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def _at(state: str, name: str) -> int:
    return SLOT[flat_col(state, name)]


# Copied as they are, counted (null as 0), and numbers that may be absent.
_COPIED = tuple(
    (f, SLOT[f])
    for f in (
        "side",
        "host",
        "app",
        "broker",
        "peer_host",
        "broker_id",
        "broker_endpoint",
        "cluster",
        *IDENTITY_FIELDS,
        "paused_how",
    )
)
_AGGREGATE_FIELDS = frozenset(Aggregate.__dataclass_fields__)
_COUNTS = tuple((f, SLOT[f]) for f in (*SUM_FIELDS, "paused_processes") if f in _AGGREGATE_FIELDS)
_NUMBERS = tuple(
    (f, SLOT[f])
    for f in ("idle_at_close_max_s", "reopen_idle_min_s", "reopen_idle_max_s", "lifetime_max_s")
)
_COPIED_NAMES, _copied = tuple(f for f, _i in _COPIED), itemgetter(*(i for _f, i in _COPIED))
_COUNT_NAMES, _counts = tuple(f for f, _i in _COUNTS), itemgetter(*(i for _f, i in _COUNTS))
_NUMBER_NAMES, _numbers = tuple(f for f, _i in _NUMBERS), itemgetter(*(i for _f, i in _NUMBERS))
# Per summary state: its time's slot and its count's slot.
_STATES = tuple((st, _at(st, "t"), _at(st, "count")) for st in SUMMARY_STATES)
_START, _LAST_EVENT = SLOT["window_start_s"], SLOT["last_event_s"]
_SUMMARY_T, _SUMMARY_EVERY = SLOT["summary_last_t"], SLOT["summary_interval_s"]
_CW = tuple(SLOT[f] for f in ("cw_n", "cw_st", "cw_sn", "cw_stt", "cw_stn"))
_LIFETIME_SUM, _LIFETIME_N = SLOT["lifetime_sum_s"], SLOT["lifetime_n"]
_EST = "ESTABLISHED"
# ESTABLISHED's detail, taken from its current summary: numbers that may be absent, counts
# (null as 0), values as they are.
_EST_NUMBERS = (
    ("max_idle_s", "max_idle_s"),
    ("dup_max_idle_s", "dup_max_idle_s"),
    ("dup_used_max_idle_s", "dup_used_max_idle_s"),
    ("dup_used_active_idle_s", "dup_used_active_idle_s"),
)
_EST_COUNTS = (
    ("dup_processes", "dup_processes"),
    ("dup_unused_processes", "dup_unused_processes"),
)
_EST_AS_IS = (
    ("established_processes", "processes"),
    ("established_max_per_process", "max_per_process"),
    ("dup_conn", "dup_conn"),
)
_EST_ABSENT = {
    **dict.fromkeys((f for f, _n in (*_EST_NUMBERS, *_EST_AS_IS)), None),
    **dict.fromkeys((f for f, _n in _EST_COUNTS), 0),
}
_est_numbers = itemgetter(*(_at(_EST, n) for _f, n in _EST_NUMBERS))
_est_counts = itemgetter(*(_at(_EST, n) for _f, n in _EST_COUNTS))
_est_as_is = itemgetter(*(_at(_EST, n) for _f, n in _EST_AS_IS))
_EST_NUMBER_NAMES = tuple(f for f, _n in _EST_NUMBERS)
_EST_COUNT_NAMES = tuple(f for f, _n in _EST_COUNTS)
_EST_AS_IS_NAMES = tuple(f for f, _n in _EST_AS_IS)
_CW_AGE = _at("CLOSE_WAIT", "oldest_state_age_s")
# Each state whose summaries carry the fd pair: (state, open's slot, limit's slot).
_FDS = tuple((st, _at(st, "fds_open"), _at(st, "fds_limit")) for st in (_EST, "CLOSE_WAIT"))
_HB = tuple(SLOT[f] for f in ("hb_fails_first", "hb_fails_last", "hb_t_first", "hb_t_last"))


def _current_states(w: Window) -> dict[str, int]:
    """Socket count per state, of the states reported at the series' latest summary tick: an
    agent sends no summary for a state with no sockets, so an older one is stale."""
    last_t = w[_SUMMARY_T]
    if last_t is None:
        return {}
    # Summaries of one tick are stamped within a fraction of the interval of each other.
    since = last_t - max(0.5 * (w[_SUMMARY_EVERY] or 0.0), 1.0)
    return {
        st: int(w[count] or 0)
        for st, t, count in _STATES
        if (at := w[t]) is not None and at >= since
    }


def _slope(n: int, st: float, sn: float, stt: float, stn: float) -> float | None:
    """``covar_pop(t, count) / var_pop(t)`` over the window's CLOSE_WAIT summaries."""
    if n < 2:
        return None
    mt, mc = st / n, sn / n
    var = stt / n - mt * mt
    if var <= 1e-9:  # all at one instant (t is relative to the window start, so no cancellation)
        return None
    return (stn / n - mt * mc) / var


def to_aggregate(w: Window, window_s: float) -> Aggregate:
    """One window of a series as an ``Aggregate``."""
    sockets = _current_states(w)
    d: dict[str, Any] = dict(zip(_COPIED_NAMES, _copied(w), strict=True))
    d.update(zip(_COUNT_NAMES, [int(v or 0) for v in _counts(w)], strict=True))
    d.update(zip(_NUMBER_NAMES, [_num(v) for v in _numbers(w)], strict=True))
    start = w[_START]
    d["window_start"], d["window_end"], d["window_s"] = iso(start), iso(start + window_s), window_s
    d["sockets"] = sockets
    if _EST in sockets:
        d.update(zip(_EST_NUMBER_NAMES, [_num(v) for v in _est_numbers(w)], strict=True))
        d.update(zip(_EST_COUNT_NAMES, [int(v or 0) for v in _est_counts(w)], strict=True))
        d.update(zip(_EST_AS_IS_NAMES, _est_as_is(w), strict=True))
    else:
        d.update(_EST_ABSENT)
    d["close_wait_count"] = sockets.get("CLOSE_WAIT", 0)
    d["close_wait_oldest_age_s"] = _num(w[_CW_AGE]) if "CLOSE_WAIT" in sockets else None
    n, st, sn, stt, stn = (w[i] for i in _CW)
    d["close_wait_slope_per_s"] = _num(_slope(n or 0, st, sn, stt, stn))
    d["time_wait_count"] = sockets.get("TIME_WAIT", 0)
    d["syn_sent_count"] = sockets.get("SYN_SENT", 0)
    n = w[_LIFETIME_N] or 0
    d["lifetime_avg_s"] = _num(w[_LIFETIME_SUM] / n) if n else None
    d["last_event_time"] = iso(w[_LAST_EVENT])
    pairs = [
        (int(w[o]), int(w[lim]))
        for st, o, lim in _FDS
        if st in sockets and w[o] is not None and w[lim]
    ]
    d["fds_open"], d["fds_limit"] = nearest_limit(pairs) if pairs else (None, None)
    return Aggregate.adopt(d)


def _attempt_fails_per_min(w: Window) -> float | None:
    first, last, t0, t1 = (w[i] for i in _HB)
    if None in (first, last, t0, t1) or t1 <= t0 or last < first:  # a reset: agent restarted
        return None
    return (last - first) * 60.0 / (t1 - t0)


_SIDE, _HOST, _APP, _BROKER = (SLOT[f] for f in ("side", "host", "app", "broker"))


def to_aggregates(
    windows: Iterable[Window], window_s: float
) -> tuple[list[Aggregate], dict[tuple[str, str], float]]:
    """Series aggregates, and host failed-connect rates keyed by (host, window_start). The
    rates become host-level series of their own: they say nothing about any one pair."""
    series: list[Aggregate] = []
    host_rates: dict[tuple[str, str], float] = {}
    for w in windows:
        if w[_SIDE] is None:  # the host-level heartbeat group
            rate = _attempt_fails_per_min(w)
            if rate is not None:
                host_rates[(w[_HOST], iso(w[_START]))] = rate
        elif w[_APP] is not None and w[_BROKER] is not None:
            series.append(to_aggregate(w, window_s))
    return series, host_rates
