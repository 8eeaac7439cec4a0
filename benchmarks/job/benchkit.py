"""Shared by the job benchmarks (``bench_job.py``, ``bench_fleet.py``, ``fleet_load.py``): the
job's topics on a 1-broker KRaft cluster of their own, the job's settings over them, and probes:
CLOSE_WAIT summaries of new series, each timed from its event time to its
``close_wait_buildup`` finding consumed from the findings topic.

Imports neither PySpark nor the job's pipeline, so a load generator process stays light.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from streaming.schema.aggregates import client_id  # noqa: E402
from streaming.schema.findings import finding_key  # noqa: E402
from streaming.schema.times import iso  # noqa: E402
from streaming.stack.kafka import KafkaCluster, create_topics  # noqa: E402

if TYPE_CHECKING:
    from streaming.job.settings import JobSettings

# The job's topics; ``partials`` only when a benchmark names it (else the job's default topic,
# created by the broker on first use with one partition).
TOPICS = ("events", "aggregates", "findings", "deadletter", "status")
COMPACTED = ("aggregates", "findings", "status")

PROBE_APP = "leaky"
PROBE_CLUSTER = "bench"


def start_cluster(name: str) -> KafkaCluster:
    """A 1-broker KRaft cluster on 127.0.0.1, started (``stop()`` it)."""
    cluster = KafkaCluster(brokers=1, name=name)
    cluster.start()
    return cluster


def topic_names(prefix: str, partials: bool = False) -> dict[str, str]:
    """``{"events": "<prefix>.events", ...}``, with ``partials`` when asked."""
    kinds = (*TOPICS, "partials") if partials else TOPICS
    return {k: f"{prefix}.{k}" for k in kinds}


def create_job_topics(bootstrap: str, names: dict[str, str], partitions: int) -> None:
    """Events (and partials, as many partitions: docs/job.md) with ``partitions``, dead letters
    with one, the compacted outputs with one each."""
    create_topics(bootstrap, {names["events"]: partitions, names["deadletter"]: 1})
    if "partials" in names:  # as ``connmon topics create`` makes it (docs/topics.md)
        from streaming.topics.spec import DEFAULTS

        (spec,) = [s for s in DEFAULTS if s.role == "partials"]
        size = {"max.message.bytes": spec.configs["max.message.bytes"]}
        create_topics(bootstrap, {names["partials"]: partitions}, config=size)
    create_topics(bootstrap, {names[k]: 1 for k in COMPACTED}, config={"cleanup.policy": "compact"})


def job_settings(bootstrap: str, names: dict[str, str], **overrides: Any) -> JobSettings:
    """The job's settings over ``names`` (``topic_names``), validated."""
    from streaming.detectors.config import DetectorConfig
    from streaming.job.settings import JobSettings

    topics = {f"{k}_topic": v for k, v in names.items()}
    overrides.setdefault("detectors", DetectorConfig())
    return JobSettings(bootstrap_servers=bootstrap, **topics, **overrides).validate()


# ---- probes -----------------------------------------------------------------------------------
def probe_event(host: str, t: float) -> dict[str, Any]:
    """A CLOSE_WAIT summary of a new series (host ``host``, app ``leaky``, broker 1) stamped
    ``t``: enough for ``close_wait_buildup`` at once (3 sockets, the oldest 300 s)."""
    return {"schema": 1, "kind": "summary", "event_time": iso(t), "host": host,
            "agent_id": host, "seq": 1, "cluster": PROBE_CLUSTER, "side": "client",
            "app": PROBE_APP, "broker_id": 1, "broker_endpoint": "10.0.0.11:9092",
            "state": "CLOSE_WAIT", "count": 3, "oldest_state_age_s": 300.0,
            "interval_s": 10.0}  # fmt: skip


def probe_key(host: str) -> str:
    """The key of the probe's finding in the findings topic (the schema's own definition)."""
    return finding_key("close_wait_buildup", client_id("client", host, PROBE_APP, None),
                       PROBE_CLUSTER, "1")  # fmt: skip


class Prober:
    """Sends probes to the events topic and times each to its finding: latency = time the
    finding is consumed - the probe's event time. Reads the findings topic from its end as of
    construction (create it before the first probe); other findings are counted by kind."""

    def __init__(self, bootstrap: str, events_topic: str, findings_topic: str) -> None:
        from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

        self.events_topic = events_topic
        self.producer = Producer({"bootstrap.servers": bootstrap})
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"probe-{time.time_ns()}",
                "enable.auto.commit": False,
            }
        )
        meta = self.consumer.list_topics(findings_topic, timeout=10)
        parts = sorted(meta.topics[findings_topic].partitions)
        self.consumer.assign([TopicPartition(findings_topic, p, OFFSET_END) for p in parts])
        self.sent: dict[str, float] = {}  # finding key -> probe's event time
        self.hosts: dict[str, str] = {}  # finding key -> probe's host
        self.latencies: dict[str, float] = {}  # finding key -> latency, s
        self.other: Counter[str] = Counter()  # findings that are no probe's, by kind

    def send(self, host: str) -> float:
        """Produce one probe for a new series on ``host`` (delivered before returning); its
        event time."""
        t = time.time()
        value = json.dumps(probe_event(host, t), separators=(",", ":"))
        self.producer.produce(self.events_topic, key=host.encode(), value=value.encode())
        self.producer.flush(5)
        key = probe_key(host)
        self.sent[key], self.hosts[key] = t, host
        return t

    @property
    def pending(self) -> int:
        return len(self.sent) - len(self.latencies)

    def poll(self, timeout_s: float = 0.0, until_done: bool = False) -> list[tuple[str, float]]:
        """Consume findings for ``timeout_s`` (0: what is there), or until no probe is pending
        with ``until_done``; the probes answered meanwhile, as (host, latency)."""
        answered: list[tuple[str, float]] = []
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            for msg in self.consumer.consume(500, timeout=max(0.0, min(0.2, left))):
                if msg.error() or msg.key() is None:
                    continue
                key = msg.key().decode()
                t = self.sent.get(key)
                if t is None:
                    self.other[key.split("|", 1)[0]] += 1
                elif key not in self.latencies:
                    self.latencies[key] = time.time() - t
                    answered.append((self.hosts[key], self.latencies[key]))
            if left <= 0 or (until_done and not self.pending):
                return answered

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(5)


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of sorted values, nearest rank below (as bench_job always had)."""
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]
