"""Exporter settings as one object, checked at start: a wrong one names itself."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from streaming.errors import ConfigError
from streaming.exporter.shard import Shard, parse_shard
from streaming.options import parse_pairs
from streaming.topics.spec import DEFAULT_NAMES as TOPIC_NAMES
from streaming.webserver import EndpointSecurity, check_security

DEFAULT_LISTEN = "127.0.0.1:9853"
DEFAULT_TOPICS = {role: TOPIC_NAMES[role] for role in ("aggregates", "findings", "job_status")}


@dataclass(frozen=True)
class ExporterConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    topics: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_TOPICS))
    listen_host: str = "127.0.0.1"
    listen_port: int = 9853
    series_limit: int = 20000
    staleness_s: float = 300.0
    finding_staleness_s: float = 1800.0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password: str | None = field(default=None, repr=False)
    kafka_config: dict[str, str] = field(default_factory=dict)
    shard: Shard = field(default_factory=Shard)
    # At start, check that the topics exist and are compacted.
    check_topics: bool = True

    @property
    def security(self) -> EndpointSecurity:
        """The /metrics endpoint's TLS and basic-auth settings."""
        return EndpointSecurity(
            self.tls_cert_file, self.tls_key_file, self.basic_auth_user, self.basic_auth_password
        )


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"listen: {value!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def build(
    bootstrap_servers: str,
    listen: str = DEFAULT_LISTEN,
    aggregates_topic: str = DEFAULT_TOPICS["aggregates"],
    findings_topic: str = DEFAULT_TOPICS["findings"],
    status_topic: str = DEFAULT_TOPICS["job_status"],
    series_limit: int = 20000,
    staleness_s: float = 300.0,
    finding_staleness_s: float = 1800.0,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    basic_auth_user: str | None = None,
    basic_auth_password_file: str | None = None,
    kafka_config: list[str] | None = None,
    kafka_env: Mapping[str, str] | None = None,
    check_topics: bool = True,
    shards: int = 1,
    shard_index: str | int = 0,
) -> ExporterConfig:
    """Validate every setting; raises ``ConfigError`` naming the first wrong one."""
    if not bootstrap_servers.strip():
        raise ConfigError("bootstrap-servers: empty")
    host, port = parse_listen(listen)
    topics = {
        "aggregates": aggregates_topic,
        "findings": findings_topic,
        "job_status": status_topic,
    }
    for role, name in topics.items():
        if not name.strip():
            raise ConfigError(f"{role.replace('_', '-')}-topic: empty")
    if len(set(topics.values())) != len(topics):
        raise ConfigError("aggregates-topic/findings-topic/status-topic: must be different topics")
    if series_limit < 1:
        raise ConfigError(f"series-limit: {series_limit} must be at least 1")
    if staleness_s <= 0:
        raise ConfigError(f"staleness: {staleness_s} must be > 0 seconds")
    if finding_staleness_s <= 0:
        raise ConfigError(f"finding-staleness: {finding_staleness_s} must be > 0 seconds")
    shard = parse_shard(shard_index, shards)
    security = check_security(
        tls_cert_file, tls_key_file, basic_auth_user, basic_auth_password_file, sep="-"
    )
    return ExporterConfig(
        bootstrap_servers=bootstrap_servers.strip(),
        topics=topics,
        listen_host=host,
        listen_port=port,
        series_limit=series_limit,
        staleness_s=staleness_s,
        finding_staleness_s=finding_staleness_s,
        tls_cert_file=security.tls_cert_file,
        tls_key_file=security.tls_key_file,
        basic_auth_user=security.basic_auth_user,
        basic_auth_password=security.basic_auth_password,
        kafka_config={**(kafka_env or {}), **parse_pairs("kafka-config", kafka_config)},
        check_topics=bool(check_topics),
        shard=shard,
    )


def default_bootstrap() -> str:
    return os.environ.get("CONNMON_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
