"""deploy/systemd/agent.example.yaml as committed, with the environment its comments name: what
the producer and each cluster's metadata client are given, down to the librdkafka settings; and
the per-cluster environment variables (CONNMON_AGENT_CLUSTER_<CLUSTER>_KAFKA_<KEY>)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streaming.agent import config, kafka_meta
from streaming.agent.metrics import AgentMetrics
from streaming.agent.producer import KafkaSink
from streaming.agent.runner import make_refresher
from streaming.errors import ConfigError

EXAMPLE = Path(__file__).parents[3] / "deploy" / "systemd" / "agent.example.yaml"
HOME_PW, LEGACY_PW = "home-secret", "legacy-secret"
# What /etc/connmon/agent.env holds, as the example's header says.
ENV = {
    "CONNMON_AGENT_KAFKA_SASL_PASSWORD": HOME_PW,
    "CONNMON_AGENT_CLUSTER_LEGACY_KAFKA_SASL_PASSWORD": LEGACY_PW,
}


def test_the_example_loads_with_the_agents_loader() -> None:
    cfg = config.load(str(EXAMPLE), {}, environ={})
    assert [c.name for c in cfg.clusters] == ["orders", "legacy"]
    assert cfg.bootstrap_servers and cfg.apps


def test_the_example_documents_the_variables_it_needs() -> None:
    text = EXAMPLE.read_text()
    for var in ENV:
        assert f"{var}=" in text, var


class FakeAdmin:
    """confluent_kafka's AdminClient: records its settings, answers one broker per cluster."""

    made: list[dict[str, Any]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        FakeAdmin.made.append(conf)

    def list_topics(self, timeout: float) -> Any:
        class Broker:
            id, host, port = 7, "broker-7.example.com", 9093

        class Metadata:
            brokers = {7: Broker()}

        return Metadata()


def test_each_metadata_client_and_the_producer_get_their_own_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import confluent_kafka.admin

    FakeAdmin.made = []
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", FakeAdmin)
    monkeypatch.setattr(kafka_meta, "_admins", {})
    cfg = config.load(str(EXAMPLE), {}, environ=ENV)
    metrics = AgentMetrics()

    assert make_refresher(cfg, metrics).refresh_due(now=0.0) is True
    made = {c["bootstrap.servers"]: c for c in FakeAdmin.made}
    orders = made.pop("kafka-1.example.com:9093,kafka-2.example.com:9093")
    legacy = made.pop("10.1.0.10:9092,10.1.0.11:9092")
    assert not made, made
    assert orders["sasl.username"] == "connmon-agent"
    assert orders["sasl.password"] == HOME_PW
    assert orders["security.protocol"] == "SASL_SSL"
    assert orders["ssl.ca.location"] == "/etc/ssl/certs/ca-certificates.crt"
    assert legacy["sasl.username"] == "connmon-agent-legacy"
    assert legacy["sasl.password"] == LEGACY_PW
    assert legacy["security.protocol"] == "SASL_SSL"
    # The home cluster's credentials never reach the other cluster.
    assert HOME_PW not in legacy.values() and "connmon-agent" not in legacy.values()

    produced: list[dict[str, Any]] = []
    KafkaSink(cfg.events_topic, cfg.host, cfg.kafka, metrics, producer_factory=produced.append)
    (producer,) = produced
    assert producer["bootstrap.servers"] == "kafka-1.example.com:9093,kafka-2.example.com:9093"
    assert (producer["sasl.username"], producer["sasl.password"]) == ("connmon-agent", HOME_PW)
    assert LEGACY_PW not in producer.values()


def _build(env: dict[str, str], clusters: list[dict]) -> config.AgentConfig:
    return config.build({"clusters": clusters}, config.from_env(env))


def test_a_clusters_variables_add_to_and_override_its_kafka_settings() -> None:
    cfg = _build(
        {
            "CONNMON_AGENT_CLUSTER_ORDERS_EU_KAFKA_SASL_PASSWORD": "pw",
            "CONNMON_AGENT_CLUSTER_ORDERS_EU_KAFKA_SASL_USERNAME": "env-user",
        },
        [
            {"name": "orders-eu", "bootstrap_servers": "k1:9093", "kafka": {"sasl.username": "u"}},
            {"name": "orders", "bootstrap_servers": "o1:9093"},
        ],
    )
    eu, orders = cfg.clusters
    assert cfg.metadata_client(eu) == {"sasl.username": "env-user", "sasl.password": "pw"}
    assert cfg.metadata_client(orders) == {}


def test_a_cluster_named_like_a_prefix_of_another_gets_only_its_own() -> None:
    cfg = _build(
        {
            "CONNMON_AGENT_CLUSTER_A_KAFKA_SASL_PASSWORD": "a",
            "CONNMON_AGENT_CLUSTER_A_B_KAFKA_SASL_PASSWORD": "ab",
        },
        [{"name": "a", "endpoints": ["k:1"]}, {"name": "a.b", "endpoints": ["k:2"]}],
    )
    assert [dict(c.kafka) for c in cfg.clusters] == [
        {"sasl.password": "a"},
        {"sasl.password": "ab"},
    ]


@pytest.mark.parametrize(
    ("var", "clusters", "message"),
    [
        ("CONNMON_AGENT_CLUSTER_NOPE_KAFKA_SASL_PASSWORD", [{"name": "a"}], "no configured"),
        ("CONNMON_AGENT_CLUSTER_A_KAFKA_", [{"name": "a"}], "no configured"),
        ("CONNMON_AGENT_CLUSTER_A_B_KAFKA_X", [{"name": "a-b"}, {"name": "a.b"}], "share"),
        ("CONNMON_AGENT_CLUSTER_A_PASSWORD", [{"name": "a"}], "unknown agent setting"),
    ],
)
def test_a_cluster_variable_that_fits_no_cluster_names_itself(
    var: str, clusters: list[dict], message: str
) -> None:
    with_endpoints = [{**c, "endpoints": ["k:1"]} for c in clusters]
    with pytest.raises(ConfigError, match=message) as err:
        _build({var: "x"}, with_endpoints)
    assert var in str(err.value)
