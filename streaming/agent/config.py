"""Agent settings: a YAML or TOML file, then ``CONNMON_AGENT_*`` environment variables, then
command-line flags (later wins). Validated at start; every error names the setting.

File layout (YAML; TOML has the same keys)::

    host: web-1                     # default: the host name
    scan_interval_s: 5
    summary_interval_s: 15
    events_topic: connmon.events
    check_topics: true              # at start: the events topic exists, cleanup.policy delete
    queue_size: 10000
    metrics_address: 127.0.0.1:9852 # empty: no /metrics
    tls_cert_file: /etc/connmon/agent.crt           # with tls_key_file: https (TLS >= 1.2)
    tls_key_file: /etc/connmon/agent.key
    basic_auth_user: prometheus     # with basic_auth_password_file: basic auth on /metrics
    basic_auth_password_file: /etc/connmon/metrics.password   # the password, one line
    collector: auto                 # auto | netlink | proc
    ebpf: auto                      # auto: when kernel and privileges allow | on | off
    network_namespaces: all         # all: every network namespace on the host | own: the agent's
    kafka:                          # producer (librdkafka) settings, security included
      bootstrap.servers: kafka-1:9092
      security.protocol: SASL_SSL
    clusters:
      - name: orders
        bootstrap_servers: kafka-1:9092,kafka-2:9092
        endpoints: ["1@kafka-1:9092", "kafka-lb:9094"]   # static, optional broker id
        listener_ports: [9092]      # on a broker host: sockets on these local ports
        broker_id: 1                # on a broker host: this broker's id
        metadata_refresh_s: 60
        kafka: {security.protocol: SSL}                   # for the metadata client; without
                                    # it, a cluster with the producer's bootstrap servers uses
                                    # the producer's security.*, sasl.* and ssl.* settings
    kubernetes:                     # pod names and labels from the API server (kubeapi.py)
      api: auto                     # auto: on in a pod with a service account token | on | off
      node_name: node-1             # default: the NODE_NAME environment variable
    apps:                           # on: cmdline (default) | exe | comm | pod | label:<key>
      - {match: "orders-(\\w+)", name: "orders-\\1", on: cmdline}
      - {match: "(.+)", name: "\\1", on: "label:app.kubernetes.io/name"}

Environment: ``CONNMON_AGENT_<NAME>`` for a scalar, ``CONNMON_AGENT_KAFKA_<KEY>`` for a producer
setting and ``CONNMON_AGENT_CLUSTER_<CLUSTER>_KAFKA_<KEY>`` for one of cluster ``<CLUSTER>``'s
metadata client (its name upper-cased, other characters than letters and digits as ``_``);
``<KEY>`` is the librdkafka setting upper-cased with ``_`` for ``.``:
``CONNMON_AGENT_CLUSTER_PAYMENTS_KAFKA_SASL_PASSWORD`` is ``sasl.password`` of cluster
``payments``. So credentials stay out of the file: a cluster's variables add to (and override)
its ``kafka:``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from streaming.agent.apps import FIELDS as APP_FIELDS
from streaming.agent.apps import LABEL_PREFIX, AppRule
from streaming.agent.collector import COLLECTORS
from streaming.agent.collector import NAMESPACE_MODES as NETWORK_NAMESPACES
from streaming.agent.ebpf import MODES as EBPF_MODES
from streaming.agent.kafka_meta import split_host_port
from streaming.agent.kubeapi import API_MODES, valid_label_key
from streaming.errors import ConfigError
from streaming.options import env_key, parse_bool, read_config_file
from streaming.topics.spec import DEFAULT_NAMES as TOPIC_NAMES
from streaming.webserver import EndpointSecurity, check_security

ENV_PREFIX = "CONNMON_AGENT_"
# CONNMON_AGENT_CLUSTER_<CLUSTER>_KAFKA_<KEY>: a setting of one cluster's metadata client.
_CLUSTER_ENV = ENV_PREFIX + "CLUSTER_"


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    bootstrap_servers: tuple[str, ...] = ()
    endpoints: tuple[tuple[int | None, str], ...] = ()
    listener_ports: tuple[int, ...] = ()
    broker_id: int | None = None
    metadata_refresh_s: float = 60.0
    kafka: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KubernetesConfig:
    """``kubernetes:``: whether pods are watched on the API server, and this node's name."""

    api: str = "auto"  # auto | on | off (kubeapi.in_cluster resolves auto at start)
    node_name: str | None = None  # None: the NODE_NAME environment variable


