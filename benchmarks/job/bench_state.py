"""Benchmark: the job's saved state per batch for a live fleet, snapshot against delta.

    .venv/bin/python benchmarks/job/bench_state.py --series 20000

Pure Python, no services: every series reports a summary every ``--interval`` seconds of event
time, one batch per ``--trigger`` seconds, through the driver's own path (open windows ->
aggregates -> detectors). After a warm-up, each batch's state is encoded both ways, as the job
would save it: a snapshot (``to_state``) and a delta (``to_delta``). Prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from streaming.detectors.config import DetectorConfig  # noqa: E402
from streaming.job.partials import WindowState, flat_col  # noqa: E402
from streaming.job.records import to_aggregates  # noqa: E402
from streaming.job.tracker import Tracker  # noqa: E402

T0 = 1_795_000_000.0  # a window start


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=20000)
    ap.add_argument("--interval", type=float, default=10.0, help="summary interval, s")
    ap.add_argument("--trigger", type=float, default=5.0, help="batch every, s of event time")
    ap.add_argument("--batches", type=int, default=60)
    args = ap.parse_args()
    cfg = DetectorConfig()
    windows = WindowState(cfg.window_s, cfg.watermark_s)
    tracker = Tracker(cfg, clock=lambda a: a.window_end)
    measured = {"snapshot": [0, 0.0], "delta": [0, 0.0]}
    warm = args.batches // 2
    for b in range(args.batches):
        t = T0 + args.trigger * (b + 1)
        result = windows.apply(batch_rows(args.series, t, args.interval, args.trigger))
        tracker.process(*to_aggregates(result.rows, cfg.window_s))
        if b < warm:  # warm-up: only reset what changed, as a saved batch would
            tracker.to_delta()
            windows.to_delta()
            continue
        for kind in ("delta", "snapshot"):  # delta first: a snapshot resets what changed
            t0 = time.perf_counter()
            if kind == "delta":
                doc = {"tracker": tracker.to_delta(), "windows": windows.to_delta()}
            else:
                doc = {"tracker": tracker.to_state(), "windows": windows.to_state()}
            size = len(orjson.dumps(doc))
            measured[kind][0] += size
            measured[kind][1] += time.perf_counter() - t0
    n = args.batches - warm
    snap_b, snap_s = measured["snapshot"]
    delta_b, delta_s = measured["delta"]
    print(
        json.dumps(
            {
                "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cores",
                "series": args.series,
                "open_windows": len(windows.open),
                "firing_findings": len(tracker.findings),
                "snapshot_mb_per_batch": round(snap_b / n / 1e6, 2),
                "snapshot_s_per_batch": round(snap_s / n, 3),
                "delta_mb_per_batch": round(delta_b / n / 1e6, 2),
                "delta_s_per_batch": round(delta_s / n, 3),
                "ratio_delta_to_snapshot_time": round(delta_s / snap_s, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
