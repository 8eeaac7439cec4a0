"""Event-time windows per series: one aggregation, built-in functions only.

A series is (side, host, app, broker[, peer_host]); heartbeats carry no series and form a
host-level group (side, app and broker null) whose counters give the host's failed connects.
The output is the raw window frame; ``records.to_aggregates`` turns its (few) rows into the
``connmon.aggregates`` contract.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming.detectors.config import DetectorConfig
from streaming.schema.events import STATE_NAMES

GROUP = ("side", "host", "app", "broker", "peer_host")
# Latest-summary fields kept per state; ESTABLISHED and CLOSE_WAIT carry more detail.
_STATE_DETAIL = {
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


def state_col(state: str) -> str:
    return f"st_{state.lower()}"


def with_series(df: DataFrame) -> DataFrame:
    """Add ``broker`` (id as a string, else the endpoint) and ``t`` (event time, epoch s)."""
    return df.withColumn(
        "broker", F.coalesce(F.col("broker_id").cast("string"), F.col("broker_endpoint"))
    ).withColumn("t", F.unix_micros("ts") / F.lit(1e6))


def _count(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))


def _aggregations(cfg: DetectorConfig) -> list[Column]:
    kind = F.col("kind")
    summary = kind == "summary"
    closed = kind == "closed"
    hb = kind == "heartbeat"
    closed_by = F.coalesce(F.col("closed_by"), F.lit("unknown"))
    idle_close = closed & (F.col("idle_at_close_s") >= F.lit(cfg.idle_churn_min_idle_s))
    aggs: list[Column] = [
        F.max("ts").alias("last_event_time"),
        F.max("cluster").alias("cluster"),
        F.max("broker_id").alias("broker_id"),
        F.max("broker_endpoint").alias("broker_endpoint"),
        F.max(F.when(summary, F.col("t"))).alias("summary_last_t"),
        F.max(F.when(summary, F.col("interval_s"))).alias("summary_interval_s"),
    ]
    for state in SUMMARY_STATES:
        is_state = summary & (F.col("state") == state)
        fields = ("t", "count") + _STATE_DETAIL.get(state, ())
        latest = F.max_by(
            F.when(is_state, F.struct(*[F.col(f) for f in fields])), F.when(is_state, F.col("t"))
        )
        aggs.append(latest.alias(state_col(state)))
    cw = summary & (F.col("state") == "CLOSE_WAIT")
    cw_t, cw_n = F.when(cw, F.col("t")), F.when(cw, F.col("count").cast("double"))
    aggs += [
        F.covar_pop(cw_t, cw_n).alias("cw_covar"),
        F.var_pop(cw_t).alias("cw_var"),
        _count(
            (kind == "opened") & (F.coalesce(F.col("open_reason"), F.lit("new")) == "new")
        ).alias("opens"),
        _count(closed & (closed_by == "local")).alias("closes_local"),
        _count(closed & (closed_by == "peer")).alias("closes_peer"),
        _count(closed & (closed_by == "unknown")).alias("closes_unknown"),
        _count(idle_close).alias("closes_after_idle"),
        _count(idle_close & (closed_by == "local")).alias("closes_after_idle_local"),
        _count(idle_close & (closed_by == "peer")).alias("closes_after_idle_peer"),
        F.max(F.when(closed, F.col("idle_at_close_s"))).alias("idle_at_close_max_s"),
        _count(closed & (F.col("lifetime_s") < F.lit(cfg.storm_short_lived_s))).alias(
            "short_lived"
        ),
        F.avg(F.when(closed, F.col("lifetime_s"))).alias("lifetime_avg_s"),
        F.max(F.when(closed, F.col("lifetime_s"))).alias("lifetime_max_s"),
        F.min_by(F.when(hb, F.col("tcp_attempt_fails")), F.when(hb, F.col("t"))).alias(
            "hb_fails_first"
        ),
        F.max_by(F.when(hb, F.col("tcp_attempt_fails")), F.when(hb, F.col("t"))).alias(
            "hb_fails_last"
        ),
        F.min(F.when(hb, F.col("t"))).alias("hb_t_first"),
        F.max(F.when(hb, F.col("t"))).alias("hb_t_last"),
    ]
    return aggs


def aggregate(events: DataFrame, cfg: DetectorConfig) -> DataFrame:
    """Valid events -> one row per (window, series) with the raw window statistics.
    Works on streaming frames (watermark on ``ts``) and on static frames alike."""
    window = F.window("ts", f"{int(cfg.window_s * 1000)} milliseconds")
    df = with_series(events)
    if df.isStreaming:
        df = df.withWatermark("ts", f"{int(cfg.watermark_s * 1000)} milliseconds")
    out = df.groupBy(window.alias("window"), *GROUP).agg(*_aggregations(cfg))
    slope = F.try_divide(F.col("cw_covar"), F.col("cw_var"))
    # Epoch seconds, not timestamps: collect() would turn those into naive local-time values.
    return (
        out.withColumn("close_wait_slope_per_s", slope)
        .withColumn("window_start_s", F.unix_micros("window.start") / F.lit(1e6))
        .withColumn("window_end_s", F.unix_micros("window.end") / F.lit(1e6))
        .withColumn("last_event_s", F.unix_micros("last_event_time") / F.lit(1e6))
        .drop("cw_covar", "cw_var", "window", "last_event_time")
    )
