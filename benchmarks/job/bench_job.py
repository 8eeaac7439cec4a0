"""Benchmark: the job's sustained events/s on local[2] against a baseline query (read +
from_json + count) over the same topic in the same run, and detection latency under steady load.

    .venv/bin/python benchmarks/job/bench_job.py --events 2000000 [--floors]

``--floors`` also times the job's own validate, group and aggregate steps alone (see the README).

Starts its own 1-broker KRaft cluster on 127.0.0.1 and stops it at the end. Prints a JSON
summary; figures are written down in benchmarks/job/README.md by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))

from benchkit import (  # noqa: E402
    Prober,
    create_job_topics,
    job_settings,
    percentile,
    start_cluster,
    topic_names,
)

from streaming.job.checkpoint import INGEST_QUERY, STATE_QUERY  # noqa: E402
from streaming.job.pipeline import kafka_source, start_job  # noqa: E402
from streaming.job.settings import JobSettings  # noqa: E402
from streaming.schema.events import spark_schema  # noqa: E402
from streaming.stack.spark import local_session  # noqa: E402


def _generator():
    path = REPO / "tests" / "fixtures" / "events" / "generate.py"
    spec = importlib.util.spec_from_file_location("events_generate", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["events_generate"] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _generator()


def event_pool() -> list[dict[str, Any]]:
    """One agent's worth of realistic events (healthy mostly, a few pathologies), t from 0."""
    pool: list[dict[str, Any]] = []
    for name, dur in (("healthy", 600), ("close_wait_leak", 600), ("duplicate_clients", 400),
                      ("idle_churn", 1200)):  # fmt: skip
        pool += gen.SCENARIOS[name](0.0, duration_s=dur)
    return pool


