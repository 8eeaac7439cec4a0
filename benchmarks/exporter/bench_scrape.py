"""Scrape time of the exporter, against a baseline in the same run: client_python's own
``Gauge`` holding the same number of label sets, formatted by ``generate_latest``.

Measured per case (median and p95 of --repeat runs):
- changed: the /metrics WSGI app (store snapshot, render, encode) after every series and
  finding got a new value, as after each window of the job; plain and gzip;
- unchanged: the same when only the job status moved since the last scrape (a second
  Prometheus replica, or a scrape between two windows); plain and gzip;
- collector: the client_python custom collector through ``generate_latest`` (the reference);
- baseline: a client_python ``Gauge`` with as many label sets as the case has samples.
HTTP itself (socket, headers) is not included.

Run: .venv/bin/python benchmarks/exporter/bench_scrape.py [--repeat 10] [--cases ...]
     [--no-reference]
Goal: a scrape of 10k series under 50 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from streaming.exporter.collector import ConnmonCollector
from streaming.exporter.consumer import handle
from streaming.exporter.http import metrics_app
from streaming.exporter.samples import NOW, aggregate, finding
from streaming.exporter.store import Store
from streaming.metricnames.connmon import FINDING_LABELS

KINDS = ("close_wait_buildup", "idle_churn", "duplicate_connections", "idle_zombie")
CASES = {
    "findings10k": ("10k findings", 0, 10_000),
    "pairs527": ("527 pairs", 527, 0),
    "pairs10k": ("10k pairs", 10_000, 0),
    "mixed50k": ("16k pairs + 34k findings", 16_000, 34_000),
    "healthy50k": ("50k healthy pairs", 50_000, 0),
}
# A healthy client x broker window: ESTABLISHED sockets, no event, its client library and its
# process's fd usage known (4 samples: the shape most of a fleet has).
HEALTHY = {
    "sockets": {"ESTABLISHED": 2}, "close_wait_count": 0, "close_wait_oldest_age_s": None,
    "close_wait_slope_per_s": None, "opens": 0, "closes_peer": 0, "closes_after_idle": 0,
    "max_idle_s": 3.5, "client_library": "librdkafka", "client_version": "2.6.0",
}  # fmt: skip


def connmon_store(pairs: int, findings: int, healthy: bool = False) -> Store:
    store = Store(series_limit=10**7, clock=lambda: NOW)
    for i in range(pairs):
        over = HEALTHY if healthy else {}
        raw = aggregate(host=f"host-{i // 20}", app=f"app-{i % 7}", broker_id=i % 20, **over)
        handle(store, "aggregates", f"a{i}".encode(), raw, "bench")
    for i in range(findings):
        raw = finding(host=f"host-{i // 40}", app=f"app-{i % 10}", kind=KINDS[i % 4],
                      broker_id=(i // 4) % 10)  # fmt: skip
        handle(store, "findings", f"f{i}".encode(), raw, "bench")
    return store


def new_window(store: Store) -> Callable[[], None]:
    """A function that gives every series and finding a newer value (not timed)."""
    step = [0]

    def touch() -> None:
        step[0] += 1
        snap = store.snapshot()
        for a in snap.aggregates:
            gauges = {**a.gauges, "connmon_max_idle_seconds": float(step[0])}
            store.put_aggregate(dataclasses.replace(a, window_end=a.window_end + 1e-3,
                                                    gauges=gauges))  # fmt: skip
        for f in snap.findings:
            store.put_finding(dataclasses.replace(f, updated_at=f.updated_at + 1e-3))
        store.seen("job_status")

    return touch


def scrape(app, accept_gzip: bool) -> Callable[[], list[bytes]]:
    """One GET of /metrics: the body as the app returns it (a server writes it chunk by chunk)."""
    environ = {"PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": "gzip" if accept_gzip else ""}
    return lambda: list(app(dict(environ), lambda status, headers: None))


def baseline_registry(series: int) -> CollectorRegistry:
    """client_python's Gauge with ``series`` label sets of the same 8 labels."""
    registry = CollectorRegistry()
    g = Gauge("connmon_finding_active", "baseline", list(FINDING_LABELS), registry=registry)
    for i in range(series):
        g.labels(KINDS[i % 4], "critical", "client", f"host-{i // 40}", f"app-{i % 10}", "local",
                 str((i // 4) % 10), "").set(1)  # fmt: skip
    return registry


def timed(fn: Callable, repeat: int, before: Callable | None = None) -> tuple[float, float]:
    """(median, p95) seconds of ``fn()`` over ``repeat`` runs after one warm-up; ``before()``
    runs ahead of each, untimed."""
    if before:
        before()
    fn()
    times = []
    for _ in range(repeat):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def run_case(key: str, repeat: int, reference: bool) -> dict:
    name, pairs, findings = CASES[key]
    store = connmon_store(pairs, findings, healthy=key.startswith("healthy"))
    app = metrics_app(store)
    text = b"".join(scrape(app, False)())
    size_gz = len(b"".join(scrape(app, True)()))
    samples = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    touch = new_window(store)

    def status_only() -> None:
        store.seen("job_status")

    row = {
        "changed": timed(scrape(app, False), repeat, touch),
        "changed+gzip": timed(scrape(app, True), repeat, touch),
        "unchanged": timed(scrape(app, False), repeat, status_only),
        "unchanged+gzip": timed(scrape(app, True), repeat, status_only),
    }
    if reference:
        registry = CollectorRegistry()
        registry.register(ConnmonCollector(store))
        base = baseline_registry(samples)
        row["collector"] = timed(lambda: generate_latest(registry), repeat)
        row["baseline"] = timed(lambda: generate_latest(base), repeat)
    assert gzip.decompress(b"".join(scrape(app, True)())) == b"".join(scrape(app, False)())
    cells = " ".join(f"{m * 1e3:9.1f} (p95 {p * 1e3:5.0f})" for m, p in row.values())
    print(f"{name:30} {samples:8d} {len(text) / 1e6:6.1f} {size_gz / 1e6:6.2f} {cells}")
    ms = {
        k: {"median_ms": round(m * 1e3, 2), "p95_ms": round(p * 1e3, 2)}
        for k, (m, p) in row.items()
    }
    return {"case": name, "samples": samples, "bytes": len(text), "gzip_bytes": size_gz, **ms}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated: {list(CASES)}")
    ap.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the collector and baseline columns (slow at 100k+ samples)",
    )
    args = ap.parse_args()
    print(
        f"python {platform.python_version()}, {platform.machine()}, repeat={args.repeat}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    cols = ["changed", "changed+gzip", "unchanged", "unchanged+gzip"]
    if not args.no_reference:
        cols += ["collector", "baseline"]
    heads = " ".join(f"{c + ' ms':>20}" for c in cols)
    print(f"{'case':30} {'samples':>8} {'MB':>6} {'gz MB':>6} {heads}")
    results = [run_case(key, args.repeat, not args.no_reference) for key in args.cases.split(",")]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
