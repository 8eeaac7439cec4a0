"""librdkafka workloads through confluent-kafka: a producer and a group consumer.

``python -m streaming.scenarios.workloads.rdkafka --mode producer --app NAME --bootstrap B
--topic T [--interval-ms N] [--prop key=value]...``; any librdkafka setting passes through with
``--prop`` (``connections.max.idle.ms``, ``reconnect.backoff.ms``, ``security.protocol`` ...).
"""

from __future__ import annotations

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
    p = common.base_parser(__doc__ or "", ("producer", "consumer"))
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default=None)
    p.add_argument("--prop", action="append", default=[], help="librdkafka key=value")
    args = p.parse_args(argv)
    common.install_signal_handlers()
    conf = {"bootstrap.servers": args.bootstrap, "client.id": args.app}
    conf.update(common.parse_props(args.prop))
    if args.mode == "producer":
        produce(args.app, conf, args.topic, 200 if args.interval_ms is None else args.interval_ms)
    else:
        consume(args.app, conf, args.topic, args.group or args.app)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
