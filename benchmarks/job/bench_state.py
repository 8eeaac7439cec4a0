"""Benchmark: the state query's Python work per batch for a live fleet, by state bucket.

    .venv/bin/python benchmarks/job/bench_state.py --series 100000 --buckets 256

Pure Python, no services: every series reports a summary every ``--interval`` seconds of event
time, one batch per ``--trigger`` seconds. The series are spread over ``--buckets`` buckets by
hash, as the job does; per batch every bucket is restored from its saved value, processes its
record of partial rows (JSON lines, as the partials topic holds them) and the fleet's event time
(windows, aggregates, detectors, findings), is saved again and hands its output rows back,
which is what the state query's processor does per key, with the executors' collector
settings (``worker.prepare``). The baseline, in the same run, is one
bucket holding every series in memory and never saved (the per-series work alone). Prints a JSON
summary: seconds of one core per batch, per 1000 series, and the saved state's size.
``--stages`` also reports the buckets' time by step (restore, windows, aggregates, detectors
and their lifecycle, save), by wrapping those functions with timers (which adds their own
cost). ``--migrate-to N`` also times the Python work of moving the saved buckets to N buckets
(``rebucket``: split by series, merge; Spark's state reader and shuffle not included), against
one batch of the buckets in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streaming.detectors.config import DetectorConfig  # noqa: E402
from streaming.job import buckets, worker  # noqa: E402
from streaming.job.buckets import Bucket, Record, output_rows, window_end_clock  # noqa: E402
from streaming.job.open_windows import flat_col  # noqa: E402

T0 = 1_795_000_020.0  # a window start
TOPICS = {"aggregates": "a", "findings": "f", "deadletter": "d"}


def batch_rows(series: int, t: float, interval: float, trigger: float) -> list[dict]:
    """The partial rows of the series that report within (t - trigger, t]."""
    start = t - t % 60
    every = max(1, round(interval / trigger))
    rows = []
    for s in range(series):
        if (s + round(t / trigger)) % every:
            continue
        leak = s % 50 == 0  # a few series leak CLOSE_WAIT sockets: findings to keep
        state = "CLOSE_WAIT" if leak else "ESTABLISHED"
        row = {
            "window_start_s": start,
            "side": "client",
            "host": f"host-{s // 4:05d}",
            "app": f"app-{s % 4}",
            "broker": "1",
            "peer_host": None,
            "reason": None,
            "events": 1,
            "last_event_s": t,
            "summary_last_t": t,
            "summary_interval_s": interval,
            flat_col(state, "t"): t,
            flat_col(state, "count"): 3 if leak else 1,
        }
        if leak:
            row[flat_col(state, "oldest_state_age_s")] = 300.0
        rows.append(row)
    return rows


# The steps ``--stages`` times: (label, owner, attribute). Nested ones are part of the outer.
_STAGES = (
    ("restore", "Bucket", "load"),
    ("windows: merge, evict", "OpenWindows", "apply"),
    ("aggregates built", "buckets", "to_aggregates"),
    ("tracker: lifecycle and detectors", "Tracker", "process"),
    ("  of which detectors", "tracker", "detect_all"),
    ("save", "Bucket", "dump"),
)


def _time_stages() -> dict:
    """Wrap each step of ``_STAGES`` with a CPU timer; returns the running totals."""
    from streaming.job import open_windows, tracker

    owners = {
        "Bucket": Bucket,
        "OpenWindows": open_windows.OpenWindows,
        "buckets": buckets,
        "Tracker": tracker.Tracker,
        "tracker": tracker,
    }
    totals: dict = {"on": False}

    def timed(label: str, f):
        def run(*a, **kw):
            t = time.process_time()
            try:
                return f(*a, **kw)
            finally:
                if totals["on"]:
                    totals[label] = totals.get(label, 0.0) + time.process_time() - t

        return run

    for label, owner, name in _STAGES:
        target = owners[owner]
        setattr(target, name, timed(label, getattr(target, name)))
    return totals


def _stage_summary(totals: dict | None, series_batches: int) -> dict:
    if totals is None:
        return {}
    return {
        "stages_us_per_series_batch": {
            label: round(totals.get(label, 0.0) / series_batches * 1e6, 2)
            for label, _owner, _name in _STAGES
        }
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=20000)
    ap.add_argument("--buckets", type=int, default=256)
    ap.add_argument("--interval", type=float, default=10.0, help="summary interval, s")
    ap.add_argument("--trigger", type=float, default=5.0, help="batch every, s of event time")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--migrate-to", type=int, help="also time moving the state to N buckets")
    ap.add_argument("--stages", action="store_true", help="also time the buckets' steps")
    args = ap.parse_args()
    stages = _time_stages() if args.stages else None
    # The collector as the executors' Python workers set it (``worker.prepare``; an older
    # commit run from its worktree may keep Python's default threshold).
    gc.collect()
    gc.freeze()
    if hasattr(worker, "GC_THRESHOLD"):
        gc.set_threshold(*worker.GC_THRESHOLD)
    unpack = buckets.decompress
    cfg = DetectorConfig()
    whole = Bucket(cfg, window_end_clock)
    saved: dict[int, bytes] = {}
    warm = args.batches // 2
    base_s = bucket_s = 0.0
    state_bytes = raw_bytes = 0
    for b in range(args.batches):
        t = T0 + args.trigger * (b + 1)
        rows = batch_rows(args.series, t, args.interval, args.trigger)
        fleet = t - args.trigger  # the fleet's event time before the batch
        text = "\n".join(orjson.dumps(r).decode() for r in rows)
        t0 = time.process_time()
        list(output_rows(whole.process([Record(b, 0, None, fleet, text)], fleet), TOPICS))
        t1 = time.process_time()
        # As the partials topic holds them: each bucket's rows as JSON lines.
        by_bucket: dict[int, list[str]] = {}
        for r in rows:
            key = hash((r["host"], r["app"])) % args.buckets
            by_bucket.setdefault(key, []).append(json.dumps(r))
        if stages is not None:
            stages["on"] = b >= warm
        t2 = time.process_time()
        for k in range(args.buckets):
            bucket = Bucket.load(saved.get(k), cfg, window_end_clock)
            mine = by_bucket.get(k)
            records = [Record(b, 0, None, fleet, "\n".join(mine))] if mine else []
            em = bucket.process(records, fleet)  # without rows: its timer
            saved[k] = bucket.dump()
            list(output_rows(em, TOPICS))  # the rows handed back to Spark
        t3 = time.process_time()
        if stages is not None:
            stages["on"] = False  # the in-memory baseline is not timed by step
        if b >= warm:
            base_s += t1 - t0
            bucket_s += t3 - t2
            state_bytes += sum(map(len, saved.values()))
            raw_bytes += sum(len(unpack(v)) for v in saved.values())
    n = args.batches - warm
    per_batch = bucket_s / n
    moved: dict[str, float] = {}
    if args.migrate_to:
        from streaming.job import rebucket

        t0 = time.process_time()
        parts: dict[int, list[bytes]] = {}
        for blob in saved.values():
            for fields, part in rebucket.split(blob, cfg):
                parts.setdefault(hash(fields) % args.migrate_to, []).append(part)
        t1 = time.process_time()
        for p in parts.values():
            rebucket.merge(p)
        t2 = time.process_time()
        moved = {
            "migrate_to_buckets": args.migrate_to,
            "migrate_split_cpu_s": round(t1 - t0, 3),
            "migrate_merge_cpu_s": round(t2 - t1, 3),
            "ratio_migrate_to_batch": round((t2 - t0) / per_batch, 2),
        }
    print(
        json.dumps(
            {
                "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cores",
                "series": args.series,
                "buckets": args.buckets,
                "open_windows": len(whole.windows.open),
                "firing_findings": len(whole.tracker.findings),
                "baseline_cpu_s_per_batch": round(base_s / n, 3),
                "buckets_cpu_s_per_batch": round(per_batch, 3),
                "ratio_buckets_to_baseline": round(bucket_s / base_s, 2),
                "buckets_cpu_ms_per_1000_series": round(per_batch / args.series * 1e6, 2),
                "state_mb_compressed": round(state_bytes / n / 1e6, 2),
                "state_mb_json": round(raw_bytes / n / 1e6, 2),
            }
            | moved
            | _stage_summary(stages, n * args.series)
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
