"""Exporter shards: samples per series, per-shard cost of reading and scraping, and a real
Prometheus scraping the shards.

Parts (README.md, "Shard benchmark"):
- samples: how many samples each kind of series costs in /metrics. With --before-tree the same
  code also runs against another checkout (PYTHONPATH=<tree>), e.g. the committed code.
- shards: --series series of a fleet split over --shards exporters. Each shard runs in its own
  process, reads every message (Shard.owns on its key), parses its own (consumer.handle), then
  is scraped as Prometheus does (GET /metrics through the WSGI app, Accept-Encoding: gzip):
  "changed" after every series and finding got a new window, "unchanged" when only the job
  status moved; VmRSS/VmHWM of the process. The same for one unsharded exporter (baseline).
- simulate: --sim-series over --sim-shards, only the shards in --sim-measure, each in its own
  process: the others are the same shape.
- prometheus (--prometheus-minutes N, off by default): one HTTP process per shard serving its
  share, every series re-published with a new window each minute; a Prometheus scraping them
  every 30 s with connmon's generated rules; its memory, head series, scrape and rule times.

Run: .venv/bin/python benchmarks/exporter/bench_shards.py [--parts samples,shards,simulate]
     [--before-tree /tmp/connmon-before] [--prometheus-minutes 10] [--json results.json]
Goal: <= 8 samples for a healthy series; each shard's gzip scrape p95 <= 1 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from streaming.exporter.consumer import handle
from streaming.exporter.http import metrics_app
from streaming.exporter.samples import NOW
from streaming.exporter.store import Store
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import Finding
from streaming.schema.times import iso

HERE = Path(__file__).resolve()

# ---- the fleet ---------------------------------------------------------------------------
# Client hosts run APPS_PER_HOST of the APPS (Kubernetes-style namespace/workload names); an
# app talks to every broker of one cluster. Each broker sees each client host that talks to
# its cluster: one broker-side series per (broker, client host).
APPS = tuple(
    f"{ns}/{name}"
    for ns, names in (
        ("payments", ("orders-consumer", "ledger-writer", "refund-worker", "fraud-scorer")),
        ("search", ("indexer", "query-logger", "suggest-builder", "crawler-sink")),
        ("logistics", ("shipment-events", "tracking-api", "route-planner", "eta-updater")),
        ("identity", ("session-audit", "login-events", "token-revoker", "profile-sync")),
        ("platform", ("metrics-forwarder", "audit-archiver", "config-watcher", "cdc-bridge")),
    )
    for name in names
)
CLUSTERS = ("prod-a", "prod-b", "prod-c")
BROKERS = 6
APPS_PER_HOST = 5
LIBRARIES = (("java", "3.7.1"), ("librdkafka", "2.5.3"), ("franz-go", "1.17.1"))
FINDING_KINDS = ("close_wait_buildup", "idle_churn", "duplicate_connections", "idle_zombie")
SEVERITY = {
    "close_wait_buildup": "critical",
    "idle_churn": "warning",
    "duplicate_connections": "warning",
    "idle_zombie": "warning",
}
# Of every 100 series: one has a firing finding, four churn, the rest are healthy.
FINDING_AT, CHURN_AT = {37}, {11, 36, 61, 86}


@dataclasses.dataclass(frozen=True)
class Spec:
    """One series of the fleet and what its windows look like."""

    n: int  # index in the fleet: varies the values
    profile: str  # healthy, churn, or a finding kind
    side: str
    host: str
    app: str
    cluster: str
    broker: int
    peer_host: str | None = None


def fleet(series: int) -> Iterator[Spec]:
    """``series`` series, host by host, the same every run."""
    n = 0
    for h in itertools.count():
        host = f"worker-{h:05d}.dc1.example.net"
        ip = f"10.{64 + h // 65536}.{h // 256 % 256}.{h % 256}"
        apps = [APPS[(h * 3 + 4 * j) % len(APPS)] for j in range(APPS_PER_HOST)]
        clusters = sorted({CLUSTERS[APPS.index(a) % len(CLUSTERS)] for a in apps})
        rows = [
            ("client", host, a, CLUSTERS[APPS.index(a) % len(CLUSTERS)], b, None)
            for a in apps
            for b in range(1, BROKERS + 1)
        ]
        rows += [
            ("broker", f"kafka-{c}-{b}.dc1.example.net", "kafka-broker", c, b, ip)
            for c in clusters
            for b in range(1, BROKERS + 1)
        ]
        for side, host_, app, cluster, broker, peer in rows:
            if n >= series:
                return
            k = n % 100
            if k in FINDING_AT:
                profile = FINDING_KINDS[(n // 100) % len(FINDING_KINDS)]
            elif k in CHURN_AT:
                profile = "churn"
            else:
                profile = "healthy"
            yield Spec(n, profile, side, host_, app, cluster, broker, peer)
            n += 1


def hosts_of(series: int) -> dict[str, int]:
    specs = list(fleet(series))
    return {
        "client_hosts": len({s.host for s in specs if s.side == "client"}),
        "apps": len({s.app for s in specs if s.side == "client"}),
        "clusters": len(CLUSTERS),
        "brokers": len(CLUSTERS) * BROKERS,
        "client_series": sum(s.side == "client" for s in specs),
        "broker_series": sum(s.side == "broker" for s in specs),
        **{
            f"{p}_series": sum(s.profile == p for s in specs)
            for p in ("healthy", "churn", *FINDING_KINDS)
        },
    }


def window_fields(spec: Spec) -> dict:
    """The aggregate's measured fields for the spec's profile (the job's ``Aggregate``)."""
    n = spec.n
    idle = round(0.25 + (n * 7919 % 59_000) / 1000, 3)  # 0.25 .. 59.25 s
    est = 1 + n % 3
    out: dict = {"sockets": {"ESTABLISHED": est}, "max_idle_s": idle}
    out["established_processes"] = 1
    out["established_max_per_process"] = est
    if spec.profile in ("churn", "idle_churn"):
        out.update(
            sockets={"ESTABLISHED": 1, "TIME_WAIT": 6},
            time_wait_count=6,
            opens=8,
            closes_local=5,
            closes_peer=3,
            closes_after_idle=6,
            closes_after_idle_local=4,
            closes_after_idle_peer=2,
            reopens_after_idle=5,
            reopen_idle_min_s=540.0,
            reopen_idle_max_s=541.5,
            idle_at_close_max_s=541.5,
            short_lived=1,
            lifetime_avg_s=48.2,
            lifetime_max_s=95.0,
        )
    elif spec.profile == "close_wait_buildup":
        out.update(
            sockets={"ESTABLISHED": 2, "CLOSE_WAIT": 14},
            close_wait_count=14,
            close_wait_oldest_age_s=1810.0 + n % 100,
            close_wait_slope_per_s=0.0083,
        )
    elif spec.profile == "duplicate_connections":
        out.update(
            sockets={"ESTABLISHED": 6},
            dup_processes=2,
            dup_max_idle_s=612.0,
            dup_unused_processes=1,
            established_processes=2,
            established_max_per_process=3,
        )
    elif spec.profile == "idle_zombie":
        out.update(sockets={"ESTABLISHED": 1}, max_idle_s=7260.0 + n % 100)
    return out


def messages(spec: Spec, end: float) -> list[tuple[str, bytes, bytes]]:
    """(role, key, value) of the series' window ending at ``end``, and of its firing finding."""
    library = {}
    if spec.side == "client":
        name, version = LIBRARIES[spec.n % len(LIBRARIES)]
        library = {
            "client_library": name,
            "client_version": version,
            "client_library_evidence": "loaded",
        }
    agg = Aggregate(
        side=spec.side,
        host=spec.host,
        app=spec.app,
        broker=str(spec.broker),
        broker_id=spec.broker,
        broker_endpoint=f"10.{CLUSTERS.index(spec.cluster)}.0.{spec.broker}:9092",
        peer_host=spec.peer_host,
        cluster=spec.cluster,
        window_start=iso(end - 60),
        window_end=iso(end),
        updated_at=iso(end + 2),
        last_event_time=iso(end - 1),
        **library,
        **window_fields(spec),
    )
    # The agent reports the process's file descriptors with every summary (set after the
    # constructor: the same messages then feed an exporter from before those fields).
    body = {**agg.to_dict(), "fds_open": 180 + spec.n, "fds_limit": 65536}
    out = [("aggregates", agg.series.encode(), json.dumps(body).encode())]
    if spec.profile in FINDING_KINDS:
        f = Finding.for_series(
            agg,
            spec.profile,
            SEVERITY[spec.profile],
            summary=f"{spec.profile} on {spec.host} ({spec.app}) toward broker {spec.broker}",
            recommendation="Close consumers and producers when done with them; see the runbook "
            "section for this finding kind for the client settings involved.",
            evidence={"close_wait_count": 14, "windows": 5},
        )
        f.updated_at = iso(end + 2)
        f.first_fired_at = iso(end - 600)
        f.last_seen_at = iso(end)
        f.change = "heartbeat"
        out.append(("findings", f.key.encode(), json.dumps(f.to_dict()).encode()))
    return out


def status_message(ts: float) -> tuple[str, bytes, bytes]:
    from streaming.exporter.samples import status

    return ("job_status", b"connmon-job|aggregates", status(ts, batch_id=int(ts)))


def fleet_messages(series: int, end: float) -> Iterator[tuple[str, bytes, bytes]]:
    yield status_message(end + 3)
    for spec in fleet(series):
        yield from messages(spec, end)


def chunks(it: Iterator, size: int) -> Iterator[list]:
    while chunk := list(itertools.islice(it, size)):
        yield chunk


# ---- measuring ---------------------------------------------------------------------------
def proc_status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM of a process, MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = round(int(rest.split()[0]) / 1024, 1)
    return out


def scrape(app, accept_gzip: bool = True) -> Callable[[], list[bytes]]:
    """One GET of /metrics: the body chunks as the app returns them."""
    environ = {"PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": "gzip" if accept_gzip else ""}
    return lambda: list(app(dict(environ), lambda status, headers: None))


def timed(fn: Callable, repeat: int, before: Callable[[], None]) -> dict[str, float]:
    """Wall and CPU time of ``fn()`` over ``repeat`` runs, ``before()`` (untimed) ahead of
    each; one warm-up first. ms: median, p95 (nearest rank) and max of wall, median of CPU."""
    before()
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        before()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    wall.sort()
    return {
        "median_ms": round(statistics.median(wall) * 1e3, 1),
        "p95_ms": round(wall[int(0.95 * (len(wall) - 1) + 0.5)] * 1e3, 1),
        "max_ms": round(wall[-1] * 1e3, 1),
        "cpu_median_ms": round(statistics.median(cpu) * 1e3, 1),
        "runs": repeat,
    }


def count_samples(text: bytes) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


# ---- part A: samples per series ----------------------------------------------------------
SAMPLE_CASES = {
    "healthy client": Spec(0, "healthy", "client", "host-a", "payments/orders-consumer",
                           "prod-a", 1),
    "healthy broker side": Spec(1, "healthy", "broker", "kafka-prod-a-1", "kafka-broker",
                                "prod-a", 1, "10.64.0.7"),
    "churning client": Spec(2, "churn", "client", "host-c", "search/indexer", "prod-b", 2),
    "CLOSE_WAIT leak + finding": Spec(3, "close_wait_buildup", "client", "host-d",
                                      "logistics/tracking-api", "prod-c", 3),
    "duplicate connections + finding": Spec(4, "duplicate_connections", "client", "host-e",
                                            "identity/login-events", "prod-a", 4),
    "idle zombie + finding": Spec(5, "idle_zombie", "client", "host-f",
                                  "platform/cdc-bridge", "prod-b", 5),
}  # fmt: skip


def samples_part() -> dict:
    """Samples each case's series (and finding) adds to /metrics with the code on sys.path."""
    import streaming

    out = {"code": str(Path(streaming.__file__).parent.parent), "cases": {}}
    for name, spec in SAMPLE_CASES.items():
        store = Store(series_limit=100, clock=lambda: NOW)
        for role, key, value in messages(spec, NOW - 5):
            handle(store, role, key, value, "bench")
        text = b"".join(scrape(metrics_app(store), accept_gzip=False)())
        mine = [
            line.decode()
            for line in text.splitlines()
            if line and not line.startswith(b"#") and f'host="{spec.host}"'.encode() in line
        ]
        finding = [s for s in mine if s.startswith("connmon_finding_")]
        out["cases"][name] = {
            "samples": len(mine),
            "series_samples": len(mine) - len(finding),
            "finding_samples": len(finding),
            "metrics": sorted({s.split("{", 1)[0] for s in mine}),
        }
    return out


# ---- parts B and simulate: one shard in its own process ----------------------------------
def shard_worker(cfg: dict) -> dict:
    """Build one shard's store from the whole message set, then scrape it; run in a process of
    its own so that its RSS is its own."""
    from streaming.exporter.shard import Shard

    rss_start = proc_status()
    shard = Shard(cfg["index"], cfg["count"])
    clock = [NOW]
    store = Store(
        series_limit=cfg["limit"],
        clock=lambda: clock[0],
        shard=cfg["index"],
        shards=cfg["count"],
    )
    route_s = route_cpu = parse_s = parse_cpu = 0.0
    seen = own = 0
    # The consumer takes up to 1000 messages per poll; only the routing and the parsing are
    # timed, not the making of the messages.
    for chunk in chunks(fleet_messages(cfg["series"], NOW - 5), 1000):
        t0, c0 = time.perf_counter(), time.process_time()
        mine = [m for m in chunk if shard.owns(m[0], m[1])]
        t1, c1 = time.perf_counter(), time.process_time()
        for role, key, value in mine:
            handle(store, role, key, value, "bench")
        t2, c2 = time.perf_counter(), time.process_time()
        route_s += t1 - t0
        route_cpu += c1 - c0
        parse_s += t2 - t1
        parse_cpu += c2 - c1
        seen += len(chunk)
        own += len(mine)
    rss_read = proc_status()
    snap = store.snapshot()
    held = {"series": len(snap.aggregates), "findings": len(snap.findings)}
    app = metrics_app(store)
    t0, c0 = time.perf_counter(), time.process_time()
    first = b"".join(scrape(app)())
    first_ms = (time.perf_counter() - t0) * 1e3
    first_cpu_ms = (time.process_time() - c0) * 1e3
    text = b"".join(scrape(app, accept_gzip=False)())
    step = [0]

    def new_window() -> None:
        """Every series and finding of the shard gets its next window (as after a micro-batch
        of the job, which re-publishes every open window)."""
        step[0] += 1
        clock[0] += 60.0
        s = store.snapshot()
        for a in s.aggregates:
            gauges = dict(a.gauges)
            if "connmon_max_idle_seconds" in gauges:
                gauges["connmon_max_idle_seconds"] += 0.001 * step[0]
            store.put_aggregate(
                dataclasses.replace(a, window_end=a.window_end + 60.0, gauges=gauges)
            )
        for f in s.findings:
            store.put_finding(dataclasses.replace(f, updated_at=f.updated_at + 60.0))
        store.seen("job_status")

    def status_only() -> None:
        store.seen("job_status")

    changed = timed(scrape(app), cfg["scrapes"], new_window)
    unchanged = timed(scrape(app), cfg["scrapes"], status_only)
    after = store.snapshot()
    return {
        "index": cfg["index"],
        "count": cfg["count"],
        "series_limit": cfg["limit"],
        "messages_read": seen,
        "messages_own": own,
        "held": held,
        "held_after_scrapes": {"series": len(after.aggregates), "findings": len(after.findings)},
        "dropped": after.dropped,
        "expired": after.expired,
        "read": {
            "total_s": round(route_s + parse_s, 2),
            "route_all_s": round(route_s, 3),
            "route_us_per_message": round(route_s / seen * 1e6, 2),
            "parse_own_s": round(parse_s, 2),
            "parse_us_per_message": round(parse_s / max(own, 1) * 1e6, 1),
            "cpu_s": round(route_cpu + parse_cpu, 2),
        },
        "samples": count_samples(text),
        "text_mb": round(len(text) / 1e6, 2),
        "gzip_mb": round(len(first) / 1e6, 2),
        "first_scrape_gzip_ms": round(first_ms, 1),
        "first_scrape_gzip_cpu_ms": round(first_cpu_ms, 1),
        "scrape_changed_gzip": changed,
        "scrape_unchanged_gzip": unchanged,
        "rss_mb": {
            "start": rss_start["VmRSS"],
            "after_read": rss_read["VmRSS"],
            "after_scrapes": proc_status()["VmRSS"],
            "peak": proc_status()["VmHWM"],
        },
        "loadavg_end": os.getloadavg()[0],
    }


def run_worker(cfg: dict, env: dict | None = None) -> dict:
    argv = [sys.executable, str(HERE), "--worker", json.dumps(cfg)]
    t0 = time.time()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"worker {cfg} failed:\n{res.stderr}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    print(
        f"  {cfg.get('part')} {cfg.get('index')}/{cfg.get('count')}: {time.time() - t0:.0f} s",
        file=sys.stderr,
    )
    return out


