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
        ({"apps": [{"match": "x", "name": "x", "on": "label:Bad Key"}]}, "apps[0].on"),
        ({"apps": [{"match": "x", "name": "x", "on": "label:"}]}, "apps[0].on"),
        ({"kubernetes": {"api": "maybe"}}, "kubernetes.api"),
        ({"kubernetes": {"node_name": "Node_1"}}, "kubernetes.node_name"),
        ({"kubernetes": {"nodename": "n"}}, "kubernetes.nodename"),
        ({"kubernetes": "on"}, "kubernetes"),
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
    assert [r.field for r in cfg.apps] == ["cmdline", "exe"]  # YAML reads `on:` as true


def test_kubernetes_settings_from_file_env_and_flag(tmp_path: Path) -> None:
    from streaming.agent.cli import _flags
    from streaming.cli import build_parser

    assert config.build(BASE).kubernetes == config.KubernetesConfig("auto", None)
    f = tmp_path / "agent.yaml"
    f.write_text(
        "clusters: [{name: a, bootstrap_servers: 'h:1'}]\n"
        "kubernetes: {api: on, node_name: node-1}\n"  # YAML 1.1: on/off are booleans
        "apps:\n"
        "  - {match: '(.+)', name: '\\1', on: label:app.kubernetes.io/name}\n"
        "  - {match: '^payments$', name: pay, on: 'label:team'}\n"
    )
    cfg = config.load(str(f), {}, {})
    assert cfg.kubernetes == config.KubernetesConfig("on", "node-1")
    assert [r.label_key for r in cfg.apps] == ["app.kubernetes.io/name", "team"]
    env = {"CONNMON_AGENT_KUBERNETES_API": "off", "CONNMON_AGENT_KUBERNETES_NODE_NAME": "n2"}
    assert config.load(str(f), {}, env).kubernetes == config.KubernetesConfig("off", "n2")
    flags = _flags(build_parser().parse_args(["agent", "--kubernetes-api", "auto"]))
    assert config.load(str(f), flags, env).kubernetes.api == "auto"
    f.write_text("clusters: [{name: a, bootstrap_servers: 'h:1'}]\nkubernetes: {api: off}\n")
    assert config.load(str(f), {}, {}).kubernetes.api == "off"
    with pytest.raises(ConfigError, match="^CONNMON_AGENT_KUBERNETES_NODENAME:"):
        config.from_env({"CONNMON_AGENT_KUBERNETES_NODENAME": "n"})


BASE = {"clusters": [{"name": "ok", "bootstrap_servers": "h:1"}]}


@pytest.mark.parametrize(
    ("data", "setting"),
    [
        ({"tls_cert_file": "/x.pem"}, "tls_cert_file/tls_key_file"),
        ({"tls_key_file": "/x.pem"}, "tls_cert_file/tls_key_file"),
        ({"tls_cert_file": "/nonexistent.pem", "tls_key_file": "/nope"}, "tls_cert_file"),
        ({"basic_auth_user": "prom"}, "basic_auth_user/basic_auth_password_file"),
        ({"basic_auth_password_file": "/x.pem"}, "basic_auth_user"),
        ({"basic_auth_user": "prom", "basic_auth_password_file": "/nope"}, "basic_auth_password"),
        ({"network_namespaces": "host"}, "network_namespaces"),
        ({"network_namespaces": ""}, "network_namespaces"),
    ],
)
def test_bad_metrics_and_namespace_settings_name_the_setting(data: dict, setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.build({**BASE, **data})
    assert str(info.value).startswith(setting), str(info.value)


def test_unloadable_certificate_fails_at_start(tmp_path: Path) -> None:
    crt, key = tmp_path / "crt.pem", tmp_path / "key.pem"
    crt.write_text("not a certificate\n")
    key.write_text("not a key\n")
    with pytest.raises(ConfigError, match="^tls_cert_file/tls_key_file: cannot load"):
        config.build({**BASE, "tls_cert_file": str(crt), "tls_key_file": str(key)})


def test_password_file_is_read_and_checked(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    cfg = config.build({**BASE, "basic_auth_user": "prom", "basic_auth_password_file": str(pw)})
    assert cfg.basic_auth_password_file == str(pw)
    assert cfg.metrics_security.auth == ("prom", "s3cret")
    assert cfg.metrics_security.scheme == "http"
    assert "s3cret" not in repr(cfg)
    pw.write_text("\n")
    with pytest.raises(ConfigError, match="^basic_auth_password_file: .* is empty"):
        config.build({**BASE, "basic_auth_user": "prom", "basic_auth_password_file": str(pw)})


def test_metrics_security_and_namespaces_defaults_and_environment(tmp_path: Path) -> None:
    cfg = config.build(BASE)
    assert cfg.network_namespaces == "all"
    assert cfg.metrics_security.auth is None and cfg.metrics_security.scheme == "http"
    pw = tmp_path / "pw"
    pw.write_text("s3cret")
    env = config.from_env(
        {
            "CONNMON_AGENT_NETWORK_NAMESPACES": "own",
            "CONNMON_AGENT_BASIC_AUTH_USER": "prom",
            "CONNMON_AGENT_BASIC_AUTH_PASSWORD_FILE": str(pw),
            "CONNMON_AGENT_TLS_CERT_FILE": "",  # empty: off
        }
    )
    cfg = config.build(BASE, env)
    assert cfg.network_namespaces == "own"
    assert cfg.tls_cert_file is None
    assert cfg.metrics_security.auth == ("prom", "s3cret")


def test_cli_flags_reach_the_settings(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from streaming.agent.cli import _flags
    from streaming.cli import build_parser, main

    args = build_parser().parse_args(
        ["agent", "--network-namespaces", "own", "--tls-cert-file", "c.pem",
         "--tls-key-file", "k.pem", "--basic-auth-user", "prom",
         "--basic-auth-password-file", "pw"]
    )  # fmt: skip
    flags = _flags(args)
    assert flags["network_namespaces"] == "own"
    assert (flags["tls_cert_file"], flags["tls_key_file"]) == ("c.pem", "k.pem")
    assert (flags["basic_auth_user"], flags["basic_auth_password_file"]) == ("prom", "pw")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--network-namespaces", "host"])
    assert main(["agent", "--cluster-bootstrap", "h:1", "--basic-auth-user", "prom"]) == 2
    assert "basic_auth_user" in capsys.readouterr().err


def test_the_home_clusters_metadata_client_shares_the_producers_credentials() -> None:
    env = config.from_env(
        {"CONNMON_AGENT_KAFKA_SASL_USERNAME": "agent", "CONNMON_AGENT_KAFKA_SASL_PASSWORD": "pw"}
    )
    cfg = config.build(
        {
            "kafka": {
                "bootstrap.servers": "k2:9093,k1:9093",
                "security.protocol": "SASL_SSL",
                "linger.ms": "50",
            },
            "clusters": [
                {"name": "home", "bootstrap_servers": "k1:9093,k2:9093"},
                {"name": "other", "bootstrap_servers": "o1:9093"},
                {"name": "own", "bootstrap_servers": "k1:9093", "kafka": {"sasl.username": "x"}},
            ],
        },
        env,
    )
    home, other, own = cfg.clusters
    assert cfg.metadata_client(home) == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "agent",
        "sasl.password": "pw",
    }
    assert cfg.metadata_client(other) == {}  # another cluster never gets these credentials
    assert cfg.metadata_client(own) == {"sasl.username": "x"}
