"""Config merging and validation: every error names the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.agent import config
from streaming.errors import ConfigError

YAML = """
host: web-1
scan_interval_s: 2
kafka:
  bootstrap.servers: k1:9092
  security.protocol: SASL_SSL
clusters:
  - name: prod
    bootstrap_servers: k1:9092,k2:9092
    endpoints: ["1@k1:9092", "lb:9094"]
    listener_ports: [9092]
    broker_id: 1
apps:
  - {match: "orders", name: orders}
"""


def test_yaml_file_env_and_flags_merge(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text(YAML)
    env = {"CONNMON_AGENT_SCAN_INTERVAL_S": "3", "CONNMON_AGENT_KAFKA_SASL_PASSWORD": "pw"}
    cfg = config.load(str(f), {"summary_interval_s": 30, "host": None}, env)
    assert cfg.host == "web-1" and cfg.scan_interval_s == 3.0 and cfg.summary_interval_s == 30
    assert cfg.kafka == {
        "bootstrap.servers": "k1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.password": "pw",
    }
    (c,) = cfg.clusters
    assert c.bootstrap_servers == ("k1:9092", "k2:9092")
    assert c.endpoints == ((1, "k1:9092"), (None, "lb:9094"))
    assert c.listener_ports == (9092,) and c.broker_id == 1
    assert cfg.apps[0].name == "orders"
    assert cfg.events_topic == "connmon.events" and cfg.queue_size == 10000


def test_toml_and_cluster_bootstrap_flag(tmp_path: Path) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('events_topic = "ev"\n[[clusters]]\nname = "a"\nbootstrap_servers = "h:1"\n')
    cfg = config.load(str(f), {"cluster_bootstrap": ["b=h:2,h:3", "h:4"]}, {})
    assert [c.name for c in cfg.clusters] == ["a", "b", "default"]
    assert cfg.clusters[1].bootstrap_servers == ("h:2", "h:3")


@pytest.mark.parametrize(
    ("data", "setting"),
    [
        ({"scan_interval_s": "fast"}, "scan_interval_s"),
        ({"scan_interval_s": 0}, "scan_interval_s"),
        ({"queue_size": 0}, "queue_size"),
        ({"collector": "ebpf"}, "collector"),
        ({"metrics_address": "nope"}, "metrics_address"),
        ({"scan_intervall_s": 5}, "scan_intervall_s"),
        ({"clusters": [{"name": "a", "bootstrap_servers": "nohost"}]}, "clusters.a.bootstrap"),
        ({"clusters": [{"name": "a"}]}, "clusters.a"),
        ({"clusters": [{"name": "bad name", "bootstrap_servers": "h:1"}]}, "clusters.name"),
        ({"clusters": [{"name": "a", "bootstrap_servers": "h:1", "x": 1}]}, "clusters.x"),
        (
            {"clusters": [{"name": "a", "bootstrap_servers": "h:1", "listener_ports": [0]}]},
            "clusters.a.listener_ports",
        ),
        ({"apps": [{"match": "(", "name": "x"}]}, "apps[0].match"),
        ({"apps": [{"match": "x", "name": "x", "on": "env"}]}, "apps[0].on"),
        ({}, "clusters"),
    ],
)
def test_bad_settings_name_the_setting(data: dict, setting: str) -> None:
    base = {"clusters": [{"name": "ok", "bootstrap_servers": "h:1"}]}
    with pytest.raises(ConfigError) as info:
        config.build({**base, **data} if data else {})
    assert str(info.value).startswith(setting), str(info.value)


def test_unknown_env_variable_is_an_error() -> None:
    with pytest.raises(ConfigError, match="CONNMON_AGENT_SCAN_INTERVAL:"):
        config.from_env({"CONNMON_AGENT_SCAN_INTERVAL": "5"})


def test_unreadable_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config: cannot read"):
        config.load(str(tmp_path / "missing.yaml"), {}, {})
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n")
    with pytest.raises(ConfigError, match="config: .* does not parse"):
        config.load(str(bad), {}, {})


def test_shipped_example_config_is_valid() -> None:
    example = Path(__file__).parents[3] / "deploy" / "systemd" / "agent.example.yaml"
    cfg = config.load(str(example), {}, {})
    assert [c.name for c in cfg.clusters] == ["orders", "legacy"]
    assert cfg.kafka["security.protocol"] == "SASL_SSL"
    assert cfg.clusters[1].endpoints[0] == (10, "10.1.0.10:9092")
    assert cfg.apps[0].pattern.search("java Main --group=orders").expand(cfg.apps[0].name) == (
        "consumer-orders"
    )