def shards_part(
    series: int,
    count: int,
    indexes: list[int],
    limit: int,
    scrapes: int,
    baseline_limit: int | None,
) -> dict:
    load = [os.getloadavg()[0]]
    runs = []
    for i in indexes:
        cfg = {
            "part": "shard",
            "series": series,
            "count": count,
            "index": i,
            "limit": limit,
            "scrapes": scrapes,
        }
        runs.append(run_worker(cfg))
        load.append(os.getloadavg()[0])
    out = {"series": series, "shards": count, "fleet": hosts_of(series), "per_shard": runs}
    if baseline_limit:
        cfg = {
            "part": "baseline",
            "series": series,
            "count": 1,
            "index": 0,
            "limit": baseline_limit,
            "scrapes": scrapes,
        }
        out["unsharded"] = run_worker(cfg)
        load.append(os.getloadavg()[0])
    out["loadavg_1m"] = load
    return out


# ---- part C: a real Prometheus -----------------------------------------------------------
def serve_worker(cfg: dict) -> None:
    """One shard serving HTTP: its share of the fleet, re-published with a new window every
    ``every_s`` (the job's windows), until terminated."""
    from streaming.exporter.shard import Shard
    from streaming.webserver import EndpointSecurity, serve_endpoint

    shard = Shard(cfg["index"], cfg["count"])
    store = Store(series_limit=cfg["limit"], shard=cfg["index"], shards=cfg["count"])
    own = [s for s in fleet(cfg["series"]) if shard.owns("aggregates", _series_key(s))]

    def publish() -> float:
        t0 = time.perf_counter()
        end = time.time() - 2
        handle(store, *status_message(end + 1), "bench")
        for spec in own:
            for role, key, value in messages(spec, end):
                if shard.owns(role, key):
                    handle(store, role, key, value, "bench")
        return time.perf_counter() - t0

    took = publish()
    httpd, _ = serve_endpoint(
        metrics_app(store),
        "127.0.0.1",
        0,
        EndpointSecurity(None, None, None, None),
        thread_name=f"bench-shard-{cfg['index']}",
    )
    print(
        json.dumps({"port": httpd.server_address[1], "series": len(own), "load_s": took}),
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    next_t = time.monotonic() + cfg["every_s"]
    while True:
        time.sleep(max(0.0, next_t - time.monotonic()))
        next_t += cfg["every_s"]
        took = publish()
        print(
            json.dumps({"republished_s": round(took, 2), "rss": proc_status()}),
            file=sys.stderr,
            flush=True,
        )


def _series_key(spec: Spec) -> bytes:
    from streaming.schema.aggregates import series_key

    return series_key(
        spec.side, spec.host, spec.app, spec.cluster, str(spec.broker), spec.peer_host
    ).encode()


def rule_files(out_dir: Path) -> tuple[list[Path], dict]:
    """connmon's generated alert and recording rules (the mixin's defaults, as in
    deploy/prometheus/), selecting the one scrape job PrometheusServer configures."""
    from streaming.mixin.build import ROOT, render
    from streaming.mixin.config import DEFAULT

    deployed = render(DEFAULT)
    cfg = DEFAULT.replace(exporter_selector='job="connmon"', agent_selector='job="connmon"')
    ours = render(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    files, note = [], {}
    for rel in ("deploy/prometheus/alerts.yaml", "deploy/prometheus/rules.yaml"):
        path = out_dir / Path(rel).name
        path.write_text(ours[rel])
        files.append(path)
        note[rel] = {
            "same_as_deploy_file": (ROOT / rel).read_text() == deployed[rel],
            "deploy_file_sha256": hashlib.sha256((ROOT / rel).read_bytes()).hexdigest(),
            "git_head": subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
            ).stdout.strip(),
            "uncommitted_change": bool(
                subprocess.run(
                    ["git", "-C", str(ROOT), "status", "--porcelain", rel],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            ),
        }
    return files, note


def _prom_metrics(url: str) -> dict[str, list[tuple[str, float]]]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        out.setdefault(name, []).append(("{" + labels if labels else "", float(value)))
    return out


def prometheus_part(
    series: int, count: int, limit: int, minutes: float, every_s: float, scrape_s: float
) -> dict:
    from streaming.stack.prometheus import PrometheusServer

    base = Path(tempfile.mkdtemp(prefix="connmon-bench-shards-"))
    rules, rules_note = rule_files(base / "rules")
    procs: list[subprocess.Popen] = []
    targets, shard_info = [], []
    prom = None
    try:
        for i in range(count):
            cfg = {"index": i, "count": count, "series": series, "limit": limit, "every_s": every_s}
            log = open(base / f"shard-{i}.log", "w")  # noqa: SIM115
            p = subprocess.Popen(
                [sys.executable, str(HERE), "--serve-worker", json.dumps(cfg)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            procs.append(p)
        for p in procs:
            ready = json.loads(p.stdout.readline())
            targets.append(f"127.0.0.1:{ready['port']}")
            shard_info.append({**ready, "pid": p.pid})
        print(f"  shards ready: {shard_info}", file=sys.stderr)
        prom = PrometheusServer(
            scrape_targets=targets,
            rule_files=rules,
            scrape_interval_s=scrape_s,
            evaluation_interval_s=scrape_s,
            base_dir=str(base / "prometheus"),
            keep_dir=True,
        ).start()
        t_start = time.time()
        polls = []
        group_eval: dict[str, list[float]] = {}
        while time.time() - t_start < minutes * 60:
            time.sleep(30)
            rss = proc_status(prom.pid)
            for g in prom.api("rules")["groups"]:
                group_eval.setdefault(g["name"], []).append(g["evaluationTime"])
            polls.append(
                {
                    "t_s": round(time.time() - t_start),
                    "prometheus_rss_mb": rss["VmRSS"],
                    "loadavg_1m": os.getloadavg()[0],
                    "shard_rss_mb": [proc_status(p.pid)["VmRSS"] for p in procs],
                }
            )
            print(f"  {polls[-1]}", file=sys.stderr)
        window = f"{int(minutes * 60)}s"
        q = prom.query

        def per_target(expr: str) -> dict[str, float]:
            return {
                r["metric"].get("instance", ""): round(float(r["value"][1]), 4) for r in q(expr)
            }

        own = _prom_metrics(prom.url)

        def one(name: str) -> float | None:
            vals = own.get(name)
            return vals[0][1] if vals else None

        groups = {}
        for g in prom.api("rules")["groups"]:
            evals = group_eval.get(g["name"], [])
            groups[g["name"]] = {
                "rules": len(g["rules"]),
                "last_evaluation_ms": round(g["evaluationTime"] * 1e3, 2),
                "max_polled_ms": round(max(evals) * 1e3, 2) if evals else None,
                "median_polled_ms": round(statistics.median(evals) * 1e3, 2) if evals else None,
                # the group's costliest rules at its last evaluation, ms
                "slowest_rules_ms": dict(
                    sorted(
                        ((r["name"], round(r["evaluationTime"] * 1e3, 2)) for r in g["rules"]),
                        key=lambda kv: -kv[1],
                    )[:5]
                ),
            }
        for labels, v in own.get("prometheus_rule_group_last_duration_seconds", []):
            name = labels.split(";")[-1].rstrip('"}')
            groups.setdefault(name, {})["prometheus_rule_group_last_duration_ms"] = round(
                v * 1e3, 2
            )
        status = proc_status(prom.pid)
        return {
            "series": series,
            "shards": count,
            "minutes": minutes,
            "scrape_interval_s": scrape_s,
            "evaluation_interval_s": scrape_s,
            "republish_every_s": every_s,
            "rules": rules_note,
            "shard_processes": shard_info,
            "prometheus": {
                "VmRSS_mb": status["VmRSS"],
                "VmHWM_mb": status["VmHWM"],
                "process_resident_memory_mb": round(
                    (one("process_resident_memory_bytes") or 0) / 2**20, 1
                ),
                "go_memstats_heap_inuse_mb": round(
                    (one("go_memstats_heap_inuse_bytes") or 0) / 2**20, 1
                ),
                "tsdb_head_series": one("prometheus_tsdb_head_series"),
                "tsdb_head_chunks": one("prometheus_tsdb_head_chunks"),
                "rule_evaluation_duration_seconds": {
                    labels: v
                    for labels, v in own.get("prometheus_rule_evaluation_duration_seconds", [])
                },
                "rule_group_iterations_missed_total": sum(
                    v for _, v in own.get("prometheus_rule_group_iterations_missed_total", [])
                ),
                "build_info": own.get("prometheus_build_info", [("", 0.0)])[0][0],
            },
            "targets": {
                "up": per_target('up{job="connmon"}'),
                "samples_scraped": per_target('scrape_samples_scraped{job="connmon"}'),
                "scrape_duration_s_last": per_target('scrape_duration_seconds{job="connmon"}'),
                "scrape_duration_s_avg": per_target(
                    f'avg_over_time(scrape_duration_seconds{{job="connmon"}}[{window}])'
                ),
                "scrape_duration_s_max": per_target(
                    f'max_over_time(scrape_duration_seconds{{job="connmon"}}[{window}])'
                ),
                "scrapes": per_target(
                    f'count_over_time(scrape_duration_seconds{{job="connmon"}}[{window}])'
                ),
            },
            "rule_groups": groups,
            "alerts_firing": len([a for a in prom.alerts() if a.get("state") == "firing"]),
            "polls": polls,
            "prometheus_dir": str(base / "prometheus"),
        }
    finally:
        if prom is not None:
            prom.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


# ---- main --------------------------------------------------------------------------------
def machine() -> dict:
    info = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "nproc": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()),
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }
    try:
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
        info["mem_gib"] = round(int(mem) / 2**20, 1)
    except OSError:
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--parts",
        default="samples,shards,simulate",
        help="comma-separated: samples, shards, simulate (or none)",
    )
    ap.add_argument("--before-tree", help="also measure samples with PYTHONPATH=<this checkout>")
    ap.add_argument("--series", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-limit", type=int, default=30_000, help="--series-limit per shard")
    ap.add_argument(
        "--baseline-limit",
        type=int,
        default=110_000,
        help="--series-limit of the unsharded exporter (0: no baseline)",
    )
    ap.add_argument("--scrapes", type=int, default=25, help="timed scrapes per column")
    ap.add_argument("--sim-series", type=int, default=500_000)
    ap.add_argument("--sim-shards", type=int, default=10)
    ap.add_argument("--sim-measure", default="0,1,2", help="which of --sim-shards to measure")
    ap.add_argument("--sim-limit", type=int, default=60_000)
    ap.add_argument(
        "--prometheus-minutes",
        type=float,
        default=0.0,
        help="run the Prometheus part for this long (0: skip)",
    )
    ap.add_argument("--republish-s", type=float, default=60.0)
    ap.add_argument("--scrape-interval-s", type=float, default=30.0)
    ap.add_argument("--json", help="merge the results into this JSON file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--serve-worker", help=argparse.SUPPRESS)
    ap.add_argument("--samples-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(shard_worker(json.loads(args.worker))))
        return
    if args.serve_worker:
        serve_worker(json.loads(args.serve_worker))
        return
    if args.samples_only:
        print(json.dumps(samples_part()))
        return

    parts = {p for p in args.parts.split(",") if p and p != "none"}
    results: dict = {"machine": machine()}
    print(json.dumps(results["machine"]), file=sys.stderr)
    if "samples" in parts:
        results["samples"] = {"after": samples_part()}
        if args.before_tree:
            env = {**os.environ, "PYTHONPATH": str(Path(args.before_tree).resolve())}
            res = subprocess.run(
                [sys.executable, str(HERE), "--samples-only"],
                env=env,
                cwd="/",
                capture_output=True,
                text=True,
                check=True,
            )
            results["samples"]["before"] = json.loads(res.stdout)
        for name, row in results["samples"]["after"]["cases"].items():
            before = results["samples"].get("before", {}).get("cases", {}).get(name, {})
            print(f"{name:34} before {before.get('samples', '-'):>4}  after {row['samples']:>4}")
    if "shards" in parts:
        results["shards"] = shards_part(
            args.series,
            args.shards,
            list(range(args.shards)),
            args.shard_limit,
            args.scrapes,
            args.baseline_limit or None,
        )
        _print_shards(results["shards"])
    if "simulate" in parts:
        measure = [int(i) for i in args.sim_measure.split(",")]
        results["simulate"] = shards_part(
            args.sim_series, args.sim_shards, measure, args.sim_limit, args.scrapes, None
        )
        _print_shards(results["simulate"])
    if args.prometheus_minutes > 0:
        results["prometheus"] = prometheus_part(
            args.series,
            args.shards,
            args.shard_limit,
            args.prometheus_minutes,
            args.republish_s,
            args.scrape_interval_s,
        )
        print(json.dumps(results["prometheus"], indent=1))
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["machine"]["ended_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if args.json:
        path = Path(args.json)
        old = json.loads(path.read_text()) if path.exists() else {}
        key = "prometheus" if parts == set() else "benchmarks"
        old[key] = results
        path.write_text(json.dumps(old, indent=1) + "\n")


def _print_shards(res: dict) -> None:
    rows = [(f"shard {r['index']}/{r['count']}", r) for r in res["per_shard"]]
    if "unsharded" in res:
        rows.append(("unsharded", res["unsharded"]))
    print(f"{res['series']} series, {res['shards']} shards: {res['fleet']}")
    for name, r in rows:
        c, u = r["scrape_changed_gzip"], r["scrape_unchanged_gzip"]
        print(
            f"{name:14} own {r['held']} samples {r['samples']} read {r['read']['total_s']} s "
            f"changed {c['median_ms']} (p95 {c['p95_ms']}) unchanged {u['median_ms']} "
            f"(p95 {u['p95_ms']}) rss {r['rss_mb']}"
        )


if __name__ == "__main__":
    main()
