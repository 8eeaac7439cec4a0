"""How close connmon's time-to-fd-exhaustion prediction comes to the real EMFILE.

For each leak rate: a real process lowers its soft open-files limit, opens a connection to a
real broker (KRaft, ``connections.max.idle.ms=2000``) every 1/rate s and never closes any, so
each sits in CLOSE_WAIT once the broker reaps it, until ``socket()`` fails with EMFILE. The
real agent watches it (0.5 s scans, 2 s summaries); the job's replay (Spark, local[2]) windows
the events in 10 s windows; the ``close_wait_buildup`` detector's time left in the first
window past half the headroom is compared with the time really left. Same harness as
``tests/integration/test_fd_exhaustion.py``.

    .venv/bin/python benchmarks/agent/bench_fd_prediction.py --rates 1 2 4 --limit 256 \\
        --json benchmarks/agent/results-fd-prediction-2026-11-29.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from fd_leak import BROKER_OVERRIDES, leak_until_emfile, prediction_at_half  # noqa: E402

from streaming.detectors.config import DetectorConfig  # noqa: E402
from streaming.job.pipeline import replay  # noqa: E402
from streaming.stack.kafka import KafkaCluster  # noqa: E402
from streaming.stack.spark import local_session  # noqa: E402

CFG = DetectorConfig().replace(window_s=10.0, watermark_s=10.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--limit", type=int, default=256)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    cluster = KafkaCluster(brokers=1, overrides=BROKER_OVERRIDES, name="connmon-bench")
    cluster.start()
    spark = local_session(app_name="connmon-bench", master="local[2]")
    try:
        for rate in args.rates:
            with tempfile.TemporaryDirectory(prefix="connmon-fd-") as d:
                tmp = Path(d)
                run = leak_until_emfile(cluster, tmp, rate, args.limit)
                (tmp / "in").mkdir()
                (tmp / "in" / "events.jsonl").write_text(
                    "".join(json.dumps(e) + "\n" for e in run.events)
                )
                p = prediction_at_half(replay(spark, str(tmp / "in"), CFG).aggregates, run, CFG)
            row = {
                "rate_per_s": rate,
                "limit": args.limit,
                "fds_open_at_prediction": p.fds_open,
                "predicted_left_s": round(p.left_s, 1),
                "actual_left_s": round(p.actual_left_s, 1),
                "error": round(p.error, 4),
            }
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        spark.stop()
        cluster.stop()
    if args.json:
        machine = {
            "date": time.strftime("%Y-%m-%d"),
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
        args.json.write_text(json.dumps({"machine": machine, "runs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
