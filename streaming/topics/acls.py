"""The Kafka ACLs each connmon component needs, and nothing more: one definition read by the
start checks (``admin.check_at_start``), ``connmon topics acls`` and the docs.

A component's principal needs, on each topic it uses (names from the topics settings):

- agent: WRITE on the events topic;
- job: READ on events and partials, WRITE on partials, aggregates, findings, deadletter and
  job status;
- exporter: READ on aggregates, findings and job status;
- admin (``connmon topics create|check``): CREATE, DESCRIBE and ALTER_CONFIGS on every topic.

The exporter also needs DESCRIBE on the consumer groups whose id starts with
``connmon-exporter-`` (a prefixed ACL): it assigns partitions itself and commits nothing, but
its client (librdkafka) looks up its group's coordinator all the same, and a refusal shows as
a consumer error every few seconds.

The agent, the job and the exporter also need DESCRIBE_CONFIGS on their topics for their start
check (``check_topics``), which reads each topic's cleanup policy. READ and WRITE imply
DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS. The job needs no group ACL (Spark assigns
partitions and its consumers never ask for a coordinator), and no component needs an
idempotent write or cluster ACL (brokers since Kafka 2.8 allow idempotence to anyone who may
WRITE).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from streaming.errors import ConfigError

COMPONENTS = ("agent", "job", "exporter", "admin")
# Every exporter's consumer group id starts so (one group per process, nothing committed).
EXPORTER_GROUP_PREFIX = "connmon-exporter-"
# Prefixed group grants: component -> (group id prefix, operations).
_GROUP_OPERATIONS = {"exporter": (EXPORTER_GROUP_PREFIX, ("DESCRIBE",))}
DEFAULT_PRINCIPALS = {c: f"User:connmon-{c}" for c in COMPONENTS}
# The SASL user of each default principal.
DEFAULT_USERS = {c: p.partition(":")[2] for c, p in DEFAULT_PRINCIPALS.items()}

# Role -> operations on that topic, per component, and why.
_TOPIC_OPERATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "agent": {"events": ("WRITE",)},
    "job": {
        "events": ("READ",),
        "partials": ("READ", "WRITE"),
        "aggregates": ("WRITE",),
        "findings": ("WRITE",),
        "deadletter": ("WRITE",),
        "job_status": ("WRITE",),
    },
    "exporter": {"aggregates": ("READ",), "findings": ("READ",), "job_status": ("READ",)},
}
_ADMIN_OPERATIONS = ("CREATE", "DESCRIBE", "ALTER_CONFIGS")
# What each ``connmon topics`` action checks before it starts, on the topics that exist.
ADMIN_ACTIONS = {
    "check": ("DESCRIBE", "DESCRIBE_CONFIGS"),
    "create": ("DESCRIBE", "DESCRIBE_CONFIGS"),
    "alter": ("DESCRIBE", "ALTER_CONFIGS"),
}
_WHY = {
    "READ": "read its records",
    "WRITE": "write its records",
    "DESCRIBE_CONFIGS": "read its configs, as start checks and topics check do",
    "CREATE": "connmon topics create",
    "DESCRIBE": "see the topic in metadata",
    "ALTER_CONFIGS": "connmon topics create --alter",
    "group DESCRIBE": "its client looks up its group's coordinator",
}
# The command-line spelling of each operation (kafka-acls --operation).
_CLI_NAMES = {
    "READ": "Read",
    "WRITE": "Write",
    "CREATE": "Create",
    "DESCRIBE": "Describe",
    "DESCRIBE_CONFIGS": "DescribeConfigs",
    "ALTER_CONFIGS": "AlterConfigs",
}
# Operations whose grant also allows the key (Kafka's own implication rules).
IMPLIED_BY = {
    "DESCRIBE": ("READ", "WRITE", "DELETE", "ALTER", "ALL"),
    "DESCRIBE_CONFIGS": ("ALTER_CONFIGS", "ALL"),
}


@dataclass(frozen=True)
class Grant:
    """One ACL: ``operation`` allowed on topic ``name`` (``role`` is the topic's role), or on
    the consumer groups whose id starts with ``name`` (``resource`` "group")."""

    component: str
    name: str
    role: str
    operation: str
    resource: str = "topic"

    @property
    def why(self) -> str:
        return _WHY[self.operation if self.resource == "topic" else f"group {self.operation}"]

    def __str__(self) -> str:
        if self.resource == "group":
            return f"{self.operation} on groups prefixed {self.name} ({self.why})"
        return f"{self.operation} on topic {self.name} ({self.role}: {self.why})"


def grants(component: str, topics: Mapping[str, str], check_topics: bool = True) -> list[Grant]:
    """The ACLs ``component`` needs on ``topics`` (name -> role), its start check's included
    unless ``check_topics`` is off. Roles the component does not use need nothing."""
    if component not in COMPONENTS:
        raise ConfigError(f"component: one of {', '.join(COMPONENTS)}, not {component!r}")
    out: list[Grant] = []
    for name, role in topics.items():
        if component == "admin":
            ops: tuple[str, ...] = _ADMIN_OPERATIONS
        else:
            ops = _TOPIC_OPERATIONS[component].get(role, ())
            if ops and check_topics:
                ops = (*ops, "DESCRIBE_CONFIGS")
        out.extend(Grant(component, name, role, op) for op in ops)
    if component in _GROUP_OPERATIONS:
        prefix, ops = _GROUP_OPERATIONS[component]
        out.extend(Grant(component, prefix, "group", op, "group") for op in ops)
    return out


def admin_grants(topics: Mapping[str, str], action: str) -> list[Grant]:
    """What ``connmon topics <action>`` needs on ``topics`` (name -> role) before it can
    describe them; CREATE shows only when a topic is created."""
    return [Grant("admin", n, r, op) for n, r in topics.items() for op in ADMIN_ACTIONS[action]]


def topics_of(component: str, names: Mapping[str, str]) -> dict[str, str]:
    """The topics (name -> role) ``component`` uses, from every role's name (role -> name)."""
    used = set(names) if component == "admin" else set(_TOPIC_OPERATIONS[component])
    return {name: role for role, name in names.items() if role in used}


def allowed(operation: str, have: Iterable[str]) -> bool:
    """Whether a principal allowed ``have`` may do ``operation``."""
    got = set(have)
    return operation in got or any(op in got for op in IMPLIED_BY.get(operation, ()))


def parse_principals(pairs: Mapping[str, str]) -> dict[str, str]:
    """Component -> principal, the defaults overridden by ``pairs``; names the bad setting."""
    out = dict(DEFAULT_PRINCIPALS)
    for component, principal in pairs.items():
        if component not in COMPONENTS:
            raise ConfigError(
                f"principal: {component!r} is not a component ({', '.join(COMPONENTS)})"
            )
        kind, _, name = principal.partition(":")
        if not kind or not name:
            raise ConfigError(f"principal: {principal!r} is not TYPE:NAME, e.g. User:connmon")
        out[component] = principal
    return out


def kafka_acls_commands(
    bindings: Iterable[tuple[str, Grant]], bootstrap: str, command_config: str | None = None
) -> list[str]:
    """``kafka-acls.sh --add`` command lines for (principal, grant) pairs: one per principal
    and resource, with every operation it needs there."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for principal, g in bindings:
        ops = grouped.setdefault((principal, g.resource, g.name), [])
        if g.operation not in ops:
            ops.append(g.operation)
    base = ["kafka-acls.sh", "--bootstrap-server", bootstrap]
    if command_config:
        base += ["--command-config", command_config]
    lines = []
    for (principal, resource, name), ops in grouped.items():
        argv = [*base, "--add", "--allow-principal", principal]
        for op in ops:
            argv += ["--operation", _CLI_NAMES[op]]
        argv += [f"--{resource}", name]
        if resource == "group":
            argv += ["--resource-pattern-type", "prefixed"]
        lines.append(shlex.join(argv))
    return lines