@dataclass(frozen=True)
class AgentConfig:
    clusters: tuple[ClusterConfig, ...]
    host: str = field(default_factory=socket.gethostname)
    scan_interval_s: float = 5.0
    summary_interval_s: float = 15.0
    events_topic: str = TOPIC_NAMES["events"]
    # At start, check that the events topic exists with cleanup.policy delete.
    check_topics: bool = True
    queue_size: int = 10000
    metrics_address: str = "127.0.0.1:9852"
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password_file: str | None = None
    collector: str = "auto"
    ebpf: str = "auto"
    network_namespaces: str = "all"
    kafka: Mapping[str, str] = field(default_factory=dict)
    apps: tuple[AppRule, ...] = ()
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    proc_root: str = "/proc"
    # The host's cgroup mount: whether a process's cgroup is frozen (``pause``).
    cgroup_root: str = "/sys/fs/cgroup"
    flush_timeout_s: float = 10.0
    metadata_timeout_s: float = 5.0
    # The checked form of the four TLS and basic-auth settings, password read.
    metrics_security: EndpointSecurity = field(default_factory=EndpointSecurity)

    @property
    def bootstrap_servers(self) -> str | None:
        return self.kafka.get("bootstrap.servers")

    def metadata_client(self, c: ClusterConfig) -> dict[str, str]:
        """The librdkafka settings of cluster ``c``'s metadata client: its own (``kafka:`` and
        its CONNMON_AGENT_CLUSTER_<CLUSTER>_KAFKA_* variables); or, for the cluster the agent
        produces to (the same bootstrap servers) when it has none, the producer's security
        settings, so credentials are given once."""
        if c.kafka or not self.bootstrap_servers:
            return dict(c.kafka)
        if set(_servers(self.bootstrap_servers, "kafka.bootstrap.servers")) != set(
            c.bootstrap_servers
        ):
            return {}
        return {k: v for k, v in self.kafka.items() if k.startswith(_SECURITY_PREFIXES)}


# The producer settings a cluster's metadata client shares with it (``metadata_client``).
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")

# Scalar settings: name -> converter. Env: CONNMON_AGENT_<NAME upper>.
_SCALARS: dict[str, Any] = {
    "host": str,
    "scan_interval_s": float,
    "summary_interval_s": float,
    "events_topic": str,
    "check_topics": parse_bool,
    "queue_size": int,
    "metrics_address": str,
    "tls_cert_file": str,
    "tls_key_file": str,
    "basic_auth_user": str,
    "basic_auth_password_file": str,
    "collector": str,
    "ebpf": str,
    "network_namespaces": str,
    "proc_root": str,
    "cgroup_root": str,
    "flush_timeout_s": float,
    "metadata_timeout_s": float,
}
_KNOWN_TOP = set(_SCALARS) | {"kafka", "clusters", "apps", "kubernetes"}
_KNOWN_KUBERNETES = ("api", "node_name")
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_KNOWN_CLUSTER = {
    "name",
    "bootstrap_servers",
    "endpoints",
    "listener_ports",
    "broker_id",
    "metadata_refresh_s",
    "kafka",
}


