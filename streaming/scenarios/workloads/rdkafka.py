"""librdkafka workloads through confluent-kafka: a producer and a group consumer.

``python -m streaming.scenarios.workloads.rdkafka --mode producer --app NAME --bootstrap B
--topic T [--interval-ms N] [--prop key=value]...``; any librdkafka setting passes through with
``--prop`` (``connections.max.idle.ms``, ``reconnect.backoff.ms``, ``security.protocol`` ...).

``--mode two-producers`` runs two clients in one process: a busy producer (``--interval-ms``)
and a rarely used one (``--second-interval-ms``, its own ``--second-prop`` settings).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer

from streaming.scenarios.workloads import common


class _Delivery:
    """Counts delivery reports (the named callback confluent-kafka's examples use)."""

    def __init__(self, app: str) -> None:
        self.app, self.acked, self.failed = app, 0, 0

    def __call__(self, err: KafkaError | None, msg: object) -> None:
        if err is None:
            self.acked += 1
            return
        self.failed += 1
        if self.failed % 100 == 1:
            common.status(self.app, f"delivery failed: {err}")


def produce(app: str, conf: dict[str, str], topic: str, interval_ms: int) -> None:
    producer = Producer(conf)
    report = _Delivery(app)
    common.status(app, "producer started")
    n = 0
    while not common.STOP.is_set():
        value = f"m-{n}".encode()
        try:
            producer.produce(topic, value=value, key=value, on_delivery=report)
        except BufferError:
            producer.poll(0.5)  # local queue full (broker unreachable): wait for room
            continue
        producer.poll(0)
        n += 1
        if interval_ms >= 1000:
            common.status(app, f"sent m-{n - 1} acked={report.acked} failed={report.failed}")
        # poll() while waiting so delivery callbacks run during long intervals too
        deadline_s = interval_ms / 1000
        while deadline_s > 0 and not common.STOP.is_set():
            step = min(0.2, deadline_s)
            producer.poll(step)
            deadline_s -= step
    left = producer.flush(5)
    common.status(app, f"producer closed acked={report.acked} failed={report.failed} left={left}")


def two_producers(
    app: str, conf: dict[str, str], second: dict[str, str], topic: str, busy_ms: int, rare_ms: int
) -> None:
    busy, rare = Producer(conf), Producer({**conf, **second})
    report = _Delivery(app)
    common.status(app, "two producers started")
    n, next_busy, next_rare = 0, 0.0, 0.0
    while not common.STOP.is_set():
        now = time.monotonic()
        for producer, due, every in ((busy, next_busy, busy_ms), (rare, next_rare, rare_ms)):
            if now >= due:
                producer.produce(topic, value=f"m-{n}".encode(), on_delivery=report)
                n += 1
                if producer is busy:
                    next_busy = now + every / 1000
                else:
                    next_rare = now + every / 1000
                    common.status(app, f"rare producer sent m-{n - 1} acked={report.acked}")
        busy.poll(0.05)
        rare.poll(0.05)
    for producer in (busy, rare):
        producer.flush(5)
    common.status(app, f"producers closed acked={report.acked} failed={report.failed}")


def consume(app: str, conf: dict[str, str], topic: str, group: str) -> None:
    conf = {"group.id": group, "auto.offset.reset": "earliest", **conf}
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    common.status(app, f"consumer subscribed group={group}")
    records = 0
    try:
        while not common.STOP.is_set():
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                records += 1
    finally:
        consumer.close()
    common.status(app, f"consumer closed records={records}")


def main(argv: list[str] | None = None) -> int:
    p = common.base_parser(__doc__ or "", ("producer", "consumer", "two-producers"))
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default=None)
    p.add_argument("--prop", action="append", default=[], help="librdkafka key=value")
    p.add_argument("--second-interval-ms", type=int, default=30_000)
    p.add_argument("--second-prop", action="append", default=[], help="the second producer's")
    args = p.parse_args(argv)
    common.install_signal_handlers()
    conf = {"bootstrap.servers": args.bootstrap, "client.id": args.app}
    conf.update(common.parse_props(args.prop))
    if args.mode == "two-producers":
        second = common.parse_props(args.second_prop)
        busy_ms = 200 if args.interval_ms is None else args.interval_ms
        two_producers(args.app, conf, second, args.topic, busy_ms, args.second_interval_ms)
    elif args.mode == "producer":
        produce(args.app, conf, args.topic, 200 if args.interval_ms is None else args.interval_ms)
    else:
        consume(args.app, conf, args.topic, args.group or args.app)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
