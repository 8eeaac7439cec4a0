"""The ACLs each component needs (docs/topics.md, "ACLs"), and ``connmon topics acls``."""

from __future__ import annotations

import shlex

import pytest

from streaming.cli import main
from streaming.errors import ConfigError
from streaming.topics import acls
from streaming.topics.spec import DEFAULT_NAMES

NAMES = dict(DEFAULT_NAMES)


def _ops(component: str, check_topics: bool = True) -> set[tuple[str, str, str]]:
    topics = acls.topics_of(component, NAMES)
    return {(g.resource, g.name, g.operation) for g in acls.grants(component, topics, check_topics)}


def _t(role: str, *ops: str) -> set[tuple[str, str, str]]:
    return {("topic", NAMES[role], op) for op in ops}


def test_the_agent_may_write_events_and_read_their_configs_only() -> None:
    assert _ops("agent") == _t("events", "WRITE", "DESCRIBE_CONFIGS")
    assert _ops("agent", check_topics=False) == _t("events", "WRITE")


def test_the_job_reads_events_and_partials_and_writes_its_outputs() -> None:
    want = _t("events", "READ", "DESCRIBE_CONFIGS") | _t(
        "partials", "READ", "WRITE", "DESCRIBE_CONFIGS"
    )
    for role in ("aggregates", "findings", "deadletter", "job_status"):
        want |= _t(role, "WRITE", "DESCRIBE_CONFIGS")
    assert _ops("job") == want


def test_the_exporter_reads_the_compacted_topics_and_describes_its_groups() -> None:
    want = {("group", "connmon-exporter-", "DESCRIBE")}
    for role in ("aggregates", "findings", "job_status"):
        want |= _t(role, "READ", "DESCRIBE_CONFIGS")
    assert _ops("exporter") == want
    assert _ops("exporter", check_topics=False) == want - {
        ("topic", NAMES[r], "DESCRIBE_CONFIGS") for r in ("aggregates", "findings", "job_status")
    }


def test_the_admin_creates_describes_and_alters_every_topic() -> None:
    want: set[tuple[str, str, str]] = set()
    for role in NAMES:
        want |= _t(role, "CREATE", "DESCRIBE", "ALTER_CONFIGS")
    assert _ops("admin") == want


def test_a_topic_the_component_does_not_use_needs_nothing() -> None:
    assert acls.grants("agent", {"connmon.findings": "findings"}) == []


def test_kafka_implications() -> None:
    assert acls.allowed("DESCRIBE", ["READ"])
    assert acls.allowed("DESCRIBE", ["WRITE"])
    assert acls.allowed("DESCRIBE_CONFIGS", ["ALTER_CONFIGS"])
    assert not acls.allowed("DESCRIBE", ["DESCRIBE_CONFIGS"])
    assert not acls.allowed("WRITE", ["READ", "DESCRIBE"])
    assert not acls.allowed("READ", [])


def test_principals_default_and_overrides() -> None:
    got = acls.parse_principals({"job": "User:spark"})
    assert got["job"] == "User:spark" and got["agent"] == "User:connmon-agent"
    with pytest.raises(ConfigError, match="'spark' is not a component"):
        acls.parse_principals({"spark": "User:x"})
    with pytest.raises(ConfigError, match="not TYPE:NAME"):
        acls.parse_principals({"job": "spark"})


def test_commands_group_operations_per_principal_and_resource() -> None:
    grants = acls.grants("exporter", {"agg": "aggregates"})
    lines = acls.kafka_acls_commands([("User:e", g) for g in grants], "k:9093", "admin.properties")
    argvs = [shlex.split(ln) for ln in lines]
    assert argvs == [
        ["kafka-acls.sh", "--bootstrap-server", "k:9093", "--command-config", "admin.properties",
         "--add", "--allow-principal", "User:e", "--operation", "Read",
         "--operation", "DescribeConfigs", "--topic", "agg"],
        ["kafka-acls.sh", "--bootstrap-server", "k:9093", "--command-config", "admin.properties",
         "--add", "--allow-principal", "User:e", "--operation", "Describe",
         "--group", "connmon-exporter-", "--resource-pattern-type", "prefixed"],
    ]  # fmt: skip


def test_topics_acls_prints_the_commands_for_the_configured_names(capsys) -> None:
    rc = main(
        [
            "topics",
            "acls",
            "--bootstrap-servers",
            "k:9093",
            "--component",
            "agent",
            "--principal",
            "agent=User:node-agent",
            "--set",
            "events.name=fleet.events",
        ]
    )
    assert rc == 0
    (line,) = capsys.readouterr().out.splitlines()
    argv = shlex.split(line)
    assert argv[argv.index("--allow-principal") + 1] == "User:node-agent"
    assert argv[argv.index("--topic") + 1] == "fleet.events"
    assert {argv[i + 1] for i, a in enumerate(argv) if a == "--operation"} == {
        "Write",
        "DescribeConfigs",
    }


def test_every_checked_role_has_grants() -> None:
    """The roles each component's start check names are the roles it holds ACLs on."""
    used = {
        "agent": {"events"},
        "job": {"events", "aggregates", "findings", "deadletter", "job_status", "partials"},
        "exporter": {"aggregates", "findings", "job_status"},
    }
    for component, roles in used.items():
        topics = {NAMES[r]: r for r in roles}
        have = {g.role for g in acls.grants(component, topics) if g.resource == "topic"}
        assert have == roles, component