def from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Settings from CONNMON_AGENT_* (scalars, BOOTSTRAP_SERVERS, CLUSTER_BOOTSTRAP, KAFKA_*,
    CLUSTER_<CLUSTER>_KAFKA_*, KUBERNETES_API, KUBERNETES_NODE_NAME)."""
    out: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name in _SCALARS:
            out[name] = value
        elif name == "bootstrap_servers":
            out.setdefault("kafka", {})["bootstrap.servers"] = value
        elif name.startswith("kubernetes_") and name[11:] in _KNOWN_KUBERNETES:
            out.setdefault("kubernetes", {})[name[11:]] = value
        elif name == "cluster_bootstrap":
            out["cluster_bootstrap"] = [v for v in value.split(";") if v]
        elif name.startswith("kafka_"):
            # CONNMON_AGENT_KAFKA_SASL_PASSWORD -> sasl.password
            out.setdefault("kafka", {})[env_key(name[6:])] = value
        elif name.startswith("cluster_") and "_KAFKA_" in key[len(_CLUSTER_ENV) - 1 :]:
            # Matched to a cluster by build(), once the clusters are known.
            out.setdefault("cluster_env", {})[key] = value
        else:
            raise ConfigError(f"{key}: unknown agent setting")
    return out


def cluster_env_name(name: str) -> str:
    """A cluster's name in its environment variables: ``orders-eu`` -> ``ORDERS_EU``."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _with_cluster_env(
    clusters: list[ClusterConfig], variables: Mapping[str, str]
) -> list[ClusterConfig]:
    """``clusters`` with their CONNMON_AGENT_CLUSTER_<CLUSTER>_KAFKA_<KEY> settings added to
    their ``kafka:``; a variable naming no cluster (or two) is an error."""
    by_env: dict[str, list[str]] = {}
    for c in clusters:
        by_env.setdefault(cluster_env_name(c.name), []).append(c.name)
    extra: dict[str, dict[str, str]] = {}
    for var, value in sorted(variables.items()):
        rest = var[len(_CLUSTER_ENV) :]
        owners = [e for e in by_env if rest.startswith(f"{e}_KAFKA_") and len(rest) > len(e) + 7]
        if not owners:
            names = ", ".join(sorted(by_env)) or "none"
            raise ConfigError(f"{var}: names no configured cluster (their names here: {names})")
        env_name = max(owners, key=len)
        if len(by_env[env_name]) > 1:
            raise ConfigError(f"{var}: clusters {by_env[env_name]} share the name {env_name}")
        setting = env_key(rest[len(env_name) + 7 :])
        extra.setdefault(by_env[env_name][0], {})[setting] = value
    return [
        replace(c, kafka={**c.kafka, **extra[c.name]}) if c.name in extra else c for c in clusters
    ]


def parse_cluster_bootstrap(spec: str) -> ClusterConfig:
    """'NAME=host:port,host:port' (or just the servers: cluster 'default')."""
    name, sep, servers = spec.partition("=")
    if not sep:
        name, servers = "default", spec
    return _cluster({"name": name, "bootstrap_servers": servers}, "cluster-bootstrap")


def _num(value: Any, conv: Callable[[Any], Any], setting: str, minimum: float | None = None) -> Any:
    try:
        out = conv(value)
    except (TypeError, ValueError):
        kind = "boolean" if conv is parse_bool else conv.__name__
        raise ConfigError(f"{setting}: {value!r} is not a valid {kind}") from None
    if minimum is not None and out < minimum:
        raise ConfigError(f"{setting}: must be at least {minimum}, not {value!r}")
    return out


