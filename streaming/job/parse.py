"""Decode and validate raw event records with built-in Spark functions only.

Input frames have Kafka's source shape (``value`` binary or string, ``topic``, ``partition``,
``offset``, ``timestamp``); the file source is brought to the same shape by ``pipeline``. The
rules mirror ``streaming.schema.events.validate`` and are generated from the same field list.
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streaming.schema import events

CORRUPT = "_corrupt"
RAW_COLUMNS = ("value", "topic", "partition", "offset", "timestamp")  # of the Kafka source
_NOW = "_connmon_now"
NOW_STEP_S = 60  # processing time for the event-time bounds, in whole minutes


def _schema() -> T.StructType:
    return events.spark_schema().add(CORRUPT, T.StringType())


def _first(pairs: list[tuple[Column, str]]) -> Column:
    """The text of the first condition that holds, else null."""
    expr = None
    for cond, text in pairs:
        expr = F.when(cond, F.lit(text)) if expr is None else expr.when(cond, F.lit(text))
    return expr if expr is not None else F.lit(None).cast("string")


def _missing(e: str) -> Column:
    pairs: list[tuple[Column, str]] = []
    for kind, names in events.REQUIRED_BY_KIND.items():
        for name in names:
            cond = (F.col(f"{e}.kind") == kind) & F.col(f"{e}.{name}").isNull()
            pairs.append((cond, f"missing required field {name!r}"))
    return _first(pairs)


def _any(conds: list[Column]) -> Column:
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out


def _any_missing(e: str) -> Column:
    """Whether ``_missing`` finds anything, as a short boolean: fields every kind requires are
    checked once (the long text chain is only computed for rejected records)."""
    common = set.intersection(*(set(n) for n in events.REQUIRED_BY_KIND.values()))
    conds = [F.col(f"{e}.{n}").isNull() for n in sorted(common)]
    for kind, names in events.REQUIRED_BY_KIND.items():
        extra = [F.col(f"{e}.{n}").isNull() for n in names if n not in common]
        if extra:
            conds.append((F.col(f"{e}.kind") == kind) & _any(extra))
    return _any(conds)


def _invalid_pairs(e: str) -> list[tuple[Column, str]]:
    pairs: list[tuple[Column, str]] = [
        (F.col(f"{e}.{CORRUPT}").isNotNull(), "a field has the wrong JSON type"),
        (F.col("ts").isNull(), "event_time is not an ISO 8601 timestamp"),
    ]
    for f in events.FIELDS:
        c = F.col(f"{e}.{f.name}")
        if f.enum and f.name != "kind":
            pairs.append((c.isNotNull() & ~c.isin(*f.enum), f"{f.name} not one of {list(f.enum)}"))
        if f.minimum is not None and f.name != "schema":
            pairs.append((c < F.lit(f.minimum), f"{f.name} below {f.minimum:g}"))
    return pairs


class Decoder:
    """Raw records -> one row each with the event's fields, ``ts`` (event time), ``reason`` and
    ``detail`` (null when valid) and the source coordinates kept for the dead-letter topic.
    ``max_age_s``/``max_future_s`` bound event_time against processing time (None: no bound).

    The columns are built once and applied to every micro-batch: each PySpark ``Column`` call is
    a round trip to the JVM, and building these a thousand calls anew took about a second per
    batch."""

    def __init__(self, max_age_s: float | None = 86400.0, max_future_s: float | None = 300.0):
        e = "e"
        value = F.col("value").cast("string")
        self._parse = [
            F.col("value").cast("binary").alias("raw"),
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.col("timestamp").alias("kafka_timestamp"),
            F.col(_NOW),
            F.from_json(value, _schema(), {"columnNameOfCorruptRecord": CORRUPT}).alias(e),
        ]
        self._ts = F.expr(f"try_to_timestamp({e}.event_time)")
        # Only rejected rows pay for the second parse that tells bad JSON from bad types.
        not_json = F.col(e).isNull() | (
            F.col(f"{e}.{CORRUPT}").isNotNull()
            & (
                F.expr("try_parse_json(CAST(raw AS STRING))").isNull()
                | ~F.ltrim(F.col("raw").cast("string")).startswith("{")
            )
        )
        now = F.col(_NOW)
        too_old = (
            F.col("ts") < now - F.expr(f"make_dt_interval(0, 0, 0, {float(max_age_s)})")
            if max_age_s is not None
            else F.lit(False)
        )
        too_new = (
            F.col("ts")
            > now + F.expr(f"make_dt_interval(0, 0, 0, {float(max_future_s) + NOW_STEP_S})")
            if max_future_s is not None
            else F.lit(False)
        )
        kind = F.col(f"{e}.kind")
        schema = F.col(f"{e}.schema")
        bad_schema = schema.isNull() | (schema != 1)
        bad_kind = kind.isNull() | ~kind.isin(*events.KINDS)
        missing = _missing(e)
        invalid_pairs = _invalid_pairs(e)
        invalid = _first(invalid_pairs)
        # The first reason that applies, in the order of streaming.schema.status.DEADLETTER_REASONS.
        reason = (
            F.when(not_json, "malformed_json")
            .when(bad_schema, "unsupported_schema")
            .when(bad_kind, "unknown_kind")
            .when(_any_missing(e), "missing_field")
            .when(_any([cond for cond, _ in invalid_pairs]), "invalid_value")
            .when(too_old | too_new, "time_out_of_range")
        )
        detail = (
            F.when(not_json, "not a JSON object")
            .when(
                bad_schema,
                F.concat(F.lit("schema "), F.coalesce(schema.cast("string"), F.lit("null"))),
            )
            .when(bad_kind, F.concat(F.lit("kind "), F.coalesce(kind, F.lit("null"))))
            .when(missing.isNotNull(), missing)
            .when(invalid.isNotNull(), invalid)
            .when(too_old, "event_time older than the allowed age")
            .when(too_new, "event_time in the future")
        )
        self._out = [
            *[F.col(f"{e}.{f.name}").alias(f.name) for f in events.FIELDS],
            F.col("ts"),
            reason.alias("reason"),
            detail.alias("detail"),
            *[F.col(c) for c in ("raw", "topic", "partition", "offset", "kafka_timestamp")],
        ]

    def __call__(self, raw: DataFrame, now: float | None = None) -> DataFrame:
        """``now`` (epoch s) if given, so that several actions on one batch agree, else the
        query's current time. Either is rounded down to the minute (bounds get up to a minute
        of slack): Spark inlines a timestamp literal into its generated code, so an exact time
        made every batch compile anew (about 0.25 s each)."""
        if now is None:
            now_col = F.date_trunc("minute", F.current_timestamp())
        else:
            now_col = F.lit(math.floor(now / NOW_STEP_S) * NOW_STEP_S).cast("timestamp")
        return (
            raw.withColumn(_NOW, now_col)
            .select(*self._parse)
            .withColumn("ts", self._ts)
            .select(*self._out)
        )


def dead_letters(decoded: DataFrame) -> DataFrame:
    """Rejected records as Kafka ``key``/``value`` (docs/topics.md, schema 1) plus ``reason``."""
    value = F.to_json(
        F.struct(
            F.lit(1).alias("schema"),
            F.col("reason"),
            F.col("detail"),
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.date_format("kafka_timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias(
                "kafka_timestamp"
            ),
            F.base64("raw").alias("raw"),
            F.date_format(F.current_timestamp(), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias(
                "rejected_at"
            ),
        ),
        {"ignoreNullFields": "false"},
    )
    key = F.concat_ws(":", F.col("partition").cast("string"), F.col("offset").cast("string"))
    rejected = decoded.where(F.col("reason").isNotNull())
    return rejected.select(key.alias("key"), value.alias("value"), "reason")
