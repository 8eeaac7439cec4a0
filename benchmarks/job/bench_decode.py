"""Decoder throughput: Spark's plain ``from_json`` vs the job's strict decoder, same session.

Reads N agent-shaped events (the bench_job.py event pool, many hosts) from a JSON-lines file
cached in memory, then times, best of ``--repeat``, a group-by-reason count through each:

- ``from_json``: ``from_json(value, spark_schema())`` grouped by kind (no validation at all);
- ``decoder``: ``parse.Decoder`` (fast-path checks, ``validate`` UDF for the rest), grouped
  by reason, as the job's aggregation consumes it.

    .venv/bin/python benchmarks/job/bench_decode.py --events 1000000
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_job import event_pool  # noqa: E402

from streaming.job import parse  # noqa: E402
from streaming.schema import events  # noqa: E402
from streaming.stack.spark import local_session  # noqa: E402


def write_events(path: Path, n: int) -> None:
    pool = event_pool()
    now = time.time()
    with open(path, "w") as f:
        for i in range(n):
            e = dict(pool[i % len(pool)])
            e["host"] = f"host-{i % 5000}"
            t = now - random.random() * 1800
            e["event_time"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".000Z"
            f.write(json.dumps(e, separators=(",", ":")) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        write_events(path, args.events)
        spark = local_session("connmon-bench-decode", master="local[2]")
        raw = (
            spark.read.text(str(path))
            .select(
                F.col("value").cast("binary").alias("value"),
                F.lit("t").alias("topic"),
                F.lit(0).alias("partition"),
                F.lit(0).cast("long").alias("offset"),
                F.current_timestamp().alias("timestamp"),
            )
            .repartition(2)
            .cache()
        )
        raw.count()
        decoder = parse.Decoder(86400.0, 300.0)
        plain = F.from_json(F.col("value").cast("string"), events.spark_schema()).alias("e")
        runs = {
            "from_json": lambda: raw.select(plain).groupBy("e.kind").count().collect(),
            "decoder": lambda: decoder(raw, now=time.time()).groupBy("reason").count().collect(),
        }
        best: dict[str, float] = {}
        for name, fn in runs.items():
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            best[name] = min(times)
        rates = {k: round(args.events / v) for k, v in best.items()}
        print(
            json.dumps(
                {
                    "machine": f"{platform.system()} {platform.release()}, 2 cores",
                    "events": args.events,
                    "events_per_s": rates,
                    "decoder_to_from_json": round(rates["decoder"] / rates["from_json"], 3),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
