"""Event envelopes, the JSON-lines output, the Kafka sink's error paths (a real librdkafka
producer with no broker), and one agent scan over canned sockets."""

from __future__ import annotations

import io
import json
import time

from streaming.agent import config
from streaming.agent.collector import Collector
from streaming.agent.events import EventFactory
from streaming.agent.metrics import AgentMetrics
from streaming.agent.procs import ProcessTable
from streaming.agent.producer import KafkaSink, StreamSink
from streaming.agent.records import CLOSE_WAIT, ESTABLISHED, SocketRecord
from streaming.agent.runner import Agent, make_refresher
from streaming.schema.times import iso
from streaming.schema.validate import validate


def test_envelope_and_sequence() -> None:
    f = EventFactory("web-1", "web-1-1", clock=lambda: 1795237200.1234)
    a = f.make({"kind": "heartbeat", "pid": None})
    b = f.make({"kind": "heartbeat"})
    assert a["event_time"] == "2026-11-21T05:00:00.123Z"
    assert (a["seq"], b["seq"]) == (0, 1)
    assert "pid" not in a  # nulls are left out
    assert iso(0) == "1970-01-01T00:00:00.000Z"


def test_stream_sink_counts_by_kind() -> None:
    m = AgentMetrics()
    out = io.StringIO()
    s = StreamSink(out, m)
    s.send({"kind": "summary", "x": 1})
    s.send({"kind": "bad", "x": float("nan")})
    assert json.loads(out.getvalue()) == {"kind": "summary", "x": 1}
    assert m.registry.get_sample_value("connmon_agent_events_produced_total", {"kind": "summary"})
    assert (
        m.registry.get_sample_value(
            "connmon_agent_events_dropped_total", {"reason": "encode_error"}
        )
        == 1
    )


def test_kafka_sink_bounded_queue_and_delivery_timeouts_without_a_broker() -> None:
    m = AgentMetrics()
    sink = KafkaSink(
        "connmon.events",
        "web-1",
        {
            "bootstrap.servers": "127.0.0.1:1",
            "message.timeout.ms": 10,
            "linger.ms": 0,
            "log_level": 0,
        },
        m,
        queue_size=5,
    )
    for i in range(8):
        sink.send({"kind": "opened", "i": i})
    assert (
        m.registry.get_sample_value("connmon_agent_events_dropped_total", {"reason": "queue_full"})
        == 3
    )
    assert [json.loads(v)["i"] for _, v in sink.queue] == [3, 4, 5, 6, 7]
    sink.pump()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(sink.producer):
        sink.producer.poll(0.1)
    timeouts = m.registry.get_sample_value(
        "connmon_agent_events_dropped_total", {"reason": "delivery_timeout"}
    )
    assert timeouts == 5
    assert m.registry.get_sample_value("connmon_agent_delivery_errors_total") == 5
    assert sink.close(0.5) == 0


class ListSink:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def send(self, e: dict) -> None:
        self.events.append(e)

    def pump(self) -> None:
        pass


def test_agent_scan_over_canned_sockets(tmp_path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "snmp").write_text(
        "Tcp: RtoAlgorithm ActiveOpens AttemptFails\nTcp: 1 42 7\n"
    )
    snapshots = [
        [SocketRecord(2, ESTABLISHED, "10.0.0.5", 40000, "127.0.0.1", 9092, 0, 0, 100, 100)],
        [SocketRecord(2, CLOSE_WAIT, "10.0.0.5", 40000, "127.0.0.1", 9092, 0, 0, 100, 100)],
    ]
    cfg = config.build(
        {"clusters": [{"name": "local", "endpoints": ["1@127.0.0.1:9092"]}]},
        flags={"proc_root": str(tmp_path), "host": "web-1"},
    )
    m = AgentMetrics()
    clock = iter([1000.0, 1000.0, 1005.0]).__next__
    sink = ListSink()
    agent = Agent(
        cfg,
        sink,
        m,
        make_refresher(cfg, m),
        collector=Collector("netlink", netlink_dump=lambda ports: snapshots.pop(0)),
        procs=ProcessTable(tmp_path),
        clock=clock,
    )
    agent.scan()
    agent.scan()
    kinds = [e["kind"] for e in sink.events]
    assert kinds == ["opened", "summary", "heartbeat", "transition"]
    assert all(validate(e).reason is None for e in sink.events), [
        validate(e).detail for e in sink.events
    ]
    hb = sink.events[2]
    assert (hb["tcp_active_opens"], hb["tcp_attempt_fails"], hb["collector"]) == (42, 7, "netlink")
    t = sink.events[3]
    assert (t["state"], t["closed_by"], t["broker_id"], t["app"]) == (
        "CLOSE_WAIT",
        "peer",
        1,
        "unknown",
    )
    assert [e["seq"] for e in sink.events] == [0, 1, 2, 3]
    assert (
        m.registry.get_sample_value(
            "connmon_agent_sockets", {"state": "CLOSE_WAIT", "side": "client"}
        )
        == 1
    )
    assert (
        m.registry.get_sample_value(
            "connmon_agent_sockets", {"state": "ESTABLISHED", "side": "client"}
        )
        == 0
    )
    assert (
        m.registry.get_sample_value("connmon_agent_collector_info", {"collector": "netlink"}) == 1
    )


