"""The plan: what to create and which settings of existing topics differ, from the specs and
what describe returned; and the components' start check."""

from __future__ import annotations

import pytest

from streaming.topics.plan import Described, Problem, plan, same_value, start_problems
from streaming.topics.spec import DEFAULTS, build_specs, for_cluster

EVENTS, FINDINGS = DEFAULTS[0], DEFAULTS[2]


def as_described(spec, **changes) -> Described:
    configs = {**spec.configs, **changes.pop("configs", {})}
    return Described(
        partitions=changes.pop("partitions", spec.partitions),
        replication_factor=changes.pop("replication_factor", spec.replication_factor),
        configs={"compression.type": "producer", **configs},
    )


def test_an_empty_cluster_creates_everything_capped() -> None:
    p = plan(DEFAULTS, {}, brokers=1)
    assert [s.name for s in p.create] == [s.name for s in DEFAULTS]
    assert {(s.replication_factor, s.min_insync_replicas) for s in p.create} == {(1, 1)}
    assert p.problems == ()
    assert [str(m) for m in p.missing()][2] == (
        "connmon.findings: does not exist (run connmon topics create)"
    )


def test_topics_as_wanted_give_no_problem() -> None:
    described = {s.name: as_described(for_cluster(s, 3)) for s in DEFAULTS}
    p = plan(DEFAULTS, described, brokers=3)
    assert p.create == () and p.problems == () and p.alter() == {}


@pytest.mark.parametrize(
    ("spec", "changes", "lines", "alter"),
    [
        (
            FINDINGS,
            {"configs": {"cleanup.policy": "delete"}},
            ["connmon.findings: cleanup.policy is delete, must be compact"],
            {"connmon.findings": {"cleanup.policy": "compact"}},
        ),
        (EVENTS, {"partitions": 3}, ["connmon.events: partitions is 3, must be at least 12"], {}),
        (EVENTS, {"partitions": 24}, [], {}),  # more partitions than wanted: fine
        (
            EVENTS,
            {"replication_factor": 2},
            ["connmon.events: replication_factor is 2, must be at least 3"],
            {},
        ),
        (
            EVENTS,
            {"configs": {"retention.ms": "604800000", "min.insync.replicas": "1"}},
            [
                "connmon.events: retention.ms is 604800000, must be 86400000",
                "connmon.events: min.insync.replicas is 1, must be 2",
            ],
            {"connmon.events": {"retention.ms": "86400000", "min.insync.replicas": "2"}},
        ),
        (FINDINGS, {"configs": {"min.cleanable.dirty.ratio": "0.10"}}, [], {}),
    ],
)
def test_differences_of_an_existing_topic(spec, changes, lines, alter) -> None:
    p = plan([spec], {spec.name: as_described(spec, **changes)}, brokers=3)
    assert [str(x) for x in p.problems] == lines
    assert p.alter() == alter
    assert p.create == ()


def test_a_config_the_broker_does_not_report() -> None:
    have = Described(12, 3, {"cleanup.policy": "delete"})
    p = plan([EVENTS], {EVENTS.name: have}, brokers=3)
    assert "connmon.events: retention.ms is not set, must be 86400000" in map(str, p.problems)


def test_replication_is_compared_with_the_capped_value() -> None:
    have = as_described(for_cluster(EVENTS, 1))  # RF 1, min ISR 1 on a 1-broker cluster
    assert plan([EVENTS], {EVENTS.name: have}, brokers=1).problems == ()
    problems = plan([EVENTS], {EVENTS.name: have}, brokers=3).problems
    assert [p.setting for p in problems] == ["replication_factor", "min.insync.replicas"]


def test_overrides_change_the_plan() -> None:
    specs = build_specs({"topics": {"events": {"name": "team.events", "partitions": 3}}})
    events = specs[0]
    described = {"team.events": as_described(events)}
    p = plan(specs, described, brokers=3)
    assert "team.events" not in [s.name for s in p.create] and p.problems == ()
    assert "connmon.events" not in [s.name for s in p.create]


def test_same_value() -> None:
    assert same_value("cleanup.policy", "compact,delete", "delete,compact")
    assert not same_value("cleanup.policy", "compact", "compact,delete")
    assert same_value("retention.ms", "86400000", "86400000")
    assert not same_value("retention.ms", "86400000", None)
    assert not same_value("compression.type", "lz4", "producer")


@pytest.mark.parametrize(
    ("role", "policy", "line"),
    [
        ("findings", "delete", "connmon.x: cleanup.policy is delete, must be compact"),
        ("findings", "compact", None),
        ("findings", "compact,delete", None),
        ("events", "delete", None),
        ("events", "compact", "connmon.x: cleanup.policy is compact, must be delete"),
        ("events", "compact,delete", "connmon.x: cleanup.policy is compact,delete, must be delete"),
        ("partials", "compact", "connmon.x: cleanup.policy is compact, must be delete"),
    ],
)
def test_start_check_of_the_policy(role: str, policy: str, line: str | None) -> None:
    got = start_problems({"connmon.x": role}, {"connmon.x": {"cleanup.policy": policy}})
    assert [str(p) for p in got] == ([line] if line else [])


def test_start_check_of_missing_and_unchecked_topics() -> None:
    required = {"a": "aggregates", "b": "findings", "c": "job_status"}
    got = start_problems(required, {"a": None, "b": {"cleanup.policy": "compact"}})
    assert got == [Problem("a", "exists", None, "yes")]  # c could not be described: skipped
    assert str(got[0]) == "a: does not exist (run connmon topics create)"


def test_start_check_of_the_largest_record_a_topic_takes() -> None:
    required = {"p": "partials", "f": "findings", "e": "events"}
    configs = {
        "p": {"cleanup.policy": "delete", "max.message.bytes": "1048588"},  # the broker default
        "f": {"cleanup.policy": "compact", "max.message.bytes": "300"},
        "e": {"cleanup.policy": "delete", "max.message.bytes": "1048588"},
    }
    assert [str(p) for p in start_problems(required, configs)] == [
        "p: max.message.bytes is 1048588, must be at least 16777216",
        "f: max.message.bytes is 300, must be at least 65536",
    ]
