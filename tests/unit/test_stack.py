"""Pure parts of the local stack: config rendering, override parsing, artifact naming."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from streaming.cli import build_parser
from streaming.errors import ConfigError
from streaming.options import parse_pairs
from streaming.stack import artifacts
from streaming.stack.kafka import KafkaCluster, KafkaStackError
from streaming.stack.ports import ephemeral_range, free_port, listen_range, port_in_use
from streaming.stack.prometheus import render_config


def test_render_prometheus_config_lists_targets_and_rules(tmp_path):
    rules = tmp_path / "alerts.yaml"
    rules.write_text("groups: []\n")
    cfg = json.loads(render_config(["127.0.0.1:9999"], [rules], 1, 2))
    assert cfg["global"]["scrape_interval"] == "1s"
    assert cfg["global"]["evaluation_interval"] == "2s"
    assert cfg["rule_files"] == [str(rules.resolve())]
    assert cfg["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9999"]


def test_broker_override_parsing():
    assert parse_pairs("--broker-config", ["connections.max.idle.ms=5000", " a = b "]) == {
        "connections.max.idle.ms": "5000",
        "a": "b",
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_pairs("--broker-config", ["connections.max.idle.ms"])


def test_cluster_size_is_checked():
    with pytest.raises(KafkaStackError, match="brokers must be 1 or 3"):
        KafkaCluster(brokers=2)


def test_cluster_properties_carry_overrides_and_quorum():
    c = KafkaCluster(brokers=3, overrides={"connections.max.idle.ms": "5000"})
    from streaming.stack.kafka import KafkaNode

    c.nodes = [KafkaNode(i, 9000 + i, 9100 + i, f"/tmp/n{i}") for i in (1, 2, 3)]
    props = c._properties(c.nodes[1])
    assert props["node.id"] == "2"
    assert props["connections.max.idle.ms"] == "5000"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    assert props["offsets.topic.replication.factor"] == "3"
    assert c.bootstrap_servers == "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"


def test_cluster_state_round_trip():
    c = KafkaCluster(brokers=1, overrides={"x": "1"}, base_dir="/tmp/b")
    from streaming.stack.kafka import KafkaNode

    c.nodes = [KafkaNode(1, 9001, 9101, "/tmp/b/node-1", pid=123)]
    again = KafkaCluster.from_state(c.to_state())
    assert again == c


def test_artifact_names_strip_versions():
    assert artifacts._artifact_name(Path("kafka-clients-3.9.0.jar")) == "kafka-clients"
    assert artifacts._artifact_name(Path("scala-library-2.13.16.jar")) == "scala-library"
    assert artifacts._artifact_name(Path("spark-sql-kafka-0-10_2.13-4.0.0.jar")) == (
        "spark-sql-kafka-0-10_2.13"
    )


def test_connector_version_matches_pyspark_pin():
    import pyspark

    assert artifacts.pom_property("spark-kafka", "spark.version") == pyspark.__version__


def test_port_helpers():
    port = free_port()
    assert not port_in_use(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_in_use(port)


def test_free_ports_are_outside_the_ephemeral_range_and_never_repeat():
    first, last = ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert not any(first <= p <= last for p in ports)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("32768\t60999\n", (10000, 32767)),
        ("1024 60999", (61000, 65535)),  # no room below: above
        ("1024 65000", (1024, 65000)),  # no room outside: inside
        ("garbage", (10000, 32767)),  # unreadable: Linux's default range
    ],
)
def test_listen_range(tmp_path, text, expected):
    f = tmp_path / "range"
    f.write_text(text)
    assert listen_range(str(f)) == expected


def test_cli_help_lists_stack():
    text = build_parser().format_help()
    assert "stack" in text


def test_cluster_ids_never_look_like_options():
    from streaming.stack.kafka import _cluster_id

    ids = {_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)