def produce_load(bootstrap: str, topic: str, n: int, span_s: float) -> float:
    """``n`` events from many hosts, event times spread over the last ``span_s`` seconds."""
    from confluent_kafka import Producer

    pool = event_pool()
    t_end = time.time()
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    hosts = max(1, n // len(pool))
    start = time.perf_counter()
    sent = 0
    for h in range(hosts + 1):
        host = f"bench-{h:05d}"
        for i, ev in enumerate(pool):
            if sent >= n:
                break
            t = t_end - span_s + span_s * (sent / n)
            value = json.dumps({**ev, "host": host, "event_time": gen.iso(t)})
            while True:
                try:
                    p.produce(topic, key=host.encode(), value=value.encode())
                    break
                except BufferError:
                    p.poll(0.1)
            sent += 1
            if i % 1000 == 0:
                p.poll(0)
    p.flush(120)
    return sent / (time.perf_counter() - start)


def sustained(progress: list[dict[str, Any]]) -> float | None:
    """Events/s over the batches after the first (start-up, JIT warm-up) that read any:
    input rows / trigger execution time, from Spark's own progress reports."""
    batches = [p for p in progress if p.get("numInputRows")][1:]
    ms = sum(p["durationMs"]["triggerExecution"] for p in batches)
    return sum(p["numInputRows"] for p in batches) / (ms / 1000) if ms else None


def run_available_now(writer, name: str, work: str) -> tuple[float, float | None]:
    """Start ``writer`` as query ``name`` over what the topic holds and wait for it: wall
    time, sustained events/s."""
    t0 = time.perf_counter()
    q = (
        writer.queryName(name).option("checkpointLocation", f"{work}/{name}")
        .trigger(availableNow=True).start()
    )  # fmt: skip
    q.awaitTermination()
    return time.perf_counter() - t0, sustained(q.recentProgress)


def baseline(
    spark, s: JobSettings, work: str, parsed: bool = False
) -> tuple[float, int, float, float | None]:
    """Read + from_json + count over the whole topic (available-now): events/s, rows, wall
    time, sustained events/s.
    Spark prunes the unused ``from_json`` from ``count()``, so this measures read + count;
    ``parsed`` counts the non-null parsed structs instead, which forces one full parse."""
    from pyspark.sql import functions as F

    df = kafka_source(spark, s).select(
        F.from_json(F.col("value").cast("string"), spark_schema()).alias("e")
    )
    counted = df.groupBy().agg(F.count("e" if parsed else F.lit(1)).alias("count"))
    name = "bench_baseline_parsed" if parsed else "bench_baseline"
    writer = counted.writeStream.outputMode("complete").format("memory")
    wall, rate = run_available_now(writer, name, work)
    n = spark.sql(f"SELECT * FROM {name}").collect()[0][0]
    return n / wall, n, wall, rate


def floor_rate(spark, s: JobSettings, work: str, stage: str) -> tuple[float, float | None]:
    """The job's own first steps alone, through ``foreachBatch`` like the job, available-now:
    ``validate`` decodes and validates every record and counts the valid ones; ``group`` also
    groups them by the job's window and series keys (one count, no statistics) and collects
    the groups: a floor for any design that validates per row with built-in functions and
    aggregates per window and series in Spark. ``aggregate`` is the job's whole Spark part
    (``partial_rows.PartialRows``: every window statistic) and its collect, without the driver.
    Returns wall time, sustained events/s."""
    from pyspark.sql import functions as F

    from streaming.job import parse, partial_rows

    decoder = parse.Decoder(s.max_event_age_s, s.max_event_future_s)
    partials = partial_rows.PartialRows(s.detectors)

    def step(raw, _batch_id: int) -> None:
        df = decoder(raw, now=time.time())
        if stage == "validate":
            df.where(F.col("reason").isNull()).count()
        elif stage == "group":
            df.groupBy(*partials.keys).count().collect()
        else:
            for row in partials(df).collect():
                row.asDict()  # as the job's batch does

    writer = kafka_source(spark, s).writeStream.foreachBatch(step)
    return run_available_now(writer, f"bench_floor_{stage}", work)


def job_rate(spark, s: JobSettings) -> tuple[float, float | None]:
    """The full job (both queries, real sinks): the ingest query available-now, then the
    state query until it has processed every partial row: wall time, sustained events/s of
    the ingest query."""
    t0 = time.perf_counter()
    job = start_job(spark, s, available_now=True)
    by_name = {q.name: q for q in job.queries}
    by_name[INGEST_QUERY].awaitTermination()
    by_name[STATE_QUERY].processAllAvailable()
    wall = time.perf_counter() - t0
    rate = sustained(by_name[INGEST_QUERY].recentProgress)
    job.stop()
    return wall, rate


def latency(spark, s: JobSettings, bootstrap: str, rate: int, probes: int) -> list[float]:
    """Steady background load; probes are CLOSE_WAIT summaries of new series stamped now
    (``benchkit.Prober``). Latency = time the finding is consumed - the probe's event time."""
    from confluent_kafka import Producer

    pool = [json.dumps(e) for e in event_pool()[:2000]]
    stop = threading.Event()

    def background() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        i = 0
        while not stop.is_set():
            t0 = time.time()
            for _ in range(rate // 10):
                ev = json.loads(pool[i % len(pool)])
                ev["event_time"] = gen.iso(time.time())
                ev["host"] = f"steady-{i % 200}"
                p.produce(s.events_topic, value=json.dumps(ev).encode())
                i += 1
            p.poll(0)
            time.sleep(max(0.0, 0.1 - (time.time() - t0)))
        p.flush(10)

    job = start_job(spark, s)
    bg = threading.Thread(target=background, daemon=True)
    bg.start()
    prober = Prober(bootstrap, s.events_topic, s.findings_topic)
    try:
        time.sleep(20)  # let the job warm up under load
        for k in range(probes):
            prober.send(f"probe-{k}")
            prober.poll(3)
        prober.poll(60, until_done=True)
    finally:
        stop.set()
        bg.join(10)
        prober.close()
        job.stop()
    return list(prober.latencies.values())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=500_000)
    ap.add_argument("--latency-rate", type=int, default=5000, help="background events/s")
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument(
        "--floors",
        action="store_true",
        help="also time the job's validate, group and aggregate steps alone",
    )
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("streaming.job.ingest").setLevel(logging.INFO)

    cluster = start_cluster("connmon-bench")
    work = tempfile.mkdtemp(prefix="connmon-bench-")
    result: dict[str, Any] = {
        "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cores",
        "events": args.events,
    }
    try:
        b = cluster.bootstrap_servers
        names = topic_names("bench", partials=True)  # created up front: the state query reads it
        create_job_topics(b, names, args.partitions)
        result["produce_events_per_s"] = round(
            produce_load(b, names["events"], args.events, span_s=1800)
        )
        spark = local_session(app_name="connmon-bench", master="local[2]")
        s = job_settings(
            b, names, starting_offsets="earliest", checkpoint=f"{work}/job",
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )  # fmt: skip
        rate_b, n_b, wall_b, sus_b = baseline(spark, s, work)
        rate_p, _, wall_p, sus_p = baseline(spark, s, work, parsed=True)
        if args.floors:
            for stage in ("validate", "group", "aggregate"):
                wall_f, sus_f = floor_rate(spark, s, work, stage)
                result[f"floor_{stage}_events_per_s"] = round(n_b / wall_f)
                result[f"floor_{stage}_to_parsed_baseline"] = round(wall_p / wall_f, 3)
                if sus_f and sus_p:
                    result[f"sustained_floor_{stage}_events_per_s"] = round(sus_f)
                    result[f"sustained_floor_{stage}_to_parsed_baseline"] = round(sus_f / sus_p, 3)
        wall_j, sus_j = job_rate(spark, s)
        result.update(
            baseline_events_per_s=round(rate_b),
            baseline_rows=n_b,
            baseline_wall_s=round(wall_b, 1),
            parsed_baseline_events_per_s=round(rate_p),
            parsed_baseline_wall_s=round(wall_p, 1),
            job_events_per_s=round(n_b / wall_j),
            job_wall_s=round(wall_j, 1),
            ratio_job_to_baseline=round(wall_b / wall_j, 3),
            ratio_job_to_parsed_baseline=round(wall_p / wall_j, 3),
        )
        if sus_b and sus_p and sus_j:
            result.update(
                sustained_baseline_events_per_s=round(sus_b),
                sustained_parsed_baseline_events_per_s=round(sus_p),
                sustained_job_events_per_s=round(sus_j),
                sustained_ratio_job_to_baseline=round(sus_j / sus_b, 3),
                sustained_ratio_job_to_parsed_baseline=round(sus_j / sus_p, 3),
            )
        print(json.dumps(result), flush=True)
        if not args.skip_latency:
            live = JobSettings(
                **{
                    **s.__dict__,
                    "checkpoint": f"{work}/live",
                    "starting_offsets": "latest",
                    "max_offsets_per_trigger": None,
                }
            )
            lat = sorted(latency(spark, live.validate(), b, args.latency_rate, args.probes))
            if lat:
                result.update(
                    latency_probes=len(lat),
                    latency_expected=args.probes,
                    latency_p50_s=round(statistics.median(lat), 2),
                    latency_p95_s=round(percentile(lat, 0.95), 2),
                    latency_max_s=round(lat[-1], 2),
                    latency_background_events_per_s=args.latency_rate,
                )
        spark.stop()
    finally:
        cluster.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
