"""Window rows (plain dicts from the small aggregated frame) -> ``Aggregate`` records.

Pure Python on already aggregated data: which per-state summary is current, the host's failed
connects per minute from heartbeat counters, ISO times.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from streaming.job.open_windows import SUMMARY_STATES, state_col
from streaming.schema.aggregates import Aggregate
from streaming.schema.fds import FdUsage, nearest_limit
from streaming.schema.times import iso


def _num(v: Any) -> float | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def _current_states(row: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Latest summary per state, keeping only states reported at the series' latest summary
    tick: an agent sends no summary for a state with no sockets, so an older one is stale."""
    last_t = row.get("summary_last_t")
    if last_t is None:
        return {}
    # Summaries of one tick are stamped within a fraction of the interval of each other.
    tolerance = max(0.5 * (row.get("summary_interval_s") or 0.0), 1.0)
    current = {}
    for state in SUMMARY_STATES:
        s = row.get(state_col(state))
        if s is not None and s["t"] is not None and s["t"] >= last_t - tolerance:
            current[state] = s
    return current


def _attempt_fails_per_min(row: Mapping[str, Any]) -> float | None:
    first, last = row.get("hb_fails_first"), row.get("hb_fails_last")
    t0, t1 = row.get("hb_t_first"), row.get("hb_t_last")
    if None in (first, last, t0, t1) or t1 <= t0 or last < first:  # a reset: agent restarted
        return None
    return (last - first) * 60.0 / (t1 - t0)


def _fds(*states: Mapping[str, Any]) -> FdUsage | None:
    """The pair of the process nearest its fd limit among the current states' summaries."""
    return nearest_limit(
        (int(s["fds_open"]), int(s["fds_limit"]))
        for s in states
        if s.get("fds_open") is not None and s.get("fds_limit")
    )


def to_aggregate(row: Mapping[str, Any], window_s: float) -> Aggregate:
    """One finished window row (``open_windows.finish``) as an ``Aggregate``."""
    states = _current_states(row)
    est = states.get("ESTABLISHED", {})
    cw = states.get("CLOSE_WAIT", {})
    fds = _fds(est, cw)
    return Aggregate(
        side=row["side"],
        host=row["host"],
        app=row["app"],
        broker=row["broker"],
        peer_host=row.get("peer_host"),
        broker_id=row.get("broker_id"),
        broker_endpoint=row.get("broker_endpoint"),
        cluster=row.get("cluster"),
        client_library=row.get("client_library"),
        client_version=row.get("client_version"),
        client_library_evidence=row.get("client_library_evidence"),
        process_role=row.get("process_role"),
        paused_processes=int(row.get("paused_processes") or 0),
        paused_how=row.get("paused_how"),
        window_start=iso(row["window_start_s"]),
        window_end=iso(row["window_end_s"]),
        window_s=window_s,
        sockets={state: int(s["count"] or 0) for state, s in states.items()},
        close_wait_count=int(cw.get("count") or 0),
        close_wait_oldest_age_s=_num(cw.get("oldest_state_age_s")),
        close_wait_slope_per_s=_num(row.get("close_wait_slope_per_s")),
        time_wait_count=int((states.get("TIME_WAIT") or {}).get("count") or 0),
        syn_sent_count=int((states.get("SYN_SENT") or {}).get("count") or 0),
        max_idle_s=_num(est.get("max_idle_s")),
        established_processes=est.get("processes"),
        established_max_per_process=est.get("max_per_process"),
        dup_processes=int(est.get("dup_processes") or 0),
        dup_max_idle_s=_num(est.get("dup_max_idle_s")),
        dup_conn=est.get("dup_conn"),
        dup_unused_processes=int(est.get("dup_unused_processes") or 0),
        dup_used_max_idle_s=_num(est.get("dup_used_max_idle_s")),
        dup_used_active_idle_s=_num(est.get("dup_used_active_idle_s")),
        opens=int(row.get("opens") or 0),
        closes_local=int(row.get("closes_local") or 0),
        closes_peer=int(row.get("closes_peer") or 0),
        closes_unknown=int(row.get("closes_unknown") or 0),
        closes_after_idle=int(row.get("closes_after_idle") or 0),
        closes_after_idle_local=int(row.get("closes_after_idle_local") or 0),
        closes_after_idle_peer=int(row.get("closes_after_idle_peer") or 0),
        idle_at_close_max_s=_num(row.get("idle_at_close_max_s")),
        reopens_after_idle=int(row.get("reopens_after_idle") or 0),
        reopen_idle_min_s=_num(row.get("reopen_idle_min_s")),
        reopen_idle_max_s=_num(row.get("reopen_idle_max_s")),
        closes_broker_drop=int(row.get("closes_broker_drop") or 0),
        connects_failed=int(row.get("connects_failed") or 0),
        connects_refused=int(row.get("connects_refused") or 0),
        short_lived=int(row.get("short_lived") or 0),
        lifetime_avg_s=_num(row.get("lifetime_avg_s")),
        lifetime_max_s=_num(row.get("lifetime_max_s")),
        last_event_time=iso(row.get("last_event_s")),
        fds_open=fds[0] if fds else None,
        fds_limit=fds[1] if fds else None,
    )


def to_aggregates(
    rows: Iterable[Mapping[str, Any]], window_s: float
) -> tuple[list[Aggregate], dict[tuple[str, str], float]]:
    """Series aggregates, and host failed-connect rates keyed by (host, window_start). The
    rates become host-level series of their own: they say nothing about any one pair."""
    series: list[Aggregate] = []
    host_rates: dict[tuple[str, str], float] = {}
    for row in rows:
        if row.get("side") is None:  # the host-level heartbeat group
            rate = _attempt_fails_per_min(row)
            if rate is not None:
                host_rates[(row["host"], iso(row["window_start_s"]))] = rate
        elif row.get("app") is not None and row.get("broker") is not None:
            series.append(to_aggregate(row, window_s))
    return series, host_rates
