"""The one definition of every connmon topic: role, default name, partitions, replication and
topic configs; and the settings that change them (config file ``topics:`` section, ``--set``).

Settings shape (YAML or TOML; every key optional)::

    bootstrap_servers: kafka-1:9092       # or kafka: {bootstrap.servers: ...}
    replication_factor: 3                 # every topic's, unless the topic sets its own
    min_insync_replicas: 2                # every topic's min.insync.replicas, likewise
                                          # (default: 2, or 1 for a replication factor < 3)
    topics:
      events: {name: connmon.events, partitions: 24, configs: {retention.ms: 172800000}}
      findings: {replication_factor: 5}
    kafka: {security.protocol: SASL_SSL, ...}   # librdkafka settings of the admin client

Roles: ``events``, ``aggregates``, ``findings``, ``deadletter``, ``job_status`` (``job-status``
works too), ``partials``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from streaming.errors import ConfigError

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
DEFAULT_REPLICATION_FACTOR = 3
DEFAULT_MIN_INSYNC_REPLICAS = 2

ROLES = ("events", "aggregates", "findings", "deadletter", "job_status", "partials")
# What each topic's data flow needs: the exporter rebuilds its state from the compacted ones;
# compaction on the others would keep only the newest record per key (per host for events).
POLICY = {
    "events": "delete",
    "aggregates": "compact",
    "findings": "compact",
    "deadletter": "delete",
    "job_status": "compact",
    "partials": "delete",
}
# The largest record each topic must take (``max.message.bytes``, broker default 1 MiB): the
# job's writers fail a batch on a record its topic refuses. A partials record holds one state
# bucket's partial rows of one batch.
PARTIALS_MAX_BYTES = 16 * 1024 * 1024
MIN_MESSAGE_BYTES = {role: 64 * 1024 for role in POLICY} | {"partials": PARTIALS_MAX_BYTES}
FIELDS = ("name", "partitions", "replication_factor", "configs")
_POLICIES = {"compact", "delete"}
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_CONFIG_NAME = re.compile(r"^[a-z][a-z0-9._-]*$")
_INT_SUFFIXES = (".ms", ".bytes", ".messages")
_TOP_KEYS = {"bootstrap_servers", "replication_factor", "min_insync_replicas", "topics", "kafka"}


@dataclass(frozen=True)
class TopicSpec:
    """A topic as connmon wants it. ``configs`` always holds ``cleanup.policy`` and
    ``min.insync.replicas``."""

    role: str
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def policy(self) -> str:
        return self.configs["cleanup.policy"]

    @property
    def min_insync_replicas(self) -> int:
        return int(self.configs["min.insync.replicas"])


def _compacted(**extra: str) -> dict[str, str]:
    # Hourly segments: the active segment is never compacted, so a restarted exporter re-reads
    # at most an hour of superseded records, and cleaning starts once 10% of the log is dirty.
    return {
        "cleanup.policy": "compact",
        "segment.ms": str(HOUR_MS),
        "min.cleanable.dirty.ratio": "0.1",
        **extra,
    }


def _isr() -> str:
    return str(DEFAULT_MIN_INSYNC_REPLICAS)


DEFAULTS: tuple[TopicSpec, ...] = (
    TopicSpec(
        "events",
        "connmon.events",
        12,
        DEFAULT_REPLICATION_FACTOR,
        {"cleanup.policy": "delete", "retention.ms": str(DAY_MS), "min.insync.replicas": _isr()},
    ),
    TopicSpec(
        "aggregates",
        "connmon.aggregates",
        6,
        DEFAULT_REPLICATION_FACTOR,
        _compacted(**{"min.insync.replicas": _isr()}),
    ),
    TopicSpec(
        "findings",
        "connmon.findings",
        3,
        DEFAULT_REPLICATION_FACTOR,
        _compacted(**{"min.insync.replicas": _isr()}),
    ),
    TopicSpec(
        "deadletter",
        "connmon.deadletter",
        3,
        DEFAULT_REPLICATION_FACTOR,
        {
            "cleanup.policy": "delete",
            "retention.ms": str(7 * DAY_MS),
            "min.insync.replicas": _isr(),
        },
    ),
    TopicSpec(
        "job_status",
        "connmon.job-status",
        1,
        DEFAULT_REPLICATION_FACTOR,
        _compacted(**{"min.insync.replicas": _isr()}),
    ),
    TopicSpec(
        "partials",
        "connmon.partials",
        12,
        DEFAULT_REPLICATION_FACTOR,
        {
            "cleanup.policy": "delete",
            "retention.ms": str(6 * HOUR_MS),
            "max.message.bytes": str(PARTIALS_MAX_BYTES),
            "min.insync.replicas": _isr(),
        },
    ),
)
DEFAULT_NAMES = {s.role: s.name for s in DEFAULTS}


def role_key(text: str) -> str:
    """``job-status`` -> ``job_status``; an unknown role raises ConfigError."""
    role = str(text).strip().replace("-", "_")
    if role not in ROLES:
        raise ConfigError(f"topics.{text}: unknown topic role (one of {', '.join(ROLES)})")
    return role


def policy_set(value: str) -> frozenset[str]:
    """``compact,delete`` -> {compact, delete}; the order does not matter to Kafka."""
    return frozenset(p.strip() for p in str(value).split(",") if p.strip())


def config_value(value: Any) -> str:
    """A YAML/TOML value as Kafka's string form (booleans lower case)."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).strip()


