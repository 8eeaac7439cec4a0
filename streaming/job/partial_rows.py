"""One micro-batch's events -> partial window rows: one aggregation of built-in functions.

A series is ``aggregates.SERIES_FIELDS``; heartbeats carry no series and form a
host-level group (side, app and broker null) whose counters give the host's failed connects.
Every statistic is mergeable (``open_windows`` merges batches), and every aggregation
buffer is fixed-width so Spark plans a code-generated ``HashAggregate``: the few string values
(broker endpoint, client library and version, the duplicate connection's 4-tuple, how a
process is paused, its role) are
grouping keys instead, and
the merge folds their rows together. Rejected records form one group per reason (all other keys
null), so one pass over the batch also counts the dead letters.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming.detectors.config import DetectorConfig
from streaming.job.open_windows import SERIES, SUMMARY_STATES, flat_col, state_fields
from streaming.schema.clients import UNKNOWN_LIBRARY


def _count(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))


def _tally(closed: Column, counted: Column) -> Column:
    """Connections that match: one per ``closed`` event, ``count`` per ``short_lived`` event
    (connections the agent's eBPF collector counted in the kernel)."""
    return F.sum(F.when(closed, 1).when(counted, F.col("count")).otherwise(0))


def _aggregations(cfg: DetectorConfig, t: Column, t_rel: Column) -> list[Column]:
    kind = F.col("kind")
    summary = kind == "summary"
    closed = kind == "closed"
    hb = kind == "heartbeat"
    counted = kind == "short_lived"
    closed_by = F.coalesce(F.col("closed_by"), F.lit("unknown"))
    failed = F.col("connect_error").isNotNull()
    refused = F.col("connect_error") == "refused"
    short = F.lit(cfg.storm_short_lived_s)
    min_idle = F.lit(cfg.idle_churn_min_idle_s)
    idle_close = closed & (F.col("idle_at_close_s") >= min_idle)
    # A reap-and-reconnect cycle: the same client re-opens after an idle close, and the broker
    # was not dropping its busy connections at that moment.
    reopen = (
        (kind == "opened")
        & (F.col("reopen_idle_s") >= min_idle)
        & ~F.coalesce(F.col("reopen_after_drop"), F.lit(False))
    )
    aggs: list[Column] = [
        F.count(F.lit(1)).alias("events"),
        F.max(t).alias("last_event_s"),
        F.max("broker_id").alias("broker_id"),
        F.max(F.when(summary, t)).alias("summary_last_t"),
        F.max(F.when(summary, F.col("interval_s"))).alias("summary_interval_s"),
        F.max(F.when(summary, F.col("paused_processes"))).alias("paused_processes"),
    ]
    for state in SUMMARY_STATES:
        is_state = summary & (F.col("state") == state)
        latest_t = F.when(is_state, t)
        for name in state_fields(state):
            if name == "dup_conn":  # a string: a grouping key, see the module docstring
                continue
            value = t if name == "t" else F.col(name)
            aggs.append(F.max_by(F.when(is_state, value), latest_t).alias(flat_col(state, name)))
    cw = summary & (F.col("state") == "CLOSE_WAIT")
    cw_n = F.col("count").cast("double")
    aggs += [
        _count(cw).alias("cw_n"),
        F.sum(F.when(cw, t_rel)).alias("cw_st"),
        F.sum(F.when(cw, cw_n)).alias("cw_sn"),
        F.sum(F.when(cw, t_rel * t_rel)).alias("cw_stt"),
        F.sum(F.when(cw, t_rel * cw_n)).alias("cw_stn"),
        _tally(
            (kind == "opened") & (F.coalesce(F.col("open_reason"), F.lit("new")) == "new"),
            counted,
        ).alias("opens"),
        _tally(closed & (closed_by == "local"), counted & (closed_by == "local")).alias(
            "closes_local"
        ),
        _tally(closed & (closed_by == "peer"), counted & (closed_by == "peer")).alias(
            "closes_peer"
        ),
        _tally(closed & (closed_by == "unknown"), counted & (closed_by == "unknown")).alias(
            "closes_unknown"
        ),
        _tally(closed & failed, counted & failed).alias("connects_failed"),
        _tally(closed & refused, counted & refused).alias("connects_refused"),
        _count(idle_close).alias("closes_after_idle"),
        _count(idle_close & (closed_by == "local")).alias("closes_after_idle_local"),
        _count(idle_close & (closed_by == "peer")).alias("closes_after_idle_peer"),
        _count(closed & F.coalesce(F.col("broker_drop"), F.lit(False))).alias("closes_broker_drop"),
        _count(reopen).alias("reopens_after_idle"),
        F.min(F.when(reopen, F.col("reopen_idle_s"))).alias("reopen_idle_min_s"),
        F.max(F.when(reopen, F.col("reopen_idle_s"))).alias("reopen_idle_max_s"),
        F.max(F.when(closed, F.col("idle_at_close_s"))).alias("idle_at_close_max_s"),
        # A count is short-lived as a whole when its longest connection is.
        _tally(
            closed & (F.col("lifetime_s") < short), counted & (F.col("lifetime_max_s") < short)
        ).alias("short_lived"),
        F.sum(F.when(closed, F.col("lifetime_s")).when(counted, F.col("lifetime_sum_s"))).alias(
            "lifetime_sum_s"
        ),
        _tally(
            closed & F.col("lifetime_s").isNotNull(), counted & F.col("lifetime_sum_s").isNotNull()
        ).alias("lifetime_n"),
        F.max(F.when(closed, F.col("lifetime_s")).when(counted, F.col("lifetime_max_s"))).alias(
            "lifetime_max_s"
        ),
        F.min_by(F.when(hb, F.col("tcp_attempt_fails")), F.when(hb, t)).alias("hb_fails_first"),
        F.max_by(F.when(hb, F.col("tcp_attempt_fails")), F.when(hb, t)).alias("hb_fails_last"),
        F.min(F.when(hb, t)).alias("hb_t_first"),
        F.max(F.when(hb, t)).alias("hb_t_last"),
    ]
    return aggs


class PartialRows:
    """``parse.Decoder`` output (a static frame: one micro-batch) -> one partial row per
    (window, series, string values) for valid events, and one per reason for rejected ones.
    Times are epoch seconds (``collect()`` would turn timestamps into naive local times).
    Columns are built once and reused for every batch (see ``parse.Decoder``)."""

    def __init__(self, cfg: DetectorConfig) -> None:
        valid = F.col("reason").isNull()
        micros = F.unix_micros("ts")
        width = F.lit(int(cfg.window_s * 1_000_000))
        start_us = micros - F.pmod(micros, width)
        t = micros / F.lit(1e6)
        t_rel = (micros - start_us) / F.lit(1e6)
        broker = F.coalesce(F.col("broker_id").cast("string"), F.col("broker_endpoint"))
        summary = F.col("kind") == "summary"
        dup_conn = F.when(summary & (F.col("state") == "ESTABLISHED"), F.col("dup_conn"))
        # "unknown" is no evidence: a window with one identified event names the library.
        known = valid & (F.col("client_library") != F.lit(UNKNOWN_LIBRARY))
        self.keys = [
            F.when(valid, start_us / F.lit(1e6)).alias("window_start_s"),
            *[F.when(valid, broker if k == "broker" else F.col(k)).alias(k) for k in SERIES],
            F.when(valid, F.col("broker_endpoint")).alias("broker_endpoint"),
            F.when(known, F.col("client_library")).alias("client_library"),
            F.when(known, F.col("client_version")).alias("client_version"),
            F.when(known, F.col("client_library_evidence")).alias("client_library_evidence"),
            F.when(valid, dup_conn).alias(flat_col("ESTABLISHED", "dup_conn")),
            F.when(valid & summary, F.col("paused_how")).alias("paused_how"),
            F.when(valid, F.col("process_role")).alias("process_role"),
            F.col("reason"),
        ]
        self.aggs = _aggregations(cfg, t, t_rel)

    def __call__(self, decoded: DataFrame) -> DataFrame:
        return decoded.groupBy(*self.keys).agg(*self.aggs)