def test_collector_falls_back_to_proc(tmp_path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st\n"
        "   1: 0100007F:9C40 0100007F:2384 08 00000000:00000000 00:00000000 00000000  1000"
        "        0 2222 1 0000000000000000 20 4 30 10 -1\n"
    )

    def denied(ports):
        raise PermissionError(1, "Operation not permitted")

    c = Collector("auto", str(tmp_path), netlink_dump=denied)
    (r,) = c.scan([9092])
    assert c.name == "proc" and "PermissionError" in c.fallback_reason
    assert (r.state, r.dport, r.idle_ms) == (CLOSE_WAIT, 9092, None)


def test_bad_producer_setting_is_a_config_error() -> None:
    import pytest

    from streaming.errors import ConfigError

    with pytest.raises(ConfigError, match="^kafka: .*linger.ms"):
        KafkaSink("t", "h", {"bootstrap.servers": "x:1", "message.timeout.ms": 1}, AgentMetrics())


def test_metrics_match_the_catalog() -> None:
    from streaming.metricnames.agent import AGENT_METRICS
    from streaming.metricnames.base import FORBIDDEN_LABELS

    m = AgentMetrics()
    exposed = {}
    for family in m.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        exposed[name] = family.type
    assert exposed == {x.name: x.type for x in AGENT_METRICS}
    for x in AGENT_METRICS:
        assert not set(x.labels) & FORBIDDEN_LABELS, x
        assert x.name.startswith("connmon_agent_")


def test_cli_config_errors_exit_2_and_name_the_setting(capsys, tmp_path) -> None:
    from streaming.cli import main

    assert main(["agent", "--once", "--output", "-", "--interval", "0"]) == 2
    assert "scan_interval_s: must be positive" in capsys.readouterr().err
    assert main(["agent", "--once", "--output", "-"]) == 2
    assert "clusters: none configured" in capsys.readouterr().err
    assert main(["agent", "--cluster-bootstrap", "a=h:1"]) == 2
    assert "bootstrap-servers:" in capsys.readouterr().err


def test_cli_once_prints_json_lines(capsys, monkeypatch) -> None:
    from streaming.cli import main

    monkeypatch.setenv("CONNMON_AGENT_METADATA_TIMEOUT_S", "0.5")  # nothing listens on port 1

    rc = main(
        ["agent", "--once", "--output", "-", "--cluster-bootstrap", "lo=127.0.0.1:1", "--host", "h"]
    )
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[-1]["kind"] == "heartbeat" and lines[-1]["host"] == "h"
    assert all(validate(e).reason is None for e in lines)


