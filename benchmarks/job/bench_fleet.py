"""Benchmark: the live job under a fleet's steady load, per fleet size, on local[2].

    .venv/bin/python benchmarks/job/bench_fleet.py --series 10000 30000 100000

Per size: N series each send one agent-shaped ESTABLISHED summary every 10 s (N/10 events/s,
event time now; ``fleet_load.py``, a process of its own) into a fresh events topic while the job
(``pipeline.start_job``: both queries, real Kafka sinks, default 5 s trigger) runs live in a
fresh driver process (``--driver``, this script). Once the load has run ``--warmup`` s and each
query has completed batch ``--warmup-batches`` (the first batches are JIT warm-up and take much
longer), for ``--duration`` s:

- batch duration vs trigger of both queries (ingest ``aggregates``, ``state``), from Spark's
  progress reports (``recentProgress``), and the events not yet processed at the start and end
  of the period (topic end offsets minus the last completed batch's end offsets);
- detection latency of probes, one every ``--probe-every`` s: a CLOSE_WAIT summary of a new
  series stamped now, timed to its ``close_wait_buildup`` finding (``benchkit.Prober``, as
  ``bench_job.py``);
- CPU seconds / wall seconds ("cores") of the Python driver process (its own threads: the
  ``foreachBatch`` calls, Py4J, the listener, its Kafka producers), of the JVM (in local mode
  Spark's driver *and* its executors; split by thread name), of the executors' Python workers
  (the JVM's descendant processes), of the load generator and of Kafka, all from ``/proc``;
- RSS of the Python driver and of the JVM (sampled every ``--sample-every`` s from the job's
  start; at the start and end of the period, the maximum, and the kernel's peak), the Python
  workers' summed PSS, and the JVM heap (``jstat``).

``--ingest-only`` stops the state query right after the start: the ingest side's own cost at
this load (decode, window aggregation, the records written), without the state query sharing the
cores; no probes then (no findings).

Everything is measured from this (coordinating) process: the driver's only extra work is
answering a few status requests and handing over its progress reports at the end.
Starts its own 1-broker KRaft cluster on 127.0.0.1; stops the job, the load and Kafka at the end,
also on Ctrl-C or failure. Prints one JSON summary per size and a table at the end; figures are
written down in benchmarks/job/README.md by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchkit import (  # noqa: E402
    create_job_topics,
    job_settings,
    percentile,
    start_cluster,
    topic_names,
)

from streaming.job.checkpoint import INGEST_QUERY, STATE_QUERY  # noqa: E402
from streaming.job.settings import JobSettings  # noqa: E402
from streaming.schema.times import epoch  # noqa: E402

APP_NAME = "connmon-bench-fleet"
MARK = "@@fleet "  # prefix of the driver's lines meant for the coordinator
CLK_TCK = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024


# ---- /proc ------------------------------------------------------------------------------------
def proc_stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, CPU s of the process's own threads, CPU s of its reaped children) or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on
    return int(f[1]), (int(f[11]) + int(f[12])) / CLK_TCK, (int(f[13]) + int(f[14])) / CLK_TCK


def proc_status_mb(pid: int, *names: str) -> dict[str, float]:
    """``VmRSS``, ``VmHWM``... of ``/proc/<pid>/status`` in MiB (missing: absent)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in names:
                out[key] = int(value.split()[0]) / 1024
    return out


