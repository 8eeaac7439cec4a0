"""Decoder throughput: Spark's plain ``from_json`` vs the job's strict decoder, same session.

Reads N agent-shaped events (the bench_job.py event pool, many hosts) from a JSON-lines file
cached in memory, then times, best of ``--repeat`` (the runs take turns, so a change in the
machine's load falls on all of them alike), a group-by count through each:

- ``from_json``: ``from_json(value, spark_schema())`` grouped by kind (no validation at all);
- ``decoder``: ``parse.Decoder``, the job's pass over every record (built-in checks only; a
  record they cannot vouch for comes out as ``unverified``, for ``validate`` in the job's second
  read of the batch, which a healthy fleet never needs), grouped by reason, as the job's
  aggregation consumes it;
- ``decoder@<rev>`` (``--baseline``, default ``54fa557``: the lenient decoder with reasons in
  SQL only): ``streaming/job/parse.py`` as of that commit, read with ``git show``, same method.

    .venv/bin/python benchmarks/job/bench_decode.py --events 1000000
    .venv/bin/python benchmarks/job/bench_decode.py --events 1000000 --baseline ''  # no baseline
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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


def decoder_at(rev: str) -> types.ModuleType:
    """``streaming/job/parse.py`` as of ``rev``, as a module of its own (it imports only
    ``streaming.schema.events`` and PySpark, which still provide what it uses)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:streaming/job/parse.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"parse_at_{rev}")
    exec(compile(source, f"{rev}:streaming/job/parse.py", "exec"), module.__dict__)
    return module


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--baseline", default="54fa557", help="git revision of an older decoder ('': none)"
    )
    args = ap.parse_args()
    from pyspark.sql import functions as F

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        write_events(path, args.events)
        # The cached events and three decoders' plans: more than the job's 1 GiB on Spark 4.2.
        spark = local_session(
            "connmon-bench-decode", master="local[2]", conf={"spark.driver.memory": "3g"}
        )
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
        plain = F.from_json(F.col("value").cast("string"), events.spark_schema()).alias("e")
        decoders = {"decoder": parse.Decoder(86400.0, 300.0)}
        if args.baseline:
            decoders[f"decoder@{args.baseline}"] = decoder_at(args.baseline).Decoder(86400.0, 300.0)

        def grouped(decoder):
            return lambda: decoder(raw, now=time.time()).groupBy("reason").count().collect()

        runs = {
            "from_json": lambda: raw.select(plain).groupBy("e.kind").count().collect(),
            **{name: grouped(d) for name, d in decoders.items()},
        }
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
        rates = {k: round(args.events / v) for k, v in best.items()}
        ratios = {f"{k}_to_from_json": round(v / rates["from_json"], 3) for k, v in rates.items()}
        if args.baseline:
            old = rates[f"decoder@{args.baseline}"]
            ratios[f"decoder_to_decoder@{args.baseline}"] = round(rates["decoder"] / old, 3)
        ratios.pop("from_json_to_from_json")
        print(
            json.dumps(
                {
                    "machine": f"{platform.system()} {platform.release()}, 2 cores",
                    "events": args.events,
                    "events_per_s": rates,
                    "ratios": ratios,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
