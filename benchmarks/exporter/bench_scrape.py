"""Scrape time of the exporter at ~10k series, against a baseline in the same run:
client_python's own ``Gauge`` holding the same number of label sets, formatted by
``generate_latest``.

Measured per case (median and p95 of --repeat runs):
- served: what /metrics does (store snapshot + ``Renderer``, encoded to bytes);
- served+gzip: the same, gzip level 1 (Prometheus asks for gzip);
- collector: the client_python custom collector through ``generate_latest`` (the reference);
- baseline: a client_python ``Gauge`` with as many label sets as the case has samples.

Run: .venv/bin/python benchmarks/exporter/bench_scrape.py [--repeat 30]
Goal: a scrape of 10k series under 50 ms.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import time

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from streaming.exporter.collector import ConnmonCollector
from streaming.exporter.consumer import handle
from streaming.exporter.render import Renderer
from streaming.exporter.samples import NOW, aggregate, finding
from streaming.exporter.store import Store
from streaming.metricnames.connmon import FINDING_LABELS

KINDS = ("close_wait_buildup", "idle_churn", "duplicate_connections", "idle_zombie")


def connmon_store(pairs: int, findings: int) -> Store:
    store = Store(series_limit=10**7, clock=lambda: NOW)
    for i in range(pairs):
        raw = aggregate(host=f"host-{i // 20}", app=f"app-{i % 7}", broker_id=i % 20)
        handle(store, "aggregates", f"a{i}".encode(), raw, "bench")
    for i in range(findings):
        raw = finding(host=f"host-{i // 40}", app=f"app-{i % 10}", kind=KINDS[i % 4],
                      broker_id=(i // 4) % 10)  # fmt: skip
        handle(store, "findings", f"f{i}".encode(), raw, "bench")
    return store


def baseline_registry(series: int) -> CollectorRegistry:
    """client_python's Gauge with ``series`` label sets of the same 8 labels."""
    registry = CollectorRegistry()
    g = Gauge("connmon_finding_active", "baseline", list(FINDING_LABELS), registry=registry)
    for i in range(series):
        g.labels(KINDS[i % 4], "critical", "client", f"host-{i // 40}", f"app-{i % 10}", "local",
                 str((i // 4) % 10), "").set(1)  # fmt: skip
    return registry


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median, p95) seconds of ``fn()`` over ``repeat`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    cases = [
        ("10k findings (1 sample each)", connmon_store(0, 10_000)),
        ("527 pairs x 19 samples", connmon_store(527, 0)),
        ("10k pairs x 19 samples", connmon_store(10_000, 0)),
    ]
    print(f"python {platform.python_version()}, {platform.machine()}, repeat={args.repeat}")
    cols = ("served", "served+gzip", "collector", "baseline")
    print(f"{'case':30} {'samples':>8} " + " ".join(f"{c + ' ms':>16}" for c in cols)
          + "  served/baseline")  # fmt: skip
    results = []
    for name, store in cases:
        renderer = Renderer()
        registry = CollectorRegistry()
        registry.register(ConnmonCollector(store))
        text = renderer.render(store.snapshot())
        samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        base = baseline_registry(samples)
        row = {
            "served": timed(lambda r=renderer, s=store: r.render(s.snapshot()).encode(),
                            args.repeat),
            "served+gzip": timed(lambda r=renderer, s=store: gzip.compress(
                r.render(s.snapshot()).encode(), compresslevel=1), args.repeat),
            "collector": timed(lambda g=registry: generate_latest(g), args.repeat),
            "baseline": timed(lambda b=base: generate_latest(b), args.repeat),
        }  # fmt: skip
        ratio = row["served"][0] / row["baseline"][0]
        print(f"{name:30} {samples:8d} "
              + " ".join(f"{m * 1e3:7.1f} (p95 {p * 1e3:4.0f})" for m, p in row.values())
              + f"  {ratio:.3f}")  # fmt: skip
        results.append({"case": name, "samples": samples, "ratio_served_to_baseline":
                        round(ratio, 3), **{k: {"median_ms": round(m * 1e3, 2),
                        "p95_ms": round(p * 1e3, 2)} for k, (m, p) in row.items()}})  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