def _int(value: Any, setting: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{setting}: {value!r} is not an integer")
    try:
        out = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{setting}: {value!r} is not an integer") from None
    if out < minimum:
        raise ConfigError(f"{setting}: must be at least {minimum}, not {out}")
    return out


def check_config(role: str, key: str, value: str, setting: str) -> str:
    """Validate one topic config value; returns its normal form."""
    if not _CONFIG_NAME.match(key):
        raise ConfigError(f"{setting}: {key!r} is not a Kafka topic config name")
    if key == "cleanup.policy":
        policies = policy_set(value)
        if not policies or not policies <= _POLICIES:
            raise ConfigError(f"{setting}: {value!r} must be compact, delete or compact,delete")
        if POLICY[role] == "compact" and "compact" not in policies:
            raise ConfigError(
                f"{setting}: must include compact (the exporter rebuilds its state from "
                f"the {role} topic)"
            )
        if POLICY[role] == "delete" and "compact" in policies:
            raise ConfigError(
                f"{setting}: must be delete (compaction would keep only the newest record per "
                f"key of the {role} topic)"
            )
        return ",".join(sorted(policies))
    if key == "min.insync.replicas":
        return str(_int(value, setting, 1))
    if key == "min.cleanable.dirty.ratio":
        try:
            ratio = float(value)
        except ValueError:
            raise ConfigError(f"{setting}: {value!r} is not a number") from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"{setting}: must be between 0 and 1, not {value}")
        return value
    if key.endswith(_INT_SUFFIXES):
        return str(_int(value, setting, -1))
    if not value:
        raise ConfigError(f"{setting}: empty value")
    return value


