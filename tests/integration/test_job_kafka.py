"""The job against a real Kafka broker (KRaft): canned events in, findings, aggregates, dead
letters and job status out; SIGKILL + restart from the checkpoint; a Spark standalone cluster."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streaming.detectors.config import DetectorConfig
from streaming.job.pipeline import replay, start_job
from streaming.job.settings import JobSettings
from streaming.stack.kafka import create_topics

FIXTURES = Path(__file__).parents[1] / "fixtures" / "events"
REPO = Path(__file__).parents[2]
CONNMON = str(REPO / ".venv" / "bin" / "connmon")


def _generator():
    spec = importlib.util.spec_from_file_location("events_generate", FIXTURES / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["events_generate"] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _generator()


# ---- helpers ---------------------------------------------------------------------------------
class Topics:
    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.events = f"{prefix}.events"
        self.aggregates = f"{prefix}.aggregates"
        self.findings = f"{prefix}.findings"
        self.deadletter = f"{prefix}.deadletter"
        self.status = f"{prefix}.job-status"
        self.partials = f"{prefix}.partials"
        create_topics(bootstrap, {self.events: 2, self.deadletter: 1, self.partials: 2})
        create_topics(
            bootstrap,
            {self.aggregates: 1, self.findings: 1, self.status: 1},
            config={"cleanup.policy": "compact"},
        )

    def settings(self, **kw: Any) -> JobSettings:
        base: dict[str, Any] = dict(
            bootstrap_servers=self.bootstrap,
            events_topic=self.events,
            aggregates_topic=self.aggregates,
            findings_topic=self.findings,
            deadletter_topic=self.deadletter,
            status_topic=self.status,
            partials_topic=self.partials,
            state_buckets=16,  # a few series each: each bucket costs a Python call per batch
            trigger="1s",
            starting_offsets="earliest",
            shuffle_partitions=2,
        )
        s = JobSettings(**(base | kw))
        return s.validate()

    def cli_args(self) -> list[str]:
        return [
            "--bootstrap-servers", self.bootstrap, "--events-topic", self.events,
            "--aggregates-topic", self.aggregates, "--findings-topic", self.findings,
            "--deadletter-topic", self.deadletter, "--status-topic", self.status,
            "--partials-topic", self.partials, "--state-buckets", "16",
            "--trigger", "1s", "--starting-offsets", "earliest", "--shuffle-partitions", "2",
        ]  # fmt: skip


def produce(bootstrap: str, topic: str, lines: list[str] | list[bytes], key: str = "host") -> None:
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "message.max.bytes": 1048576,  # the broker's default limit, not librdkafka's lower one
        }
    )
    for line in lines:
        p.produce(
            topic,
            key=key.encode(),
            value=line if isinstance(line, bytes) else line.encode(),
            on_delivery=lambda err, _m: errors.append(str(err)) if err else None,
        )
        p.poll(0)
    assert p.flush(60) == 0 and errors == []


def consume_all(bootstrap: str, topic: str) -> list[tuple[str, dict[str, Any]]]:
    """Every (key, value) in the topic right now, in order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    try:
        md = c.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.topics[topic].partitions]
        ends = {p.partition: c.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        c.assign(parts)
        out: list[tuple[str, dict[str, Any]]] = []
        pos = {p.partition: 0 for p in parts}
        deadline = time.monotonic() + 30
        while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            pos[msg.partition()] = msg.offset() + 1
            out.append((msg.key().decode(), json.loads(msg.value())))
        return out
    finally:
        c.close()


def wait_for(what: str, fn: Callable[[], Any], timeout_s: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = fn()
        if result:
            return result
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def recording(name: str, end: float | None = None, **kw: Any) -> list[dict[str, Any]]:
    """A scenario whose last event is at ``end`` (default: now)."""
    events = gen.SCENARIOS[name](0.0, **kw)
    last = max(gen_epoch(e["event_time"]) for e in events)
    return list(gen.shifted(events, (end or time.time()) - last))


def gen_epoch(text: str) -> float:
    from streaming.schema.times import epoch

    return epoch(text)


def lines(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(e) for e in events]


def latest_by_key(records: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in records}


# ---- in-process job ----------------------------------------------------------------------
def test_canned_events_give_findings_aggregates_dead_letters_and_status(
    kafka_cluster, spark, unique_name, tmp_path
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    produce(t.bootstrap, t.events, gen.MALFORMED, key="bad")
    # A URI, as for hdfs: or s3a:, goes through Hadoop's filesystem API like Spark's own.
    job = start_job(spark, t.settings(checkpoint=f"file://{tmp_path}/ckpt"))
    try:

        def cw_finding():
            found = latest_by_key(consume_all(t.bootstrap, t.findings))
            f = found.get("close_wait_buildup|client:app-7:payments-sarama|prod-eu|2")
            return f if f and f["evidence"]["close_wait_count"] == 7 else None

        f = wait_for("close_wait_buildup finding", cw_finding)
        assert f["status"] == "firing" and f["severity"] in ("warning", "critical")
        assert f["schema"] == 1 and f["side"] == "client" and f["broker_endpoint"]
        assert set(f) >= {
            "kind", "severity", "status", "side", "host", "app", "broker_id", "broker_endpoint",
            "peer_host", "window_start", "window_end", "evidence", "summary", "recommendation",
            "key", "updated_at",
        }  # fmt: skip

        n_bad = len(gen.MALFORMED)
        dead = wait_for(
            f"{n_bad} dead letters",
            lambda: (d := consume_all(t.bootstrap, t.deadletter)) and len(d) >= n_bad and d,
        )
        reasons = sorted(v["reason"] for _, v in dead)
        assert reasons == sorted(gen.MALFORMED_REASONS)
        assert all(v["raw"] and v["topic"] == t.events for _, v in dead)
        # a dead letter keeps a bounded prefix of the record, its size and its hash
        big = next(v for _, v in dead if v["reason"] == "too_large")
        raw = next(line.encode() for line in gen.MALFORMED if len(line) > 16384)
        assert base64.b64decode(big["raw"]) == raw[:4096]
        assert (big["raw_bytes"], big["raw_sha256"]) == (len(raw), hashlib.sha256(raw).hexdigest())

        aggs = latest_by_key(consume_all(t.bootstrap, t.aggregates))
        a = aggs["client|app-7|payments-sarama|prod-eu|2"]
        assert a["close_wait_count"] == 7 and a["sockets"]["CLOSE_WAIT"] == 7
        assert a["series"] == "client|app-7|payments-sarama|prod-eu|2" and a["schema"] == 1

        status = wait_for(
            "job status with the dead-letter total",
            lambda: [
                v for _, v in consume_all(t.bootstrap, t.status) if v["dead_letter_total"] == n_bad
            ],
        )
        assert status[-1]["job_id"] == "connmon-job" and status[-1]["schema"] == 1

        # the job keeps running after bad input: a new series shows up
        produce(t.bootstrap, t.events, lines(recording("duplicate_clients")), key="app-5")
        dup = wait_for(
            "duplicate_connections finding",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(
                "duplicate_connections|client:app-5:billing-service|prod-eu|1"
            ),
        )
        assert dup["evidence"]["dup_used_max_idle_s"] >= 120 and dup["severity"] == "info"
        assert dup["evidence"]["dup_unused_processes"] == 1  # the bootstrap leftover beside it
        assert all(q.isActive for q in job.queries)
    finally:
        job.stop()


def test_a_record_a_topic_refuses_is_dropped_and_counted_not_fatal(
    kafka_cluster, spark, unique_name, tmp_path
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    # An aggregates topic that refuses every aggregate (they are larger than 300 bytes).
    small = f"{unique_name}.small-aggregates"
    create_topics(t.bootstrap, {small: 1}, config={"max.message.bytes": "300"})
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    job = start_job(spark, t.settings(checkpoint=str(tmp_path / "ckpt"), aggregates_topic=small))
    try:
        wait_for(
            "the finding, though every aggregate was refused",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(
                "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2"
            ),
        )
        status = wait_for(
            "produce errors in the job status",
            lambda: [v for _, v in consume_all(t.bootstrap, t.status) if v["produce_errors"]],
        )
        (err,) = status[-1]["produce_errors"]
        assert (err["topic"], err["error"]) == (small, "MSG_SIZE_TOO_LARGE") and err["total"] > 0
        assert consume_all(t.bootstrap, small) == []
        assert all(q.isActive for q in job.queries)
    finally:
        job.stop()


# ---- SIGKILL and restart -------------------------------------------------------------------
def _start_cli(args: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - owned by the child
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [CONNMON, "job", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )


Proc = tuple[int, int]  # (pid, start time in clock ticks): a pid reused later is another process


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, start time) from /proc/<pid>/stat; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def _table() -> dict[int, tuple[str, int, int, int]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = st
    return out


def _descendants(pid: int) -> set[Proc]:
    """Every process below ``pid`` now, whatever its process group."""
    table = _table()
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (_, ppid, _, _) in table.items():
            if ppid == parent and child not in found:
                found.add(child)
                todo.append(child)
    return {(p, table[p][3]) for p in found}


def _kill_group(p: subprocess.Popen, sig: int = signal.SIGKILL, timeout_s: float = 60) -> None:
    """Signal the job's process group; SIGKILL also kills everything below the driver (its Spark
    JVM runs in a process group of its own), so a crash test crashes the JVM too."""
    below = _descendants(p.pid) if sig == signal.SIGKILL else set()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, sig)
    for pid, _start in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        p.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)


def _comparable(f: dict[str, Any]) -> tuple:
    return (
        f["kind"],
        f["status"],
        f["severity"],
        f["window_start"],
        json.dumps(f["evidence"], sort_keys=True),
    )


def test_sigkill_and_restart_lose_no_finding_and_add_no_key(
    kafka_cluster, spark, unique_name, tmp_path
):
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    now = time.time()
    leak = recording("close_wait_leak", end=now)
    dup = recording("duplicate_clients", end=now)
    half = now - 450
    first = [e for e in leak + dup if gen_epoch(e["event_time"]) <= half]
    second = [e for e in leak + dup if gen_epoch(e["event_time"]) > half]
    produce(t.bootstrap, t.events, lines(first))
    args = [*t.cli_args(), "--checkpoint", str(tmp_path / "ckpt")]
    log = tmp_path / "job.log"
    p = _start_cli(args, log)
    try:
        # A finding out and a batch committed by Spark, so that the restart runs a later batch
        # and must restore state (a batch killed before its commit is re-run from scratch).
        commits = tmp_path / "ckpt" / "state" / "commits"
        wait_for(
            "a first finding and a committed batch of the state query",
            lambda: (
                any(
                    k.startswith("close_wait_buildup|")
                    for k, _ in consume_all(t.bootstrap, t.findings)
                )
                and any(f.name.isdigit() for f in commits.glob("*"))
            ),
        )
        _kill_group(p)  # SIGKILL: no shutdown hook, no flush, no clean stop
        produce(t.bootstrap, t.events, lines(second))
        p = _start_cli(args, log)

        # the same events replayed in one go are the reference
        path = tmp_path / "all.jsonl"
        path.write_text("\n".join(lines(sorted(leak + dup, key=lambda e: e["event_time"]))))
        expected: dict[str, dict[str, Any]] = {}
        ref = replay(spark, str(path), DetectorConfig(), max_age_s=None)
        for f in ref.findings:
            expected[f["key"]] = f

        def caught_up():
            got = latest_by_key(consume_all(t.bootstrap, t.findings))
            same = {k: _comparable(v) for k, v in got.items()} == {
                k: _comparable(v) for k, v in expected.items()
            }
            return got if same else None

        try:
            got = wait_for("the restarted job to catch up with the reference", caught_up, 240)
        except AssertionError:
            got = latest_by_key(consume_all(t.bootstrap, t.findings))
            print(log.read_text()[-5000:])
            assert {k: _comparable(v) for k, v in got.items()} == {
                k: _comparable(v) for k, v in expected.items()
            }
            raise
        assert "series state resumes after batch" in log.read_text()  # really restarted
        keys = {k for k, _ in consume_all(t.bootstrap, t.findings)}
        assert keys == set(expected) == set(got)
        assert {
            "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2",
            "duplicate_connections|client:app-5:billing-service|prod-eu|1",
        } <= keys
    finally:
        _kill_group(p, signal.SIGTERM)


def test_oversized_records_never_stop_the_job_nor_its_restart(kafka_cluster, unique_name, tmp_path):
    """At the broker's default limits: a ~1 MB invalid record and a valid event with a 400 KB
    app name are dead-lettered; later events still aggregate, before and after a SIGKILL."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    hostile_app = recording("close_wait_leak")[-1] | {"app": "a" * 400_000}
    produce(t.bootstrap, t.events, [b"\xff" + b"x" * 999_000, json.dumps(hostile_app).encode()])
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")), key="app-7")
    args = [*t.cli_args(), "--checkpoint", str(tmp_path / "ckpt")]
    log = tmp_path / "job.log"
    p = _start_cli(args, log)
    try:
        dead = wait_for(
            "two dead letters", lambda: (d := consume_all(t.bootstrap, t.deadletter)) and d
        )
        assert sorted((v["reason"], v["raw_bytes"]) for _, v in dead) == sorted(
            [("too_large", 999_001), ("too_large", len(json.dumps(hostile_app)))]
        )
        assert all(len(base64.b64decode(v["raw"])) == 4096 for _, v in dead)
        wait_for(
            "the leak's aggregate",
            lambda: (
                "client|app-7|payments-sarama|prod-eu|2"
                in latest_by_key(consume_all(t.bootstrap, t.aggregates))
            ),
        )
        _kill_group(p)
        produce(t.bootstrap, t.events, [b"{" + b" " * 1_000_000 + b"}"], key="again")
        produce(t.bootstrap, t.events, lines(recording("duplicate_clients")), key="app-5")
        p = _start_cli(args, log)
        wait_for(
            "an aggregate of events sent after the restart",
            lambda: any(
                k.startswith("client|app-5|")
                for k in latest_by_key(consume_all(t.bootstrap, t.aggregates))
            ),
            240,
        )
        assert p.poll() is None, log.read_text()[-3000:]
        assert len(consume_all(t.bootstrap, t.deadletter)) == 3
    finally:
        _kill_group(p, signal.SIGTERM)


# ---- Spark standalone cluster --------------------------------------------------------------
def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@pytest.fixture
def standalone(tmp_path):
    """A Spark master and two workers (1 core, 1 GiB each) on 127.0.0.1; yields the master URL
    and each worker's folder."""
    from streaming.stack.ports import free_port

    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    procs = []
    workers = [tmp_path / "w1", tmp_path / "w2"]
    commands = [
        (["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
          "--webui-port", str(ui)], tmp_path / "master.log", {}),
    ] + [
        (["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
          "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(w),
          f"spark://127.0.0.1:{port}"], tmp_path / f"{w.name}.log", {})
        for w in workers
    ]  # fmt: skip
    try:
        for cmd, log, extra in commands:
            procs.append(
                subprocess.Popen(
                    [_spark_class(), *cmd], stdout=open(log, "ab"),  # noqa: SIM115
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, env={**env, **extra},
                )
            )  # fmt: skip
            time.sleep(3)
        yield f"spark://127.0.0.1:{port}", workers
    finally:
        for proc in reversed(procs):
            _kill_group(proc, signal.SIGTERM, timeout_s=20)


def _ran_state_tasks(worker: Path) -> bool:
    """Whether an executor of this worker loaded a partition of the job's state store."""
    return any(
        "RocksDBStateStoreProvider" in f.read_text(errors="replace")
        for f in worker.glob("app-*/*/stderr")
    )


def test_job_on_a_standalone_cluster(kafka_cluster, standalone, unique_name, tmp_path):
    """The job on a cluster of two one-core workers: findings come out, and the state store's
    partitions are processed on both workers (the series' state scales out)."""
    t = Topics(kafka_cluster.bootstrap_servers, unique_name)
    produce(t.bootstrap, t.events, lines(recording("idle_zombie")))
    args = [
        *t.cli_args(), "--master", standalone[0], "--checkpoint", str(tmp_path / "ckpt"),
        "--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.cores.max=2",
        "--spark-conf", "spark.executor.cores=1", "--shuffle-partitions", "4",
    ]  # fmt: skip
    log = tmp_path / "job.log"
    master, workers = standalone
    p = _start_cli(args, log)
    try:
        f = wait_for(
            "idle_zombie finding from the cluster",
            lambda: latest_by_key(consume_all(t.bootstrap, t.findings)).get(
                "idle_zombie|client:app-6:legacy-reporter|prod-eu|2"
            ),
        )
        assert f["evidence"]["max_idle_s"] >= 4000
        wait_for("state-store tasks on both workers", lambda: all(map(_ran_state_tasks, workers)))
    finally:
        _kill_group(p, signal.SIGTERM)
