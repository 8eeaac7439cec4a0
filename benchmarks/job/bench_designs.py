"""Benchmark: the costs that decide the shape of the job's stateful core, each measured alone on
``local[2]`` with Spark's built-in ``rate-micro-batch`` source (no Kafka), steady-state batch
times over the second half of ``--batches`` batches.

    .venv/bin/python benchmarks/job/bench_designs.py keys --keys 20000
    .venv/bin/python benchmarks/job/bench_designs.py events --rows 500000
    .venv/bin/python benchmarks/job/bench_designs.py state --buckets 64 --rows 1000

- ``keys``: Python ``transformWithState`` with one key per series and one row per key per
  batch, as a key per series would be: the Row-based processor doing (a) one ``ValueState``
  update, (b) a get and an update, (c) a get, an update and an event-time timer moved; and the
  pandas processor doing (b). Reports the batch time per key.
- ``events``: a batch's events aggregated per series by Spark SQL (the ingest query's way) or
  moved into a pandas ``transformWithState`` on bucket keys and aggregated there with pandas (a
  single query's way). Reports events/s of each and the ratio.
- ``state``: a bucket's state of ``--rows`` rows, read and written back every batch, as typed
  ``ListState`` rows or as one zstd-compressed JSON value in a ``ValueState`` (the job's way).
  Reports the processor's time per row.

Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from streaming.stack.spark import local_session  # noqa: E402

STATE_STORE = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


def machine() -> str:
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} cores"


def rate_source(spark: Any, rows_per_batch: int) -> Any:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .option("advanceMillisPerBatch", 5000)
        .load()
    )


def steady_batch_s(df: Any, batches: int, sink: Callable[[Any, int], None] | None = None) -> float:
    """Run ``df`` to ``batches`` batches; the mean trigger time of the second half."""
    writer = df.writeStream.outputMode("update").foreachBatch(sink or (lambda d, _b: d.count()))
    q = (
        writer.option("checkpointLocation", tempfile.mkdtemp(prefix="bench-designs-"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while len(q.recentProgress) < batches:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception())[:2000])
            time.sleep(0.5)
    finally:
        q.stop()
    times = [p["durationMs"]["triggerExecution"] / 1000 for p in q.recentProgress][batches // 2 :]
    return sum(times) / len(times)


# ---- keys ---------------------------------------------------------------------------------
def keys(spark: Any, n: int, batches: int) -> None:
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor

    def processor(variant: str) -> Any:
        class P(StatefulProcessor):
            def init(self, handle: Any) -> None:
                self.handle = handle
                self.st = handle.getValueState("s", "n long, last long")

            def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
                last = max(int(r.ts.timestamp() * 1000) for r in rows)
                old = None if variant == "update" else self.st.get()
                count = 1 + (old[0] if old else 0)
                if variant == "timer" and old:
                    self.handle.deleteTimer(old[1] + 600_000)
                self.st.update((count, last))
                if variant == "timer":
                    self.handle.registerTimer(last + 600_000)
                yield Row(series=key[0], n=count)

            def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:  # noqa: N802, N803
                return iter([])

            def close(self) -> None:
                pass

        return P()

    def pandas_processor() -> Any:
        import pandas as pd

        class P(StatefulProcessor):
            def init(self, handle: Any) -> None:
                self.st = handle.getValueState("s", "n long, last long")

            def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
                n = sum(len(pdf) for pdf in rows)
                old = self.st.get()
                self.st.update((n + (old[0] if old else 0), 0))
                yield pd.DataFrame({"series": [key[0]], "n": [n]})

            def close(self) -> None:
                pass

        return P()

    for variant in ("update", "get_update", "timer", "pandas_get_update"):
        src = rate_source(spark, n)
        df = src.select(
            (F.col("value") % n).cast("string").alias("series"), F.col("timestamp").alias("ts")
        )
        g = df.withWatermark("ts", "10 minutes").groupBy("series")
        mode = "EventTime" if variant == "timer" else "None"
        if variant.startswith("pandas"):
            out = g.transformWithStateInPandas(
                pandas_processor(), "series string, n long", "Update", mode
            )
        else:
            out = g.transformWithState(processor(variant), "series string, n long", "Update", mode)
        s = steady_batch_s(out, batches)
        line = {"bench": "keys", "variant": variant, "keys": n, "batch_s": round(s, 3)}
        line |= {"us_per_key": round(s / n * 1e6, 1), "machine": machine()}
        print(json.dumps(line), flush=True)


# ---- events -------------------------------------------------------------------------------
def events(spark: Any, rows: int, buckets: int, series: int, batches: int) -> None:
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor

    v = F.col("value")
    cols = [(v % series).cast("string").alias("host"), F.lit("app").alias("app"),
            F.lit("client").alias("side"), F.col("timestamp").alias("ts")]  # fmt: skip
    cols += [((v * (i + 3)) % 97).cast("double").alias(f"d{i}") for i in range(16)]
    cols += [((v * (i + 5)) % 13).alias(f"l{i}") for i in range(6)]
    sums, maxes = (
        [f"d{i}" for i in range(16)][:11],
        [f"d{i}" for i in range(11, 16)] + [f"l{i}" for i in range(6)],
    )

    class Agg(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.st = handle.getValueState("s", "n long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:  # noqa: N802, N803
            pdf = pd.concat(list(rows), ignore_index=True)
            g = pdf.groupby(["host", "app", "side"], sort=False)
            agg = g[sums].sum().join(g[maxes].max())
            old = self.st.get()
            self.st.update(((old[0] if old else 0) + len(pdf),))
            yield pd.DataFrame({"k": [str(key[0])], "groups": [len(agg)]})

        def close(self) -> None:
            pass

    aggs = [F.sum(c) for c in sums] + [F.max(c) for c in maxes]
    sql = steady_batch_s(
        rate_source(spark, rows).select(*cols),
        batches,
        lambda d, _b: d.groupBy("host", "app", "side").agg(*aggs).collect(),
    )
    tws = steady_batch_s(
        rate_source(spark, rows)
        .select(*cols)
        .withColumn("bucket", F.pmod(F.xxhash64("host"), F.lit(buckets)))
        .withWatermark("ts", "10 minutes")
        .groupBy("bucket")
        .transformWithStateInPandas(Agg(), "k string, groups long", "Update", "None"),
        batches,
    )
    print(json.dumps({"bench": "events", "rows_per_batch": rows, "buckets": buckets,
                      "series": series, "sql_events_per_s": round(rows / sql),
                      "stateful_operator_events_per_s": round(rows / tws),
                      "ratio": round(sql / tws, 2), "machine": machine()}), flush=True)  # fmt: skip


# ---- state --------------------------------------------------------------------------------
def state(spark: Any, buckets: int, rows: int, batches: int) -> None:
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor

    ncol = 45
    schema = ", ".join(
        [f"s{i} string" for i in range(5)] + [f"d{i} double" for i in range(ncol - 5)]
    )

    def fresh(b: int) -> list[tuple]:
        names = lambda j: [f"host-{b}-{j}", "app", "client", "c1", "1"]  # noqa: E731
        return [tuple(names(j) + [float(j + i) for i in range(ncol - 5)]) for j in range(rows)]

    def processor(variant: str) -> Any:
        class P(StatefulProcessor):
            def init(self, handle: Any) -> None:
                if variant == "list":
                    self.st = handle.getListState("w", schema)
                else:
                    self.st = handle.getValueState("w", "blob binary")

            def handleInputRows(self, key: Any, it: Any, timerValues: Any) -> Any:  # noqa: N802, N803
                for _ in it:
                    pass
                t0 = time.perf_counter()
                if variant == "list":
                    cur = list(self.st.get()) or fresh(key[0])
                    self.st.put([r[:5] + tuple(x + 1 for x in r[5:]) for r in cur])
                else:
                    import orjson

                    from streaming.job.buckets import compress, decompress

                    v = self.st.get()
                    cur = (
                        orjson.loads(decompress(bytes(v[0])))
                        if v
                        else [list(r) for r in fresh(key[0])]
                    )
                    cur = [r[:5] + [x + 1 for x in r[5:]] for r in cur]
                    self.st.update((compress(orjson.dumps(cur)),))
                yield Row(bucket=key[0], ms=(time.perf_counter() - t0) * 1000)

            def close(self) -> None:
                pass

        return P()

    for variant in ("value", "list"):
        spent: list[float] = []

        def sink(d: Any, _b: int, spent: list[float] = spent) -> None:
            ms = [r.ms for r in d.collect()]
            spent.append(sum(ms) / max(1, len(ms)))

        out = (
            rate_source(spark, buckets)
            .select((F.col("value") % buckets).cast("int").alias("bucket"))
            .groupBy("bucket")
            .transformWithState(processor(variant), "bucket int, ms double", "Update", "None")
        )
        s = steady_batch_s(out, batches, sink)
        ms = sum(spent[len(spent) // 2 :]) / len(spent[len(spent) // 2 :])
        print(json.dumps({"bench": "state", "variant": variant, "buckets": buckets,
                          "rows_per_bucket": rows, "batch_s": round(s, 3),
                          "us_per_row": round(ms / rows * 1000, 1), "machine": machine()}),
              flush=True)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("keys", "events", "state"))
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--rows", type=int, default=None, help="events per batch / rows per bucket")
    ap.add_argument("--buckets", type=int, default=None)
    ap.add_argument("--series", type=int, default=50000)
    ap.add_argument("--batches", type=int, default=8)
    args = ap.parse_args()
    conf = {**STATE_STORE, "spark.driver.memory": "2g"}
    spark = local_session("bench-designs", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    if args.what == "keys":
        keys(spark, args.keys, args.batches)
    elif args.what == "events":
        events(spark, args.rows or 500_000, args.buckets or 16, args.series, args.batches)
    else:
        state(spark, args.buckets or 64, args.rows or 1000, args.batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