def _apply(spec: TopicSpec, raw: Any, where: str) -> TopicSpec:
    """``spec`` changed by one topic's settings (a mapping of FIELDS)."""
    if raw is None:
        return spec
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(FIELDS)}")
    unknown = sorted(set(map(str, raw)) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown topic setting ({', '.join(FIELDS)})")
    changes: dict[str, Any] = {}
    if raw.get("name") is not None:
        name = config_value(raw["name"])
        if not _TOPIC_NAME.match(name) or name in (".", ".."):
            raise ConfigError(f"{where}.name: {name!r} is not a valid Kafka topic name")
        changes["name"] = name
    if raw.get("partitions") is not None:
        changes["partitions"] = _int(raw["partitions"], f"{where}.partitions", 1)
    if raw.get("replication_factor") is not None:
        rf = _int(raw["replication_factor"], f"{where}.replication_factor", 1)
        changes["replication_factor"] = rf
    configs = raw.get("configs")
    if configs is not None:
        if not isinstance(configs, Mapping):
            raise ConfigError(f"{where}.configs: must be a mapping of topic configs")
        merged = dict(spec.configs)
        for key, value in configs.items():
            key = str(key)
            setting = f"{where}.configs.{key}"
            merged[key] = check_config(spec.role, key, config_value(value), setting)
        changes["configs"] = merged
    return replace(spec, **changes)


def overrides_to_settings(pairs: Mapping[str, str]) -> dict[str, Any]:
    """``--set`` pairs (``events.partitions=24``, ``findings.retention.ms=...``,
    ``replication_factor=2``) in the config file's shape."""
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        if key in ("replication_factor", "min_insync_replicas"):
            out[key] = value
            continue
        role, sep, rest = key.partition(".")
        if not sep or not rest:
            raise ConfigError(
                f"set: {key!r} is not ROLE.SETTING (e.g. events.partitions) nor "
                "replication_factor / min_insync_replicas"
            )
        topic = out.setdefault("topics", {}).setdefault(role, {})
        if rest in ("name", "partitions", "replication_factor"):
            topic[rest] = value
        else:  # anything else is a topic config: events.retention.ms=3600000
            topic.setdefault("configs", {})[rest] = value
    return out


def check_top(data: Mapping[str, Any], origin: str) -> None:
    unknown = sorted(set(map(str, data)) - _TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: unknown setting in {origin} (known: {', '.join(sorted(_TOP_KEYS))})"
        )


def build_specs(*layers: Mapping[str, Any]) -> tuple[TopicSpec, ...]:
    """The defaults changed by each layer in turn (config file, then ``--set``); validated."""
    specs = {s.role: s for s in DEFAULTS}
    explicit_isr: set[str] = set()  # roles whose min.insync.replicas a setting gave
    for layer in layers:
        rf = layer.get("replication_factor")
        isr = layer.get("min_insync_replicas")
        for role, s in specs.items():
            if rf is not None:
                s = replace(s, replication_factor=_int(rf, "replication_factor", 1))
            if isr is not None:
                value = str(_int(isr, "min_insync_replicas", 1))
                s = replace(s, configs={**s.configs, "min.insync.replicas": value})
                explicit_isr.add(role)
            specs[role] = s
        topics = layer.get("topics") or {}
        if not isinstance(topics, Mapping):
            raise ConfigError("topics: must be a mapping of topic role to settings")
        for raw_role, raw in topics.items():
            role = role_key(raw_role)
            specs[role] = _apply(specs[role], raw, f"topics.{raw_role}")
            configs = raw.get("configs") if isinstance(raw, Mapping) else None
            if isinstance(configs, Mapping) and "min.insync.replicas" in configs:
                explicit_isr.add(role)
    for role, s in specs.items():
        if role not in explicit_isr:  # the default follows a smaller replication factor
            isr = min(DEFAULT_MIN_INSYNC_REPLICAS, max(1, s.replication_factor - 1))
            specs[role] = replace(s, configs={**s.configs, "min.insync.replicas": str(isr)})
    out = tuple(specs[r] for r in ROLES)
    for s in out:
        if s.min_insync_replicas > s.replication_factor:
            raise ConfigError(
                f"topics.{s.role}.configs.min.insync.replicas: {s.min_insync_replicas} is more "
                f"than its replication_factor {s.replication_factor}"
            )
    names = [s.name for s in out]
    for s in out:
        if names.count(s.name) > 1:
            raise ConfigError(f"topics.{s.role}.name: {s.name} is used by another topic role")
    return out


def for_cluster(spec: TopicSpec, brokers: int) -> TopicSpec:
    """``spec`` capped to a cluster of ``brokers`` brokers.

    The replication factor is capped at the number of brokers. ``min.insync.replicas`` is
    capped at the replication factor, and when the replication factor had to be capped, at
    one less (but at least 1) so that one broker can still be down: a 1-broker cluster gets
    1/1, a 2-broker one 2/1, three or more brokers the configured 3/2.
    """
    rf = max(1, min(spec.replication_factor, brokers))
    isr = min(spec.min_insync_replicas, rf)
    if rf < spec.replication_factor:
        isr = min(isr, max(1, rf - 1))
    if rf == spec.replication_factor and isr == spec.min_insync_replicas:
        return spec
    return replace(
        spec, replication_factor=rf, configs={**spec.configs, "min.insync.replicas": str(isr)}
    )