def test_fatal_producer_error_replaces_the_producer_and_counts_losses() -> None:
    from confluent_kafka import KafkaError

    m = AgentMetrics()
    sink = KafkaSink(
        "t", "h", {"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "linger.ms": 0}, m, 10
    )
    sink.send({"kind": "opened"})
    sink.pump()  # now held by librdkafka (no broker)
    old = sink.producer
    sink.on_error(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    sink.pump()
    assert sink.producer is not old and sink.fatal is None
    assert (
        m.registry.get_sample_value(
            "connmon_agent_events_dropped_total", {"reason": "producer_fatal"}
        )
        == 1
    )
    old.purge()  # the replaced instance still holds the event: end it with the test
    old.close()


class _Refusing:
    """A producer whose produce() raises ``error`` (as librdkafka does once a fatal error,
    e.g. refused idempotence, has ended the instance)."""

    def __init__(self, error) -> None:
        self.error = error
        self.produced = 0
        self.delivered = 0
        self.pending: list = []

    def produce(self, *args, **kwargs) -> None:
        from confluent_kafka import KafkaException

        if self.error is not None:
            raise KafkaException(self.error)
        self.produced += 1
        self.pending.append(kwargs.get("on_delivery"))

    def poll(self, timeout: float) -> int:
        """Delivery reports: every record was delivered."""
        pending, self.pending = self.pending, []
        for report in pending:
            if report is not None:
                report(None, None)
                self.delivered += 1
        return len(pending)


def test_a_fatal_error_raised_by_produce_replaces_the_producer_and_keeps_the_event() -> None:
    from confluent_kafka import KafkaError

    made: list[_Refusing] = []
    errors = [KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "refused", fatal=True), None]

    def factory(conf: dict) -> _Refusing:
        made.append(_Refusing(errors[len(made)]))
        return made[-1]

    m = AgentMetrics()
    sink = KafkaSink("t", "h", {"bootstrap.servers": "x:1"}, m, 10, producer_factory=factory)
    sink.send({"kind": "opened"})
    sink.pump()  # raises inside produce(): no exception out of the scan
    assert sink.fatal is not None and len(sink.queue) == 1
    sink.pump()
    assert len(made) == 2 and made[1].produced == 1 and not sink.queue


def test_a_produce_error_that_is_not_fatal_drops_that_event_only() -> None:
    from confluent_kafka import KafkaError

    refusing = _Refusing(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))
    m = AgentMetrics()
    sink = KafkaSink("t", "h", {"bootstrap.servers": "x:1"}, m, 10, lambda conf: refusing)
    sink.send({"kind": "opened"})
    sink.send({"kind": "closed"})
    sink.pump()
    assert not sink.queue and sink.fatal is None
    dropped = {"reason": "delivery_error"}
    assert m.registry.get_sample_value("connmon_agent_events_dropped_total", dropped) == 2


def test_agent_keeps_events_within_the_schema_limits() -> None:
    from streaming.schema.events import MAX_STRING_CHARS

    factory = EventFactory("h" * 1000, "agent-1")
    long_apps = [factory.make({"kind": "heartbeat", "version": "v" * 1000 + s}) for s in "ab"]
    for e in long_apps:
        assert len(e["host"]) == len(e["version"]) == MAX_STRING_CHARS
    assert long_apps[0]["version"] != long_apps[1]["version"]  # cut, but still distinct
    m = AgentMetrics()
    out = io.StringIO()
    sink = StreamSink(out, m)
    huge = factory.make({"kind": "heartbeat", **{f"x{i}": "y" * 200 for i in range(100)}})
    sink.send(huge)
    sink.send(long_apps[0])
    dropped = m.registry.get_sample_value(
        "connmon_agent_events_dropped_total", {"reason": "too_large"}
    )
    assert dropped == 1
    (line,) = out.getvalue().splitlines()
    assert validate(line.encode()).reason in (None, "time_out_of_range")


def test_a_producer_that_keeps_failing_is_replaced_with_backoff_until_one_delivers() -> None:
    """A revoked ACL must not make every agent reconnect (TLS, SASL) at every scan."""
    from confluent_kafka import KafkaError

    from streaming.agent.producer import REPLACE_MAX_S, REPLACE_MIN_S

    now = [0.0]
    made: list[_Refusing] = []
    refused = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "refused", fatal=True)
    working = [False]

    def factory(conf: dict) -> _Refusing:
        made.append(_Refusing(None if working[0] else refused))
        return made[-1]

    sink = KafkaSink(
        "t", "h", {"bootstrap.servers": "x:1"}, AgentMetrics(), 10, factory, lambda: now[0]
    )

    def replacements(seconds: int) -> list[float]:
        """Pump once a second, as scans would, with an event to send each time."""
        at = []
        for _ in range(seconds):
            before = len(made)
            sink.send({"kind": "opened"})
            sink.pump()
            if len(made) > before:
                at.append(now[0])
            now[0] += 1.0
        return at

    at = replacements(2000)
    gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
    assert gaps[:3] == [REPLACE_MIN_S, 2 * REPLACE_MIN_S, 4 * REPLACE_MIN_S]
    assert max(gaps) == REPLACE_MAX_S and gaps == sorted(gaps)
    assert len(made) < 20  # not 2000
    working[0] = True  # the ACL is back: the next producer delivers
    replacements(int(REPLACE_MAX_S) + 1)
    assert made[-1].delivered > 0
    working[0] = False  # revoked again: the waits start from the shortest
    sink.on_error(refused)
    at = replacements(int(REPLACE_MAX_S) + 30)
    gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
    assert gaps[:2] == [REPLACE_MIN_S, 2 * REPLACE_MIN_S]
