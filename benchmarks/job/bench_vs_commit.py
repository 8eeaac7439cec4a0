"""The job's throughput against an older commit's, in one session, runs taking turns.

Runs ``bench_job.py --skip-latency`` (its own KRaft broker, N events, the baselines and the
job on ``local[2]``) from this checkout and from a git worktree of ``--baseline``, alternating
for ``--rounds`` rounds, and reports per side the job's events/s (wall and sustained) and its
ratio to that run's own parsed baseline, then new / old. Both sides use the same Python
environment and the same cached jars (``CONNMON_CACHE_DIR``).

    .venv/bin/python benchmarks/job/bench_vs_commit.py --baseline 54fa557 --events 4000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KEYS = (
    "job_events_per_s",
    "sustained_job_events_per_s",
    "parsed_baseline_events_per_s",
    "ratio_job_to_parsed_baseline",
    "sustained_ratio_job_to_parsed_baseline",
)


def run_side(tree: Path, events: int, extra: list[str]) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "CONNMON_CACHE_DIR": os.environ.get(
            "CONNMON_CACHE_DIR", str(REPO / "deploy" / "local" / ".cache")
        ),
    }
    where = subprocess.run(
        [sys.executable, "-c", "import streaming; print(streaming.__file__)"],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not where.startswith(str(tree)):
        raise RuntimeError(f"the {tree} side would import {where}")
    cmd = [sys.executable, "benchmarks/job/bench_job.py", "--events", str(events),
           "--skip-latency", *extra]  # fmt: skip
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(
            f"bench_job.py in {tree} failed ({out.returncode}):\n{out.stderr[-3000:]}"
        )
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="54fa557", help="git revision to compare against")
    ap.add_argument("--events", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the results here")
    args, extra = ap.parse_known_args()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                         capture_output=True, check=True).stdout.strip()  # fmt: skip
    runs: dict[str, list[dict]] = {"new": [], "old": []}
    with tempfile.TemporaryDirectory(prefix="connmon-old-") as d:
        old = Path(d) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.baseline],
                       cwd=REPO, check=True, capture_output=True)  # fmt: skip
        # Both sides run on the installed PySpark with this checkout's connector jars.
        pom = Path("deploy/local/maven/spark-kafka/pom.xml")
        shutil.copyfile(REPO / pom, old / pom)
        try:
            for i in range(args.rounds):
                # Alternate which side goes first: the machine warms up over a session.
                order = [("new", REPO), ("old", old)]
                for side, tree in order if i % 2 == 0 else order[::-1]:
                    r = run_side(tree, args.events, extra)
                    runs[side].append({k: r.get(k) for k in KEYS})
                    print(json.dumps({"round": i + 1, "side": side, **runs[side][-1]}), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO,
                           check=False, capture_output=True)  # fmt: skip

    def med(side: str, key: str) -> float | None:
        xs = [r[key] for r in runs[side] if r.get(key) is not None]
        return round(statistics.median(xs), 3) if xs else None

    summary: dict = {"commit": rev, "baseline": args.baseline, "events": args.events,
                     "rounds": args.rounds, "machine": f"{os.uname().release}, "
                     f"{os.cpu_count()} cores"}  # fmt: skip
    for key in KEYS:
        new, old_v = med("new", key), med("old", key)
        summary[key] = {"new": new, "old": old_v,
                        "new_to_old": round(new / old_v, 3) if new and old_v else None}  # fmt: skip
    summary["runs"] = runs
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
