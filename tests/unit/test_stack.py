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
from streaming.stack.prometheus import connmon_jobs, render_config


def test_render_prometheus_config_lists_targets_and_rules(tmp_path):
    rules = tmp_path / "alerts.yaml"
    rules.write_text("groups: []\n")
    jobs = connmon_jobs(agents=["127.0.0.1:9998"], exporters=["127.0.0.1:9999"])
    cfg = json.loads(render_config(jobs, [rules], 1, 2))
    assert cfg["global"]["scrape_interval"] == "1s"
    assert cfg["global"]["evaluation_interval"] == "2s"
    assert cfg["rule_files"] == [str(rules.resolve())]
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in cfg["scrape_configs"]}
    # Named as the rules select them: job="connmon-agent", job="connmon-exporter".
    assert targets == {"connmon-agent": ["127.0.0.1:9998"], "connmon-exporter": ["127.0.0.1:9999"]}


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


def test_a_secured_cluster_refuses_anonymous_clients_and_lists_one_super_user(tmp_path):
    from streaming.stack.kafka import KafkaNode

    c = KafkaCluster(brokers=1, security="sasl_ssl", base_dir=str(tmp_path))
    c.nodes = [KafkaNode(1, 9001, 9101, str(tmp_path / "node-1"))]
    c._secure()
    props = c._properties(c.nodes[0])
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:broker"
    assert "PLAINTEXT://" not in props["listeners"].replace("SASL_PLAINTEXT", "")
    assert set(c.users) == {"broker", "connmon-agent", "connmon-job", "connmon-exporter",
                            "connmon-admin"}  # fmt: skip
    assert len(set(c.users.values())) == 5  # a password each
    conf = c.client_config("connmon-job")
    assert conf["sasl.username"] == "connmon-job" and conf["security.protocol"] == "SASL_SSL"
    assert Path(conf["ssl.ca.location"]).read_text().startswith("-----BEGIN CERTIFICATE")
    jaas = c.java_client_config("connmon-job")["sasl.jaas.config"]
    assert f'username="connmon-job" password="{c.users["connmon-job"]}"' in jaas
    with pytest.raises(KafkaStackError, match="security must be one of"):
        KafkaCluster(security="ssl")


def test_node_certificates_chain_to_the_ca_and_name_the_node(tmp_path):
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    from streaming.stack.tls import Authority

    ca = Authority.create(tmp_path / "ca")
    cert = ca.issue("node-1", ["127.0.0.1", "localhost"], tmp_path)
    leaf = x509.load_pem_x509_certificate(cert.certificate.read_bytes())
    root = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    leaf.verify_directly_issued_by(root)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    store = cert.keystore.read_text()
    assert store.startswith("-----BEGIN PRIVATE KEY") and store.count("BEGIN CERTIFICATE") == 2
    assert cert.keystore.stat().st_mode & 0o077 == 0
    other = Authority.create(tmp_path / "other")
    with pytest.raises(InvalidSignature):
        leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(other.cert.read_bytes()))


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
