"""A set of aggregates, findings and job statuses that gives every dashboard panel and rule of
connmon data: a CLOSE_WAIT leak and TIME_WAIT on both sides, idle churn, a resolved idle
zombie, a malformed message, and hosts whose clocks are skewed."""

from __future__ import annotations

import time

from streaming.exporter import samples
from streaming.schema.times import iso

# The job status names one host ahead past the watermark and one behind whose events were
# dropped as late, so the host panels have data and ConnMonHostClockSkew fires for both.
SKEWED_HOSTS = [
    {"host": "web-7", "clock_offset_s": 181.4, "skewed_events_total": 5520,
     "late_events_total": 0},
    {"host": "web-9", "clock_offset_s": -150.0, "skewed_events_total": 300,
     "late_events_total": 12},
]  # fmt: skip


def produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]]) -> None:
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001 - confluent-kafka callback signature
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in items:
        p.produce(topic, value=value, key=key, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []


def feed(bootstrap: str, topics: dict[str, str], job_id: str = "connmon-job") -> dict[str, int]:
    """Produce the set to ``topics`` (role -> name: aggregates, findings, job_status); the
    statuses are those of the job ``job_id``. Returns how many messages each role was sent."""
    now = time.time()
    sent: dict[str, int] = {}

    def send(role: str, items: list[tuple[bytes, bytes | None]]) -> None:
        produce(bootstrap, topics[role], items)
        sent[role] = len(items)

    agg = samples.aggregate
    send(
        "aggregates",
        [
            (
                b"client|web-1|orders-consumer|local|2",
                agg(
                    end=now,
                    sockets={"ESTABLISHED": 2, "CLOSE_WAIT": 25},
                    close_wait_count=25,
                    client_library="librdkafka",
                    client_version="2.16.0",
                ),
            ),
            (
                b"broker|kafka-2|kafka-broker|2|10.1.2.3",
                agg(
                    end=now,
                    side="broker",
                    host="kafka-2",
                    app="kafka-broker",
                    peer_host="10.1.2.3",
                    sockets={"ESTABLISHED": 2, "TIME_WAIT": 7, "CLOSE_WAIT": 1},
                    time_wait_count=7,
                ),
            ),  # fmt: skip
            # A client with every kind of event in its window, so every panel has data.
            (
                b"client|web-2|billing|local|2",
                agg(
                    end=now,
                    host="web-2",
                    app="billing",
                    sockets={"ESTABLISHED": 3, "TIME_WAIT": 4, "SYN_SENT": 1},
                    close_wait_count=0,
                    time_wait_count=4,
                    syn_sent_count=1,
                    opens=30,
                    reopens_after_idle=2,
                    closes_broker_drop=3,
                    connects_failed=5,
                    closes_after_idle=2,
                    short_lived=4,
                    closes_local=5,
                    dup_processes=1,
                    dup_unused_processes=1,
                    client_library="java",
                    client_version="3.9.0",
                ),
            ),  # fmt: skip
            (b"bad", b"{this is not json"),
        ],
    )
    send(
        "findings",
        [
            (
                b"close_wait_buildup|client:web-1:orders-consumer|local|2",
                samples.finding(updated=now, change="fired", first_fired_at=iso(now - 60)),
            ),
            (
                b"idle_churn|client:web-1:orders-consumer|local|2",
                samples.finding(updated=now, kind="idle_churn", severity="warning"),
            ),
            (
                b"idle_zombie|client:web-1:orders-consumer|local|2",
                samples.finding(updated=now - 1, kind="idle_zombie", severity="warning"),
            ),
            (
                b"idle_zombie|client:web-1:orders-consumer|local|2",
                samples.finding(updated=now, kind="idle_zombie", status="resolved"),
            ),
        ],
    )
    send(
        "job_status",
        [
            (job_id.encode(), samples.status(ts=now - 1, hosts=SKEWED_HOSTS[:1], job_id=job_id)),
            (job_id.encode(), samples.status(ts=now, hosts=SKEWED_HOSTS, job_id=job_id)),
        ],
    )
    return sent