def _servers(value: Any, setting: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    out = tuple(str(s).strip() for s in items if str(s).strip())
    for hp in out:
        try:
            split_host_port(hp)
        except ValueError:
            raise ConfigError(f"{setting}: {hp!r} is not host:port") from None
    return out


def _kafka_conf(value: Any, setting: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{setting}: must be a mapping of librdkafka settings")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _cluster(raw: Any, where: str) -> ClusterConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: each cluster must be a mapping")
    unknown = sorted(set(raw) - _KNOWN_CLUSTER)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown cluster setting")
    name = str(raw.get("name") or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
        raise ConfigError(f"{where}.name: {name!r} must be 1-64 of [A-Za-z0-9._-]")
    where = f"clusters.{name}" if where == "clusters" else where
    endpoints: list[tuple[int | None, str]] = []
    for item in raw.get("endpoints") or []:
        ident, sep, hp = str(item).partition("@")
        bid = _num(ident, int, f"{where}.endpoints", 0) if sep else None
        endpoints.append((bid, _servers(hp if sep else ident, f"{where}.endpoints")[0]))
    ports = tuple(
        _num(p, int, f"{where}.listener_ports", 1) for p in raw.get("listener_ports") or []
    )
    if any(p > 65535 for p in ports):
        raise ConfigError(f"{where}.listener_ports: ports must be 1-65535")
    bootstrap = _servers(raw.get("bootstrap_servers"), f"{where}.bootstrap_servers")
    if not bootstrap and not endpoints and not ports:
        raise ConfigError(
            f"{where}: needs bootstrap_servers, endpoints or listener_ports to know its brokers"
        )
    broker_id = raw.get("broker_id")
    return ClusterConfig(
        name=name,
        bootstrap_servers=bootstrap,
        endpoints=tuple(endpoints),
        listener_ports=ports,
        broker_id=None if broker_id is None else _num(broker_id, int, f"{where}.broker_id", 0),
        metadata_refresh_s=_num(
            raw.get("metadata_refresh_s", 60.0), float, f"{where}.metadata_refresh_s", 1.0
        ),
        kafka=_kafka_conf(raw.get("kafka"), f"{where}.kafka"),
    )


def _app_rule(raw: Any, i: int) -> AppRule:
    where = f"apps[{i}]"
    if not isinstance(raw, Mapping) or "match" not in raw or "name" not in raw:
        raise ConfigError(f"{where}: needs 'match' (a regex) and 'name'")
    # YAML 1.1 (PyYAML) reads an unquoted `on` key as the boolean true.
    on = str(raw.get("on", raw.get(True, "cmdline")))
    if on.startswith(LABEL_PREFIX):
        key = on.removeprefix(LABEL_PREFIX)
        if not valid_label_key(key):
            raise ConfigError(f"{where}.on: {key!r} is not a Kubernetes label key")
    elif on not in APP_FIELDS:
        fields = ", ".join((*APP_FIELDS, f"{LABEL_PREFIX}<key>"))
        raise ConfigError(f"{where}.on: must be one of {fields}, not {on!r}")
    try:
        pattern = re.compile(str(raw["match"]))
    except re.error as exc:
        raise ConfigError(f"{where}.match: bad regex: {exc}") from None
    return AppRule(pattern, str(raw["name"]), on)


def _kubernetes(raw: Any) -> KubernetesConfig:
    if raw is None:
        return KubernetesConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError("kubernetes: must be a mapping (api, node_name)")
    unknown = sorted(set(raw) - set(_KNOWN_KUBERNETES), key=str)
    if unknown:
        raise ConfigError(f"kubernetes.{unknown[0]}: unknown setting")
    api = raw.get("api", "auto")
    if isinstance(api, bool):  # YAML 1.1 reads unquoted on/off as booleans
        api = "on" if api else "off"
    api = str(api).strip().lower()
    if api not in API_MODES:
        raise ConfigError(f"kubernetes.api: must be one of {', '.join(API_MODES)}, not {api!r}")
    node = raw.get("node_name")
    node = str(node).strip() if node is not None else ""
    if node and not _NODE_NAME.fullmatch(node):
        raise ConfigError(f"kubernetes.node_name: {node!r} is not a Kubernetes node name")
    return KubernetesConfig(api=api, node_name=node or None)


def build(
    file_data: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """Merge file < env < flags (None flag values are ignored) and validate."""
    merged: dict[str, Any] = {}
    for layer in (file_data or {}, env or {}, flags or {}):
        for k, v in layer.items():
            if v is None:
                continue
            if k == "kafka":
                merged["kafka"] = {**merged.get("kafka", {}), **_kafka_conf(v, "kafka")}
            elif k == "kubernetes" and isinstance(v, Mapping):
                merged["kubernetes"] = {**(merged.get("kubernetes") or {}), **v}
            else:
                merged[k] = v
    unknown = sorted(set(merged) - _KNOWN_TOP - {"cluster_bootstrap", "cluster_env"})
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown agent setting")
    scalars: dict[str, Any] = {}
    for name, conv in _SCALARS.items():
        if name in merged:
            scalars[name] = _num(merged[name], conv, name) if conv is not str else str(merged[name])
    for name in ("scan_interval_s", "summary_interval_s", "flush_timeout_s", "metadata_timeout_s"):
        if name in scalars and scalars[name] <= 0:
            raise ConfigError(f"{name}: must be positive, not {scalars[name]}")
    if "queue_size" in scalars and scalars["queue_size"] < 1:
        raise ConfigError(f"queue_size: must be at least 1, not {scalars['queue_size']}")
    if scalars.get("collector", "auto") not in COLLECTORS:
        raise ConfigError(f"collector: must be one of {', '.join(COLLECTORS)}")
    if scalars.get("ebpf", "auto") not in EBPF_MODES:
        raise ConfigError(f"ebpf: must be one of {', '.join(EBPF_MODES)}, not {scalars['ebpf']!r}")
    if scalars.get("network_namespaces", "all") not in NETWORK_NAMESPACES:
        raise ConfigError(
            f"network_namespaces: must be one of {', '.join(NETWORK_NAMESPACES)}, "
            f"not {scalars['network_namespaces']!r}"
        )
    if scalars.get("events_topic") == "":
        raise ConfigError("events_topic: must not be empty")
    addr = scalars.get("metrics_address", "")
    if addr:
        host, sep, port = addr.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ConfigError(f"metrics_address: {addr!r} is not host:port")
    for name in ("tls_cert_file", "tls_key_file", "basic_auth_user", "basic_auth_password_file"):
        if name in scalars:
            scalars[name] = scalars[name] or None  # an empty value (e.g. from the environment): off
    security = check_security(
        scalars.get("tls_cert_file"),
        scalars.get("tls_key_file"),
        scalars.get("basic_auth_user"),
        scalars.get("basic_auth_password_file"),
        sep="_",
    )
    raw_clusters = merged.get("clusters") or []
    if not isinstance(raw_clusters, list):
        raise ConfigError("clusters: must be a list")
    clusters = [_cluster(c, "clusters") for c in raw_clusters]
    for spec in merged.get("cluster_bootstrap") or []:
        c = parse_cluster_bootstrap(spec)
        clusters = [x for x in clusters if x.name != c.name] + [c]
    kafka = merged.get("kafka", {})
    if not clusters and kafka.get("bootstrap.servers"):
        _servers(kafka["bootstrap.servers"], "bootstrap-servers")
        clusters = [ClusterConfig("default", _servers(kafka["bootstrap.servers"], "kafka"))]
    if not clusters:
        raise ConfigError("clusters: none configured (give --cluster-bootstrap or a config file)")
    names = [c.name for c in clusters]
    if len(set(names)) != len(names):
        raise ConfigError(f"clusters: duplicate cluster name in {names}")
    clusters = _with_cluster_env(clusters, merged.get("cluster_env") or {})
    apps = merged.get("apps") or []
    if not isinstance(apps, list):
        raise ConfigError("apps: must be a list of rules")
    return AgentConfig(
        clusters=tuple(clusters),
        kafka=kafka,
        apps=tuple(_app_rule(r, i) for i, r in enumerate(apps)),
        kubernetes=_kubernetes(merged.get("kubernetes")),
        metrics_security=security,
        **scalars,
    )


def load(
    path: str | None, flags: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> AgentConfig:
    """The agent's configuration from a file (optional), the environment and flags."""
    file_data = read_config_file(path) if path else {}
    return build(file_data, from_env(os.environ if environ is None else environ), flags)
