"""Helpers of the tests that run the job against a real Kafka broker: topics per test, producing
and reading records, the job as a command in a process group of its own, SIGKILL of that group
and everything below it, and the SIGKILL-and-restart scenario shared by every checkpoint store."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from streaming.detectors.config import DetectorConfig
from streaming.job.pipeline import replay
from streaming.job.settings import JobSettings
from streaming.stack.kafka import create_topics
from streaming.topics.spec import PARTIALS_MAX_BYTES

FIXTURES = Path(__file__).parents[1] / "fixtures" / "events"
REPO = Path(__file__).parents[2]
CONNMON = str(REPO / ".venv" / "bin" / "connmon")
# The job's trigger in these tests. Each micro-batch costs Spark a fixed share of a core whatever
# it carries; at 1 s the batches of two queries kept a core busy while the tests waited.
TRIGGER = "2s"


def _generator() -> ModuleType:
    """``tests/fixtures/events/generate.py``, the canned scenarios' events."""
    if "events_generate" in sys.modules:
        return sys.modules["events_generate"]
    spec = importlib.util.spec_from_file_location("events_generate", FIXTURES / "generate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["events_generate"] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _generator()


# ---- topics and records ----------------------------------------------------------------------
class Topics:
    """The job's topics for one test, created on the shared cluster."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap = bootstrap
        self.events = f"{prefix}.events"
        self.aggregates = f"{prefix}.aggregates"
        self.findings = f"{prefix}.findings"
        self.deadletter = f"{prefix}.deadletter"
        self.status = f"{prefix}.job-status"
        self.partials = f"{prefix}.partials"
        create_topics(bootstrap, {self.events: 2, self.deadletter: 1})
        create_topics(
            bootstrap, {self.partials: 2}, config={"max.message.bytes": str(PARTIALS_MAX_BYTES)}
        )
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
            trigger=TRIGGER,
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
            "--trigger", TRIGGER, "--starting-offsets", "earliest", "--shuffle-partitions", "2",
        ]  # fmt: skip


def produce(
    bootstrap: str,
    topic: str,
    lines: Sequence[str | bytes | None],
    key: str | bytes | None = "host",
    headers: list[tuple[str, bytes | None]] | None = None,
) -> None:
    """Records with ``lines`` as values (None: a tombstone), all with ``key`` and ``headers``."""
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
            key=key.encode() if isinstance(key, str) else key,
            value=line.encode() if isinstance(line, str) else line,
            headers=headers,
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


def wait_for(
    what: str,
    fn: Callable[[], Any],
    timeout_s: float = 300.0,
    detail: Callable[[], Any] | None = None,
    poll_s: float = 1.0,
) -> Any:
    """``fn()`` once it is true; a timeout fails naming ``what`` and ``detail()``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = fn()
        if result:
            return result
        time.sleep(poll_s)
    extra = f": {detail()}" if detail is not None else ""
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{extra}")


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


# ---- the job as a command ------------------------------------------------------------------
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


# ---- SIGKILL and restart -------------------------------------------------------------------
def _comparable(f: dict[str, Any]) -> tuple:
    """What a live job and a replay must agree on. Not the evidence or window of the last
    record: a firing finding is published again on material changes, and where a micro-batch
    boundary cuts a window decides which evaluation crossed a step."""
    return (f["kind"], f["status"], f["severity"], f["first_fired_at"])


def sigkill_and_restart(
    t: Topics,
    spark: Any,
    tmp_path: Path,
    checkpoint: str,
    committed: Callable[[], bool],
    extra_args: Sequence[str] = (),
    stop: int = signal.SIGKILL,
    restart_args: Sequence[str] | None = None,
    restarted: str = "series state resumes after batch",
    between: Callable[[], None] | None = None,
) -> str:
    """Run the job on half of two scenarios' events with ``checkpoint``; once a finding is out
    and ``committed()`` says the state query committed a batch there, SIGKILL (``stop``) the
    job's process group, send the other half and start the job again on the same checkpoint
    (with ``restart_args`` instead of the checkpoint and ``extra_args`` when given). The
    restarted job, whose log says ``restarted``, must end with exactly the findings of a replay
    of all events in one go, under the same keys, none lost and none added. ``between`` runs
    after the kill, before the restart. Returns the log of both runs."""
    now = time.time()
    leak = recording("close_wait_leak", end=now)
    dup = recording("duplicate_clients", end=now)
    half = now - 450
    first = [e for e in leak + dup if gen_epoch(e["event_time"]) <= half]
    second = [e for e in leak + dup if gen_epoch(e["event_time"]) > half]
    produce(t.bootstrap, t.events, lines(first))
    args = [*t.cli_args(), "--checkpoint", checkpoint, *extra_args]
    log = tmp_path / "job.log"
    p = _start_cli(args, log)
    try:
        # A finding out and a batch committed by Spark, so that the restart runs a later batch
        # and must restore state (a batch killed before its commit is re-run from scratch).
        wait_for(
            "a first finding and a committed batch of the state query",
            lambda: (
                any(
                    k.startswith("close_wait_buildup|")
                    for k, _ in consume_all(t.bootstrap, t.findings)
                )
                and committed()
            ),
        )
        _kill_group(p, stop)  # SIGKILL: no shutdown hook, no flush, no clean stop
        if between is not None:
            between()
        produce(t.bootstrap, t.events, lines(second))
        if restart_args is not None:
            args = [*t.cli_args(), *restart_args]
        p = _start_cli(args, log)

        # the same events replayed in one go are the reference
        path = tmp_path / "all.jsonl"
        path.write_text("\n".join(lines(sorted(leak + dup, key=lambda e: e["event_time"]))))
        expected: dict[str, dict[str, Any]] = {}
        ref = replay(spark, str(path), DetectorConfig(), max_age_s=None)
        for f in ref.findings:
            expected[f["key"]] = f

        def caught_up() -> dict[str, dict[str, Any]] | None:
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
        assert restarted in log.read_text()  # really restarted
        keys = {k for k, _ in consume_all(t.bootstrap, t.findings)}
        assert keys == set(expected) == set(got)
        assert {
            "close_wait_buildup|client:app-7:payments-sarama|prod-eu|2",
            "duplicate_connections|client:app-5:billing-service|prod-eu|1",
        } <= keys
        return log.read_text()
    finally:
        _kill_group(p, signal.SIGTERM)