def pss_mb(pid: int) -> float:
    """Proportional set size (shared pages split between the processes sharing them)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, grandchildren...)."""
    children: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := proc_stat(int(d))) is not None:
            children[st[0]].append(int(d))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Thread id -> (name, CPU s) of every live thread of ``pid``."""
    out: dict[int, tuple[str, float]] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                name = text[text.index("(") + 1 : text.rindex(")")]
                f = text[text.rindex(")") + 2 :].split()
                out[int(tid)] = (name, (int(f[11]) + int(f[12])) / CLK_TCK)
    return out


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(v) - v[3] - v[4]) / CLK_TCK, sum(v) / CLK_TCK


@dataclass
class Sample:
    t: float
    cpu: dict[str, float]  # role -> CPU s since the process started
    mem: dict[str, float]  # MiB
    workers: int
    machine: tuple[float, float]
    threads: dict[int, tuple[str, float]] | None = None  # the JVM's, when asked


@dataclass
class Sampler:
    """CPU and memory of the processes of one run, read from /proc."""

    driver: int
    jvm: int
    load: int | None = None
    kafka: int | None = None

    def sample(self, threads: bool = False) -> Sample:
        cpu: dict[str, float] = {}
        mem: dict[str, float] = {}
        for role, pid in (("driver_python", self.driver), ("jvm", self.jvm),
                          ("load_generator", self.load), ("kafka", self.kafka)):  # fmt: skip
            st = proc_stat(pid) if pid else None
            if st is not None:
                cpu[role] = st[1]
        jvm = proc_stat(self.jvm)
        workers = descendants(self.jvm)
        # Python workers (pyspark.daemon and its forks): live ones, plus those already reaped
        # (their time is in their parent's children fields).
        cpu["python_workers"] = (jvm[2] if jvm else 0.0) + sum(
            st[1] + st[2] for p in workers if (st := proc_stat(p)) is not None
        )
        for role, pid in (("driver_python", self.driver), ("jvm", self.jvm)):
            m = proc_status_mb(pid, "VmRSS", "VmHWM")
            if "VmRSS" in m:
                mem[f"{role}_rss"], mem[f"{role}_hwm"] = m["VmRSS"], m["VmHWM"]
        mem["python_workers_pss"] = sum(pss_mb(p) for p in workers)
        return Sample(
            time.time(), cpu, mem, len(workers), machine_cpu(),
            thread_cpu(self.jvm) if threads else None,
        )  # fmt: skip


def _number(text: str) -> bool:
    return text.replace(".", "", 1).isdigit()


class JStat:
    """``jstat -gc <jvm> <ms>``: the JVM's heap (MiB) and GC time, sampled by the JVM itself
    (read from its perf-data file; nothing runs in the JVM)."""

    def __init__(self, pid: int, every_s: float) -> None:
        self.rows: list[tuple[float, dict[str, float]]] = []
        self.proc: subprocess.Popen[str] | None = None
        exe = shutil.which("jstat")
        if exe is None:
            return
        self.proc = subprocess.Popen(
            [exe, "-gc", str(pid), f"{int(every_s * 1000)}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        header: list[str] = []
        for line in self.proc.stdout:
            cols = line.split()
            if cols and cols[0] == "S0C":
                header = cols
            elif header and len(cols) == len(header):
                row = {h: float(c) for h, c in zip(header, cols, strict=True) if _number(c)}
                self.rows.append((time.time(), row))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)

    def summary(self, t0: float, t1: float) -> dict[str, Any]:
        rows = [(t, r) for t, r in self.rows if t0 <= t <= t1]
        if not rows:
            return {}

        def used(r: dict[str, float]) -> float:
            return sum(r.get(k, 0.0) for k in ("S0U", "S1U", "EU", "OU")) / 1024

        gc = rows[-1][1].get("GCT", 0.0) - rows[0][1].get("GCT", 0.0)
        return {
            "used_max_mb": round(max(used(r) for _, r in rows)),
            "committed_max_mb": round(
                max(sum(r.get(k, 0.0) for k in ("S0C", "S1C", "EC", "OC")) for _, r in rows) / 1024
            ),
            "old_used_start_mb": round(rows[0][1].get("OU", 0.0) / 1024),
            "old_used_end_mb": round(rows[-1][1].get("OU", 0.0) / 1024),
            "gc_s": round(gc, 2),
            "gc_cores": round(gc / (rows[-1][0] - rows[0][0]), 3) if len(rows) > 1 else None,
        }


def note(text: str) -> None:
    """Progress, on stderr."""
    print(text, file=sys.stderr, flush=True)


# ---- child processes -------------------------------------------------------------------------
class Child:
    """A process of this run whose stdout lines (JSON, after ``prefix``) are queued."""

    def __init__(self, cmd: list[str], log: IO[str], prefix: str = "", stdin: bool = False):
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        )  # fmt: skip
        self.prefix = prefix
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(self.prefix):
                with contextlib.suppress(ValueError):
                    self.lines.put(json.loads(line[len(self.prefix) :]))
        self.lines.put(None)  # end of output

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def expect(self, key: str, timeout_s: float) -> dict[str, Any]:
        """The next line holding ``key`` (others are dropped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no {key!r} from pid {self.pid} in {timeout_s:.0f} s") from None
            if msg is None:
                raise RuntimeError(f"pid {self.pid} ended (exit {self.proc.wait()}) before {key!r}")
            if key in msg:
                return msg

    def stop(self, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``."""
        if self.alive():
            self.proc.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def stop_jvm(pid: int | None, wait_s: float = 20.0) -> None:
    """The driver's JVM exits when the driver does (its stdin closes); if it has not after
    ``wait_s``, SIGTERM it, by pid and only if it is this benchmark's JVM."""
    if not pid:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc_stat(pid) is None:
            return
        time.sleep(0.5)
    with contextlib.suppress(OSError):
        if APP_NAME in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            os.kill(pid, signal.SIGTERM)


# ---- the driver process --------------------------------------------------------------------
def run_driver(args: argparse.Namespace) -> int:
    """The job's driver for one size: start the job, say so, serve ``status`` and ``stop``
    from stdin, and on ``stop`` print both queries' progress reports and stop everything."""
    from streaming.job.pipeline import start_job
    from streaming.stack.spark import local_session

    for sig in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: a background job ignores it
        signal.signal(sig, signal.default_int_handler)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("streaming.job.ingest").setLevel(logging.INFO)  # the batch log, as live

    def say(**msg: Any) -> None:
        print(MARK + json.dumps(msg), flush=True)

    spark = local_session(
        app_name=APP_NAME,
        master=args.master,
        conf={
            "spark.sql.streaming.numRecentProgressUpdates": "5000",
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        },
    )
    job = None
    try:
        s = job_settings(
            args.bootstrap, topic_names(args.prefix, partials=True), checkpoint=args.checkpoint,
            trigger=f"{args.trigger:g}s", state_buckets=args.state_buckets, master=args.master,
        )  # fmt: skip
        job = start_job(spark, s)
        if args.ingest_only:  # the ingest side's floor: the state query stopped once started
            for q in [q for q in job.queries if q.name == STATE_QUERY]:
                q.stop()
                job.queries.remove(q)
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        say(ready=True, jvm_pid=jvm_pid)

        def failures() -> dict[str, str]:
            return {q.name: str(q.exception()) for q in job.queries if q.exception() is not None}

        codegen = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
        for line in sys.stdin:
            if line.strip() == "status":
                batches = {q.name: (q.lastProgress or {}).get("batchId", -1) for q in job.queries}
                compiled = codegen.METRIC_COMPILATION_TIME()  # Janino: one per generated class
                say(status={q.name: q.isActive for q in job.queries}, errors=failures(),
                    batches=batches, codegen_classes=compiled.getCount(),
                    codegen_ms_mean=compiled.getSnapshot().getMean())  # fmt: skip
            elif line.strip() == "stop":
                break
        progress = {q.name: [json.loads(p.json) for p in q.recentProgress] for q in job.queries}
        say(progress=progress, errors=failures())
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if job is not None:
            job.stop()
        spark.stop()
    return 0


# ---- analysis ----------------------------------------------------------------------------------
def offsets_sum(value: Any) -> int:
    """Sum of a Kafka source's offsets (``{"topic": {"0": 12, ...}}``, maybe as a string)."""
    if isinstance(value, str):
        value = json.loads(value)
    return sum(int(o) for parts in (value or {}).values() for o in parts.values())


def real_batches(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Progress reports of batches that ran (not idle reports), one per batch id, by time."""
    by_id = {p["batchId"]: p for p in progress if "addBatch" in (p.get("durationMs") or {})}
    return sorted(by_id.values(), key=lambda p: epoch(p["timestamp"]))


def batch_stats(batches: list[dict[str, Any]], t0: float, t1: float, trigger_s: float) -> dict:
    """Batches started within [t0, t1): durations vs the trigger, spacing, rows."""
    inwin = [p for p in batches if t0 <= epoch(p["timestamp"]) < t1]
    if not inwin:
        return {"batches": 0}
    d = sorted(p["durationMs"]["triggerExecution"] / 1000 for p in inwin)
    starts = [epoch(p["timestamp"]) for p in inwin]
    rows = [int(p.get("numInputRows") or 0) for p in inwin]
    third = max(1, len(inwin) // 3)
    seq = [p["durationMs"]["triggerExecution"] / 1000 for p in inwin]
    return {
        "batches": len(inwin),
        "duration_mean_s": round(statistics.fmean(d), 2),
        "duration_p50_s": round(percentile(d, 0.5), 2),
        "duration_p95_s": round(percentile(d, 0.95), 2),
        "duration_max_s": round(d[-1], 2),
        "mean_to_trigger": round(statistics.fmean(d) / trigger_s, 2),
        "over_trigger": sum(x > trigger_s for x in d),
        "add_batch_mean_s": round(
            statistics.fmean(p["durationMs"]["addBatch"] / 1000 for p in inwin), 2
        ),
        "start_interval_mean_s": (
            round((starts[-1] - starts[0]) / (len(starts) - 1), 2) if len(starts) > 1 else None
        ),
        "duration_first_third_mean_s": round(statistics.fmean(seq[:third]), 2),
        "duration_last_third_mean_s": round(statistics.fmean(seq[-third:]), 2),
        "input_rows": sum(rows),
        "input_rows_per_batch_mean": round(statistics.fmean(rows)),
    }


def processed_offsets(batches: list[dict[str, Any]], t: float) -> int | None:
    """End offsets (summed) of the newest batch completed by ``t``."""
    done = [
        p for p in batches
        if epoch(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000 <= t
    ]  # fmt: skip
    return offsets_sum(done[-1]["sources"][0]["endOffset"]) if done else None


def topic_end(bootstrap: str, topic: str) -> int:
    """Sum of the topic's end offsets (high watermarks) now."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-fleet-offsets"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        c.close()


def probe_stats(sent: dict[str, float], answered: dict[str, float], end: float) -> dict[str, Any]:
    """Latency p50/p95/max over the probes sent; a probe never answered counts with a lower
    bound (``end`` - sent), and then the percentiles it reaches are lower bounds too."""
    if not sent:
        return {"sent": 0}
    lat = {h: answered.get(h, end - t) for h, t in sent.items()}
    ordered = sorted(lat.values())
    missing = [h for h in sent if h not in answered]
    by_time = [lat[h] for h in sorted(sent, key=sent.__getitem__)]
    third = max(1, len(by_time) // 3)
    return {
        "sent": len(sent),
        "detected": len(sent) - len(missing),
        "p50_s": round(percentile(ordered, 0.5), 2),
        "p95_s": round(percentile(ordered, 0.95), 2),
        "max_s": round(ordered[-1], 2),
        "lower_bounds": bool(missing),  # some probes never answered: their latency is at least
        "first_third_median_s": round(statistics.median(by_time[:third]), 2),
        "last_third_median_s": round(statistics.median(by_time[-third:]), 2),
    }


def thread_groups(a: dict[int, tuple[str, float]], b: dict[int, tuple[str, float]]) -> dict:
    """CPU s per JVM thread name (digits folded) between two snapshots; threads that ended in
    between are missing from both and show as the process total minus the sum."""
    out: dict[str, float] = defaultdict(float)
    for tid, (name, cpu) in b.items():
        out[re.sub(r"\d+", "#", name)] += cpu - a.get(tid, (name, 0.0))[1]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


JVM_KINDS = (  # thread name prefixes (Linux keeps 15 characters)
    ("executor_tasks", ("Executor task",)),
    ("jit_compiler", ("C1 CompilerThre", "C2 CompilerThre", "Sweeper thread")),
    ("gc", ("GC Thread", "G1 ", "VM Thread", "VM Periodic")),
)


def thread_kinds(groups: dict[str, float]) -> dict[str, float]:
    """JVM CPU s by kind of thread: executor tasks, the JIT compiler, GC, and the rest (the
    Spark driver's query threads, scheduler, listener bus, RPC, Kafka clients...)."""
    out = dict.fromkeys([k for k, _ in JVM_KINDS] + ["driver_and_other"], 0.0)
    for name, cpu in groups.items():
        plain = name.replace("#", "1")
        kind = next((k for k, pre in JVM_KINDS if plain.startswith(pre)), "driver_and_other")
        out[kind] += cpu
    return out


def analyse(run: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The size's JSON summary from what ``run_size`` gathered."""
    n, trigger_s = run["series"], run["trigger_s"]
    t0, t1 = run["t_start"], run["t_end"]
    wall = t1 - t0
    s0, s1 = run["s_start"], run["s_end"]
    samples: list[Sample] = run["samples"]
    prog = {k: real_batches(v) for k, v in run["progress"].items()}
    ingest = batch_stats(prog.get(INGEST_QUERY, []), t0, t1, trigger_s)
    state = batch_stats(prog.get(STATE_QUERY, []), t0, t1, trigger_s)
    target = n / args.interval

    # the load generator's own account, over the period
    stats = [m for m in run["load_lines"] if m["type"] == "stats"]
    before = [m for m in stats if m["t"] <= t0]
    inside = [m for m in stats if t0 < m["t"] <= t1]
    achieved = None
    if before and inside:
        achieved = (inside[-1]["sent"] - before[-1]["sent"]) / (inside[-1]["t"] - before[-1]["t"])
    behind = max((m["max_behind_s"] for m in inside), default=None)
    errors = max((m["delivery_errors"] for m in stats), default=0)
    load_ok = achieved is not None and achieved >= 0.98 * target and (behind or 0) <= 1.0

    # events not processed yet: topic end - end offsets of the newest completed batch
    lag: dict[str, Any] = {}
    for name, q, key in (("ingest", INGEST_QUERY, "events"), ("state", STATE_QUERY, "partials")):
        a = processed_offsets(prog.get(q, []), t0)
        b = processed_offsets(prog.get(q, []), t1)
        if a is not None and b is not None:
            lag[f"{name}_unprocessed_start"] = run["ends_start"][key] - a
            lag[f"{name}_unprocessed_end"] = run["ends_end"][key] - b
    if "ingest_unprocessed_end" in lag:
        lag["ingest_lag_start_s"] = round(lag["ingest_unprocessed_start"] / target, 1)
        lag["ingest_lag_end_s"] = round(lag["ingest_unprocessed_end"] / target, 1)
        lag["ingest_lag_growth_s_per_min"] = round(
            (lag["ingest_lag_end_s"] - lag["ingest_lag_start_s"]) / wall * 60, 2
        )

    sent = {m["host"]: m["sent_t"] for m in run["load_lines"] if m["type"] == "probe_sent"}
    answered = {m["host"]: m["latency_s"] for m in run["load_lines"] if m["type"] == "probe"}
    probes = probe_stats(sent, answered, run["t_probes_done"])
    final = next((m for m in run["load_lines"] if m["type"] == "final"), {})

    def cores(role: str) -> float | None:
        if role not in s0.cpu or role not in s1.cpu:
            return None
        return round((s1.cpu[role] - s0.cpu[role]) / wall, 3)

    groups = thread_groups(s0.threads or {}, s1.threads or {})
    jvm_s = s1.cpu["jvm"] - s0.cpu["jvm"]
    task_s = sum(v for k, v in groups.items() if k.startswith("Executor task"))
    cpu = {r: cores(r) for r in ("driver_python", "jvm", "python_workers", "load_generator",
                                  "kafka")}  # fmt: skip
    whole_s = sum(s1.cpu[r] - s0.cpu[r] for r in ("driver_python", "jvm", "python_workers"))
    driver_s = s1.cpu["driver_python"] - s0.cpu["driver_python"]
    executors_s = task_s + s1.cpu["python_workers"] - s0.cpu["python_workers"]
    cpu.update(
        jvm_executor_task_threads=round(task_s / wall, 3),
        jvm_other_threads=round((jvm_s - task_s) / wall, 3),
        whole_job=round(whole_s / wall, 3),
        executors=round(executors_s / wall, 3),
        machine_busy=round((s1.machine[0] - s0.machine[0]) / (s1.machine[1] - s0.machine[1]), 3),
    )
    # cost per 1000 series and batch: CPU s per trigger's worth of fleet load processed (events
    # of the batches completed within the period)
    done0 = processed_offsets(prog.get(INGEST_QUERY, []), t0)
    done1 = processed_offsets(prog.get(INGEST_QUERY, []), t1)
    processed = done1 - done0 if done0 is not None and done1 is not None else 0
    worth = processed / (target * trigger_s) if processed else None
    cost: dict[str, Any] = {}
    if worth:
        per = 1000 / n / worth
        cost = {
            "batches_worth_processed": round(worth, 1),
            "whole_cpu_s_per_batch": round(whole_s / worth, 3),
            "executors_cpu_s_per_batch": round(executors_s / worth, 3),
            "whole_cpu_s_per_1000_series_per_batch": round(whole_s * per, 4),
            "executors_cpu_s_per_1000_series_per_batch": round(executors_s * per, 4),
            "driver_cpu_s_per_batch": round(driver_s / worth, 3),
        }
        cost["series_per_core_at_trigger"] = round(
            trigger_s / cost["whole_cpu_s_per_1000_series_per_batch"] * 1000
        )

    def mem(key: str) -> dict[str, Any]:
        vals = [s.mem[key] for s in samples if key in s.mem and s.t <= t1]
        if not vals or key not in s0.mem or key not in s1.mem:
            return {}
        return {"job_started": round(vals[0]), "start": round(s0.mem[key]),
                "max": round(max(vals)), "end": round(s1.mem[key])}  # fmt: skip

    rss = {
        "driver_python": {
            **mem("driver_python_rss"),
            "peak": round(s1.mem.get("driver_python_hwm", 0)),
        },
        "jvm": {**mem("jvm_rss"), "peak": round(s1.mem.get("jvm_hwm", 0))},
        "python_workers_pss": mem("python_workers_pss"),
        "python_workers": s1.workers,
    }
    # Keeping up is about the input: each query's backlog at the end is at most what arrives in
    # two triggers plus its longest batch, and every probe is answered. Batches longer than the
    # trigger run back to back (Spark starts the next one at once), which costs latency, measured
    # by the probes, not throughput; ``within_trigger`` says whether there is headroom left.
    state_rate = state.get("input_rows", 0) / wall
    ingest_keeps_up = lag.get("ingest_lag_end_s", 99) <= 2 * trigger_s + ingest.get(
        "duration_max_s", 0
    )
    keeps_up = ingest_keeps_up and (
        args.ingest_only
        or (
            lag.get("state_unprocessed_end", float("inf"))
            <= state_rate * (2 * trigger_s + state.get("duration_max_s", 0))
            and probes.get("detected") == probes.get("sent")
        )
    )
    within_trigger = ingest.get("mean_to_trigger", 99) <= 1.0 and (
        args.ingest_only or state.get("mean_to_trigger", 99) <= 1.0
    )
    return {
        "series": n,
        "queries": "ingest only" if args.ingest_only else "both",
        "hosts": -(-n // args.brokers),
        "trigger_s": trigger_s,
        "warmup_s": run["warmup_s"],
        "duration_s": round(wall, 1),
        "load": {
            "target_events_per_s": round(target),
            "achieved_events_per_s": round(achieved) if achieved is not None else None,
            "max_behind_schedule_s": behind,
            "delivery_errors": errors,
            "kept_up": load_ok,
            "events_sent_total": final.get("sent"),
        },
        "ingest": ingest,
        "state": state,
        "lag": lag,
        "probes": probes,
        "other_findings": final.get("other_findings"),
        "cpu_cores": cpu,
        "jvm_threads_cores": {k: round(v / wall, 3) for k, v in list(groups.items())[:12]},
        "jvm_cores_by_kind": {k: round(v / wall, 3) for k, v in thread_kinds(groups).items()},
        # Spark classes generated and compiled (Janino) in the period, and per ingest batch
        "codegen_classes": run["codegen_classes"],
        "codegen_classes_per_ingest_batch": (
            round(run["codegen_classes"] / ingest["batches"], 1) if ingest["batches"] else None
        ),
        "codegen_ms_mean": round(run["codegen_ms_mean"], 1),
        "jvm_threads_ended_cores": round((jvm_s - sum(groups.values())) / wall, 3),
        "cost": cost,
        "rss_mb": rss,
        "jvm_heap": run["heap"],
        "job_errors": run["errors"],
        "keeps_up": keeps_up,
        "within_trigger": within_trigger,
    }


# ---- one size ----------------------------------------------------------------------------------
def delete_topics(bootstrap: str, names: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(list(names.values()), operation_timeout=30).values():
        with contextlib.suppress(Exception):
            fut.result(30)


def run_size(n: int, args: argparse.Namespace, bootstrap: str, kafka_pid: int | None,
             work: Path) -> dict[str, Any]:  # fmt: skip
    """Run the job and the load for one fleet size; gather what ``analyse`` needs."""
    prefix = f"fleet{n}"
    names = topic_names(prefix, partials=True)
    create_job_topics(bootstrap, names, args.partitions)
    log_path = work / f"size-{n}.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below, after the children
    driver = load = None
    jvm_pid: int | None = None
    jstat: JStat | None = None
    note(f"[{n} series] starting the job (log: {log_path})")
    try:
        driver = Child(
            [sys.executable, __file__, "--driver", "--bootstrap", bootstrap, "--prefix", prefix,
             "--checkpoint", str(work / f"checkpoint-{n}"), "--master", args.master,
             "--trigger", str(args.trigger), "--state-buckets", str(args.state_buckets),
             "--shuffle-partitions", str(args.shuffle_partitions),
             *(["--ingest-only"] if args.ingest_only else [])],
            log, prefix=MARK, stdin=True,
        )  # fmt: skip
        jvm_pid = driver.expect("ready", args.start_timeout)["jvm_pid"]
        t_ready = time.time()
        samples = [Sampler(driver.pid, jvm_pid).sample()]  # before any load
        load = Child(
            [sys.executable, str(HERE / "fleet_load.py"), "--bootstrap", bootstrap,
             "--topic", names["events"], "--findings-topic", names["findings"],
             "--series", str(n), "--brokers", str(args.brokers),
             "--interval", str(args.interval), "--probe-every", str(args.probe_every),
             "--probe-prefix", f"probe{n}-"],
            log, stdin=True,
        )  # fmt: skip
        jstat = JStat(jvm_pid, args.sample_every)
        sampler = Sampler(driver.pid, jvm_pid, load.pid, kafka_pid)
        load_lines: list[dict[str, Any]] = []

        def drain() -> None:
            while True:
                try:
                    msg = load.lines.get_nowait()
                except queue.Empty:
                    return
                if msg is not None:
                    load_lines.append(msg)

        def wait_until(t: float) -> None:
            while (left := t - time.time()) > 0:
                time.sleep(min(left, args.sample_every))
                samples.append(sampler.sample())
                drain()
                if not driver.alive() or not load.alive():
                    who = "driver" if not driver.alive() else "load generator"
                    raise RuntimeError(f"the {who} ended early; see {log_path}")

        def status() -> dict[str, Any]:
            """Each query's newest completed batch, Spark's code generation so far; fails when
            the job stopped."""
            driver.send("status")
            st = driver.expect("status", 60)
            if st["errors"] or not all(st["status"].values()):
                raise RuntimeError(f"the job is not running: {st}; see {log_path}")
            return st

        note(
            f"[{n} series] job started; warm-up: at least {args.warmup:.0f} s and batch "
            f"{args.warmup_batches} of each query"
        )
        wait_until(t_ready + args.warmup)
        # JIT compilation and the first batches' start-up take minutes on a busy machine
        while min(status()["batches"].values()) < args.warmup_batches:
            if time.time() > t_ready + args.warmup_max:
                raise RuntimeError(f"no {args.warmup_batches} batches in {args.warmup_max} s")
            wait_until(time.time() + args.sample_every)
        t_start = time.time()
        t_end = t_start + args.duration
        if not args.ingest_only:  # no state query: no findings to probe for
            load.send(f"probe {t_start} {t_end}")
        note(f"[{n} series] measuring {args.duration:.0f} s from {t_start - t_ready:.0f} s")
        s_start = sampler.sample(threads=True)
        ends_start = {k: topic_end(bootstrap, names[k]) for k in ("events", "partials")}
        st_start = status()
        wait_until(t_end)
        st_end = status()
        s_end = sampler.sample(threads=True)
        ends_end = {k: topic_end(bootstrap, names[k]) for k in ("events", "partials")}
        samples.append(s_end)
        # the last probes: answered, or given up after --probe-timeout
        deadline = time.time() + (0 if args.ingest_only else args.probe_timeout)
        while time.time() < deadline:
            drain()
            sent = sum(m["type"] == "probe_sent" for m in load_lines)
            if sent and sum(m["type"] == "probe" for m in load_lines) >= sent:
                break
            time.sleep(0.5)
        t_probes_done = time.time()
        load.stop(30)
        load.proc.wait()
        time.sleep(0.5)
        drain()
        jstat.stop()
        driver.send("stop")
        out = driver.expect("progress", 300)
        driver.proc.wait(180)
        return {
            "series": n, "trigger_s": args.trigger, "t_start": t_start, "t_end": t_end,
            "warmup_s": round(t_start - t_ready, 1),
            "s_start": s_start, "s_end": s_end, "samples": samples, "progress": out["progress"],
            "errors": out["errors"], "ends_start": ends_start, "ends_end": ends_end,
            "load_lines": load_lines, "t_probes_done": t_probes_done,
            "heap": jstat.summary(t_start, t_end),
            "codegen_classes": st_end["codegen_classes"] - st_start["codegen_classes"],
            "codegen_ms_mean": st_end["codegen_ms_mean"],
        }  # fmt: skip
    finally:
        for child, grace in ((load, 15), (driver, 120)):
            if child is not None:
                child.stop(grace)
        if jstat is not None:
            jstat.stop()
        stop_jvm(jvm_pid)
        log.close()
        with contextlib.suppress(Exception):
            delete_topics(bootstrap, names)
        shutil.rmtree(work / f"checkpoint-{n}", ignore_errors=True)


# ---- output ------------------------------------------------------------------------------------
def table(results: list[dict[str, Any]]) -> str:
    """The sizes side by side, as a Markdown table."""

    def f(v: Any, fmt: str = "{}") -> str:
        return "" if v is None else fmt.format(v)

    def three(d: dict[str, Any]) -> str:
        return f"{f(d.get('start'))} / {f(d.get('max'))} / {f(d.get('end'))}"

    lines = [
        "| series | events/s achieved (target) | ingest batch mean / p95 s | state batch mean / "
        "p95 s | ingest lag start -> end s | probes p50 / p95 s (detected/sent) | driver Python "
        "cores | JVM cores (task threads) | Python workers cores | whole job CPU s per batch (per "
        "1000 series) | driver Python RSS MB start / max / end | JVM RSS MB start / max / "
        "end | keeps up |",
        "|" + "---|" * 13,
    ]
    for r in results:
        ld, i, s, lag, p, c = (r["load"], r["ingest"], r["state"], r["lag"], r["probes"],
                               r["cpu_cores"])  # fmt: skip
        lb = "≥" if p.get("lower_bounds") else ""
        lines.append(
            f"| {r['series']:,} | {f(ld['achieved_events_per_s'], '{:,}')} "
            f"({ld['target_events_per_s']:,}){'' if ld['kept_up'] else ' (load behind)'} "
            f"| {f(i.get('duration_mean_s'))} / {f(i.get('duration_p95_s'))} "
            f"| {f(s.get('duration_mean_s'))} / {f(s.get('duration_p95_s'))} "
            f"| {f(lag.get('ingest_lag_start_s'))} -> {f(lag.get('ingest_lag_end_s'))} "
            f"| {lb}{f(p.get('p50_s'))} / {lb}{f(p.get('p95_s'))} "
            f"({p.get('detected', 0)}/{p.get('sent', 0)}) "
            f"| {f(c['driver_python'])} | {f(c['jvm'])} ({f(c['jvm_executor_task_threads'])}) "
            f"| {f(c['python_workers'])} "
            f"| {f(r['cost'].get('whole_cpu_s_per_batch'))} "
            f"({f(r['cost'].get('whole_cpu_s_per_1000_series_per_batch'))}) "
            f"| {three(r['rss_mb']['driver_python'])} | {three(r['rss_mb']['jvm'])} "
            f"| {'yes' if r['keeps_up'] else 'no'}"
            f"{'' if r.get('within_trigger', True) else ' (batches over the trigger)'} |"
        )
    return "\n".join(lines)


def scaling(results: list[dict[str, Any]], trigger_s: float) -> list[str]:
    """CPU s per batch = fixed + marginal x series, least squares over the sizes run: the
    marginal cost per 1000 series and what N cores would hold at the trigger."""
    out = []
    for part in ("whole", "executors"):
        pts = [(r["series"] / 1000, r["cost"][f"{part}_cpu_s_per_batch"])
               for r in results if r["cost"]]  # fmt: skip
        if len(pts) < 2:
            continue
        mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        if not sxx:
            continue
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        fixed = my - slope * mx
        line = (f"{part} CPU s per batch ~ {fixed:.3f} + {slope:.4f} per 1000 series "
                f"(least squares over {len(pts)} sizes)")  # fmt: skip
        if slope > 0:
            cap = ", ".join(f"{k} cores ~{max(0, (k * trigger_s - fixed) / slope):,.0f}k"
                            for k in (2, 8, 32))  # fmt: skip
            line += f"; series at a {trigger_s:g} s trigger: {cap}"
        out.append(line)
    return out


def goals(results: list[dict[str, Any]]) -> list[str]:
    """The plan's goals, checked against the largest and the smallest size run."""
    if not results:
        return []
    small, big = results[0], results[-1]
    p = big["probes"]
    if big.get("queries") == "ingest only":
        return [
            f"ingest only, largest size ({big['series']:,} series): batches "
            f"{big['ingest'].get('mean_to_trigger')}x the trigger, "
            f"{big['cost'].get('whole_cpu_s_per_batch')} CPU s per batch's worth, "
            f"keeps up: {'yes' if big['keeps_up'] else 'no'}"
        ]
    out = [
        f"largest size ({big['series']:,} series) keeps up with p95 <= 30 s: "
        f"{'yes' if big['keeps_up'] and p.get('p95_s', 99) <= 30 else 'no'} (batches "
        f"{big['ingest'].get('mean_to_trigger')}x / {big['state'].get('mean_to_trigger')}x the "
        f"trigger, p95 {'>= ' if p.get('lower_bounds') else ''}{p.get('p95_s')} s)"
    ]
    if len(results) > 1:
        for role in ("driver_python", "jvm"):
            a, b = small["rss_mb"][role].get("max"), big["rss_mb"][role].get("max")
            if a and b:
                out.append(
                    f"{role} RSS max {a} -> {b} MB from {small['series']:,} to {big['series']:,} "
                    f"series: {100 * (b - a) / a:+.0f}% (goal: within 20%)"
                )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    ap.add_argument("--warmup", type=float, default=60.0, help="at least this many s under load")
    ap.add_argument("--warmup-batches", type=int, default=3,
                    help="and until each query has completed batches past this id")  # fmt: skip
    ap.add_argument("--warmup-max", type=float, default=600.0, help="s: give up after")
    ap.add_argument("--duration", type=float, default=180.0, help="measured period, s")
    ap.add_argument("--trigger", type=float, default=5.0, help="the job's trigger, s")
    ap.add_argument("--interval", type=float, default=10.0, help="summary interval, s")
    ap.add_argument("--brokers", type=int, default=3, help="series per host")
    ap.add_argument("--probe-every", type=float, default=5.0, help="s")
    ap.add_argument("--probe-timeout", type=float, default=120.0,
                    help="s to wait for the last probes' findings after the period")  # fmt: skip
    ap.add_argument("--partitions", type=int, default=2, help="of the events topic")
    ap.add_argument("--state-buckets", type=int, default=256)
    ap.add_argument(
        "--shuffle-partitions",
        type=int,
        default=JobSettings.shuffle_partitions,
        help="state-store partitions (and the ingest aggregation's)",
    )
    ap.add_argument("--ingest-only", action="store_true",
                    help="stop the state query once started: the ingest side's floor at this "
                    "load (no probes)")  # fmt: skip
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--sample-every", type=float, default=2.0, help="s")
    ap.add_argument("--start-timeout", type=float, default=300.0, help="s for the job to start")
    # the driver process of one size (run by this script)
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        return run_driver(args)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.default_int_handler)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    machine = f"{platform.system()} {platform.release()}, {os.cpu_count()} cores"
    work = Path(tempfile.mkdtemp(prefix="connmon-bench-fleet-"))
    results: list[dict[str, Any]] = []
    cluster = start_cluster("connmon-bench-fleet")
    try:
        kafka_pid = cluster.nodes[0].pid if cluster.nodes else None
        for n in args.series:
            load_avg = os.getloadavg()[0]
            run = run_size(n, args, cluster.bootstrap_servers, kafka_pid, work)
            result = {"machine": machine, "master": args.master, "load_average_before": load_avg,
                      **analyse(run, args)}  # fmt: skip
            results.append(result)
            print(json.dumps(result), flush=True)
            ld = result["load"]
            if not ld["kept_up"]:
                note(
                    f"[{n} series] the load generator did not keep up: "
                    f"{ld['achieved_events_per_s']} of {ld['target_events_per_s']} events/s"
                )
    finally:
        cluster.stop()
        note(f"logs: {work}")
    print(table(results))
    for line in goals(results) + scaling(results, args.trigger):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
