"""Decode and validate raw event records in Spark, exactly as ``streaming.schema.validate``.

Input frames have Kafka's source shape (``value`` binary or string, ``topic``, ``partition``,
``offset``, ``timestamp``); the file source is brought to the same shape by ``pipeline``.

Two steps, one verdict. Spark's ``from_json`` is fast but more lenient than the contract (it
reads ``12345`` into a string field, ignores what follows the first object, turns a lone
surrogate escape into ``?``). So every record gets cheap built-in checks (``Decoder``), and a
record is accepted there only when they prove ``validate`` would accept it with the same values.
Every other record is *unverified* (in a healthy fleet: almost none) and is judged later by
``validate`` itself, in a Python UDF that only those records reach (``Decoder.verify``: the
ingest query reads a batch a second time only when it holds such records). A property test
checks both steps together agree with ``validate`` on every record.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streaming.job import worker
from streaming.schema import events, validate
from streaming.schema.events import MAX_EVENT_BYTES, MAX_STRING_CHARS
from streaming.schema.status import DEAD_LETTER_RAW_BYTES, INTERNAL_ERROR, SKIPPED, error_detail

CORRUPT = "_corrupt"
UNVERIFIED = "_unverified"  # a reason until ``Decoder.verify`` gives the real one, or none
SKIPPED_DETAIL = "skipped as the job was told (--skip-offsets)"
RAW_COLUMNS = ("value", "topic", "partition", "offset", "timestamp")  # of the Kafka source
NOW_STEP_S = validate.NOW_STEP_S
_NOW = "_connmon_now"
_JSON_OPTIONS = {
    "columnNameOfCorruptRecord": CORRUPT,
    "mode": "PERMISSIVE",
    "allowNonNumericNumbers": "false",
    "allowSingleQuotes": "false",
    "allowUnquotedFieldNames": "false",
    "allowComments": "false",
    "allowNumericLeadingZeros": "false",
    "allowBackslashEscapingAnyCharacter": "false",
    "allowUnquotedControlChars": "false",
}


def _slow_schema(event: T.StructType) -> T.StructType:
    """The slow path's verdict, which the UDF returns as one JSON string (a single column is
    the cheapest to carry back from Python; it is read only for the rows that went there)."""
    return T.StructType(
        [
            T.StructField("reason", T.StringType()),
            T.StructField("detail", T.StringType()),
            T.StructField("ts_us", T.LongType()),
            T.StructField("event", event),
        ]
    )


def _all(conds: list[Column]) -> Column:
    out = conds[0]
    for c in conds[1:]:
        out = out & c
    return out


# A free-text string field's value as ``from_json`` writes a JSON number, boolean or array it
# finds there instead of a string, between the separators of ``_SEP``-joined fields (enum
# fields and ``event_time`` need no such check: their own checks reject any such text). A JSON
# number is matched exactly (an IP address is not one); a cast would throw and catch an
# exception for every string that is not a number.
_SEP = "\u0001"
_NOT_A_STRING = (  # non-capturing groups: a matcher allocates room for every capturing one
    f"{_SEP}(?:true|false|-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|\\[[^{_SEP}]*\\]"
    f'|"-?Infinity")(?:{_SEP}|$)'  # a number beyond a double's range is written "Infinity"
)
# The agent's form of event_time, which ``validate.EVENT_TIME`` allows among others (they take
# the slow path). A LIKE pattern is matched in one anchored pass; ``rlike`` searches from every
# position. With these separators in place and Spark's cast succeeding, the year, month, day,
# hours, minutes and seconds are digits (a year with a sign or a space has fewer than the four
# Spark requires); the fraction is unless it ends in blanks (Spark reads ``.12 Z`` as zone
# ``Z``), so its last character is checked too.
_EVENT_TIME_LIKE = "____-__-__T__:__:__.___Z"


def _fields(e: str, *types: str, free: bool = False) -> list[Column]:
    return [
        F.col(f"{e}.{f.name}")
        for f in events.FIELDS
        if f.type in types and not (free and (f.enum or f.type == "timestamp"))
    ]


def _may_be_a_token(c: Column) -> Column:
    """Whether a string could be the text of a JSON number (it starts with ``-`` or a digit
    and has no ``:``), array (``[``), boolean or "Infinity" (``"``): only these are matched
    against ``_NOT_A_STRING`` (an address with a port is not)."""
    return ((c < ":") & ~c.contains(":")) | ((c >= "[") & (c < "\\")) | c.isin("true", "false")


def _text_accepts() -> Column:
    """True only for text that is valid UTF-8, has no ``\\u`` escape (one may hide a lone
    surrogate: ``validate`` decodes it) and is one object with nothing around it: its first
    and last bytes are its braces and no other byte is a ``}`` (``from_json`` ignores what
    follows the first object and writes an object it finds in a string field as its text; a
    ``{`` with no ``}`` of its own leaves the object unclosed, which ``from_json`` rejects).
    Byte-level ``contains`` and ``startswith`` only: each is one tight pass over the bytes
    (counting characters, ``translate`` or a regex decode the text first)."""
    text = F.col("_text")
    inner = F.expr("CAST(substring(raw, 2, octet_length(raw) - 2) AS STRING)")
    return (
        F.expr("is_valid_utf8(_text)")
        & text.startswith("{")
        & text.endswith("}")
        & ~inner.contains("}")
        & ~text.contains("\\u")
    )


def _fast_accepts(e: str) -> Column:
    """True only for records ``validate`` accepts with the values of ``from_json`` in ``e``
    (the event-time bounds aside). False sends a record to the slow path, not to the dead
    letters: these checks may be stricter than the contract, never more lenient. Each check
    covers every field at once, so the generated code stays small enough for Spark to compile
    the whole stage (a check per field made it fall back to far slower interpreted code)."""
    strings = _fields(e, "string", "timestamp")
    free = _fields(e, "string", free=True)
    doubles = _fields(e, "double")
    conds = [
        F.col(e).isNotNull(),
        F.col(f"{e}.{CORRUPT}").isNull(),
        F.col(f"{e}.schema") == events.SCHEMA_VERSION,
        F.col(f"{e}.kind").isin(*events.KINDS),
        F.col(f"{e}.event_time").like(_EVENT_TIME_LIKE),
        F.substring(f"{e}.event_time", 23, 1).between("0", "9"),
        F.unix_micros(F.col("_ts")) >= 0,  # from 1970 (null: Spark cannot read it)
        ~F.concat_ws(_SEP, F.lit(""), *[F.when(_may_be_a_token(c), c) for c in free]).rlike(
            _NOT_A_STRING
        ),
        # Bytes, not characters: counting characters scans each string. A string over the
        # limit in bytes but not in characters (non-ASCII) goes to the slow path.
        F.coalesce(F.greatest(*[F.octet_length(c) for c in strings]), F.lit(0)) <= MAX_STRING_CHARS,
        # greatest() skips nulls and orders NaN above infinity
        F.coalesce(F.greatest(*[F.abs(c) for c in doubles]), F.lit(0.0)) < float("inf"),
    ]
    minimums = {f.minimum for f in events.FIELDS if f.minimum is not None and f.name != "schema"}
    for low in sorted(minimums):
        with_min = [
            F.col(f"{e}.{f.name}").cast("double")
            for f in events.FIELDS
            if f.minimum == low and f.name != "schema"
        ]
        lowest = F.least(*with_min) if len(with_min) > 1 else with_min[0]
        conds.append(F.coalesce(lowest, F.lit(low)) >= low)
    for f in events.FIELDS:
        if f.enum and f.name != "kind":
            c = F.col(f"{e}.{f.name}")
            conds.append(c.isNull() | c.isin(*f.enum))
    kind = F.col(f"{e}.kind")
    common = set.intersection(*(set(n) for n in events.REQUIRED_BY_KIND.values()))
    conds += [F.col(f"{e}.{n}").isNotNull() for n in sorted(common)]
    for k, names in events.REQUIRED_BY_KIND.items():
        extra = [F.col(f"{e}.{n}").isNotNull() for n in names if n not in common]
        if extra:
            conds.append((kind != k) | _all(extra))
    return _all(conds)


def _slow_path(max_age_s: float | None, max_future_s: float | None) -> Any:
    """``validate`` as a pandas UDF: raw bytes (null: not needed) and now (epoch seconds) ->
    its verdict as JSON (``_slow_schema``), null where the raw bytes are null."""
    import numpy as np
    import pandas as pd

    def run(raw: pd.Series, now: pd.Series) -> pd.Series:
        worker.prepare()
        out = np.full(len(raw), None, dtype=object)
        for i in np.flatnonzero(raw.notna().to_numpy()):
            try:
                v = validate.validate(raw.iat[i], float(now.iat[i]), max_age_s, max_future_s)
                verdict = {"reason": v.reason, "detail": v.detail, "ts_us": v.ts_us}
                out[i] = json.dumps({**verdict, "event": v.event})
            except Exception as exc:  # a bug must not stop the job: the record is set aside
                out[i] = json.dumps({"reason": INTERNAL_ERROR, "detail": error_detail(exc)})
        return pd.Series(out, index=raw.index)

    # Real classes, not the strings this module's annotations become: Spark reads them.
    run.__annotations__ = {"raw": pd.Series, "now": pd.Series, "return": pd.Series}
    return F.pandas_udf(run, T.StringType())  # type: ignore[call-overload]


class Decoder:
    """Raw records -> one row each with the event's fields, ``ts`` (event time), ``reason`` and
    ``detail`` (null when valid; ``UNVERIFIED`` until ``verify``) and the source coordinates
    kept for the dead-letter topic. ``max_age_s``/``max_future_s`` bound event_time against
    processing time (None: no bound).

    The columns are built once and applied to every micro-batch: each PySpark ``Column`` call is
    a round trip to the JVM, and building these a thousand calls anew took about a second per
    batch."""

    def __init__(
        self,
        max_age_s: float | None = 86400.0,
        max_future_s: float | None = 300.0,
        skip: tuple[tuple[int, int, int], ...] = (),
    ):
        """``skip``: (partition, first offset, last offset) of records to set aside unread."""
        e = "e"
        self._parse = [
            F.col("value").cast("binary").alias("raw"),
            *[F.col(c) for c in ("topic", "partition", "offset")],
            F.col("timestamp").alias("kafka_timestamp"),
            F.col(_NOW),
            F.col("value").cast("string").alias("_text"),
            (F.octet_length(F.col("value").cast("binary")) > MAX_EVENT_BYTES).alias("_too_large"),
        ]
        schema = events.spark_schema().add(CORRUPT, T.StringType())
        self._schema = schema
        self._from_json = F.from_json(
            F.when(~F.col("_too_large"), F.col("_text")), schema, _JSON_OPTIONS
        )
        self._ts = F.expr(f"try_to_timestamp({e}.event_time)").alias("_ts")
        # The text checks first: a record that fails them is not parsed twice over.
        self._text_ok = (~F.col("_too_large") & _text_accepts()).alias("_text_ok")
        # Null (a check on a missing value) is false: unverified, never accepted unchecked.
        fast_accepts = F.col("_text_ok") & _fast_accepts(e)
        self._fast = F.coalesce(fast_accepts, F.lit(False)).alias("_fast")
        self._slow = _slow_path(max_age_s, max_future_s)
        fast = F.col("_fast")
        ts = F.col("_ts")
        now = F.col(_NOW)
        too_old = (
            ts < now - F.expr(f"make_dt_interval(0, 0, 0, {float(max_age_s)})")
            if max_age_s is not None
            else F.lit(False)
        )
        too_new = (
            ts > now + F.expr(f"make_dt_interval(0, 0, 0, {float(max_future_s) + NOW_STEP_S})")
            if max_future_s is not None
            else F.lit(False)
        )
        size = F.octet_length("raw")
        skipped = F.lit(False)
        for partition, first, last in skip:
            skipped = skipped | (
                (F.col("partition") == partition) & F.col("offset").between(first, last)
            )
        skipped = F.coalesce(skipped, F.lit(False))
        self._pick = [
            F.when(fast & ~skipped, F.col(e)).alias(e),
            F.when(fast & ~skipped, ts).alias("ts"),
            F.when(skipped, F.lit(SKIPPED))
            .when(F.col("raw").isNull(), F.lit("null_value"))
            .when(size == 0, F.lit("empty_value"))
            .when(F.col("_too_large"), F.lit("too_large"))
            .when(~fast, F.lit(UNVERIFIED))
            .when(too_old | too_new, F.lit("time_out_of_range"))
            .alias("reason"),
            F.when(skipped, F.lit(SKIPPED_DETAIL))
            .when(F.col("raw").isNull(), F.lit(validate.NULL_VALUE))
            .when(size == 0, F.lit(validate.EMPTY_VALUE))
            .when(F.col("_too_large"), F.format_string(validate.TOO_LARGE, size))
            .when(~fast, F.lit(None))
            .when(too_old, F.lit(validate.TOO_OLD))
            .when(too_new, F.lit(validate.TOO_NEW))
            .alias("detail"),
            *[F.col(c) for c in ("raw", "topic", "partition", "offset", "kafka_timestamp")],
        ]
        self._out = [
            *[F.col(f"{e}.{f.name}").alias(f.name) for f in events.FIELDS],
            *[F.col(c) for c in ("ts", "reason", "detail")],
            *[F.col(c) for c in ("raw", "topic", "partition", "offset", "kafka_timestamp")],
        ]

    def __call__(self, raw: DataFrame, now: float | None = None) -> DataFrame:
        """``now`` (epoch s) if given, so that several actions on one batch agree, else the
        query's current time. Either is rounded down to the minute (bounds get up to a minute
        of slack): Spark inlines a timestamp literal into its generated code, so an exact time
        made every batch compile anew (about 0.25 s each)."""
        return (
            raw.withColumn(_NOW, _now_column(now))
            .select(*self._parse)
            # A generator's output is a barrier: the optimizer cannot copy ``from_json`` into
            # each of the hundred-odd checks that read ``e`` (a pushed-down filter did, and
            # parsed every record once per check).
            .withColumn("e", F.explode(F.array(self._from_json)))
            .withColumn("_ts", self._ts)
            .withColumn("_text_ok", self._text_ok)
            .withColumn("_fast", self._fast)
            .select(*self._pick)
            .select(*self._out)
        )

    def verify(self, decoded: DataFrame, now: float | None = None) -> DataFrame:
        """``decoded`` (this decoder's output) with each ``UNVERIFIED`` record judged by
        ``validate``: its reason and detail, or its event and event time. Only the records
        given here reach Python: filter ``decoded`` first."""
        unverified = F.col("reason") == F.lit(UNVERIFIED)
        now_s = F.unix_micros(_now_column(now)) / F.lit(1e6)
        verdict = F.from_json(
            self._slow(F.when(unverified, F.col("raw")), now_s), _slow_schema(self._schema)
        )
        v = decoded.withColumn("_v", F.when(unverified, verdict))

        def pick(name: str, judged: Column) -> Column:
            return F.when(unverified, judged).otherwise(F.col(name)).alias(name)

        return v.select(
            *[pick(f.name, F.col(f"_v.event.{f.name}")) for f in events.FIELDS],
            pick("ts", F.timestamp_micros(F.col("_v.ts_us"))),
            pick("reason", F.col("_v.reason")),
            pick("detail", F.col("_v.detail")),
            *[F.col(c) for c in ("raw", "topic", "partition", "offset", "kafka_timestamp")],
        )

    def judge(self, raw: DataFrame, now: float | None = None) -> DataFrame:
        """Both steps on every record: the verdict the ingest query reaches for each (it runs
        ``verify`` only on the records that need it)."""
        return self.verify(self(raw, now), now)


def _now_column(now: float | None) -> Column:
    """The processing time the event-time bounds are checked against, in whole minutes."""
    if now is None:
        return F.date_trunc("minute", F.current_timestamp())
    return F.lit(math.floor(now / NOW_STEP_S) * NOW_STEP_S).cast("timestamp")


def dead_letters(decoded: DataFrame) -> DataFrame:
    """Rejected records as Kafka ``key``/``value`` (docs/topics.md, schema 1) plus ``reason``.
    The record itself is kept as its first ``DEAD_LETTER_RAW_BYTES`` bytes (base64), with its
    full size and SHA-256, so a dead letter stays small whatever came in."""
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
            F.base64(F.substring("raw", 1, DEAD_LETTER_RAW_BYTES)).alias("raw"),
            F.coalesce(F.octet_length("raw"), F.lit(0)).alias("raw_bytes"),  # 0: a tombstone
            F.sha2("raw", 256).alias("raw_sha256"),
            F.date_format(F.current_timestamp(), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias(
                "rejected_at"
            ),
        ),
        {"ignoreNullFields": "false"},
    )
    key = F.concat_ws(":", F.col("partition").cast("string"), F.col("offset").cast("string"))
    rejected = decoded.where(F.col("reason").isNotNull())
    return rejected.select(key.alias("key"), value.alias("value"), "reason")
