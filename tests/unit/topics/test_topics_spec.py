"""Topic specs: the defaults of docs/topics.md, the settings that change them, their checks,
and the capping to a small cluster."""

from __future__ import annotations

import pytest

from streaming.errors import ConfigError
from streaming.topics.spec import (
    DEFAULTS,
    POLICY,
    ROLES,
    build_specs,
    for_cluster,
    overrides_to_settings,
)

DAY_MS = 86_400_000


def by_role(specs):
    return {s.role: s for s in specs}


def test_defaults_follow_docs_topics() -> None:
    d = by_role(DEFAULTS)
    assert tuple(d) == ROLES
    assert {r: s.name for r, s in d.items()} == {
        "events": "connmon.events",
        "aggregates": "connmon.aggregates",
        "findings": "connmon.findings",
        "deadletter": "connmon.deadletter",
        "job_status": "connmon.job-status",
        "partials": "connmon.partials",
    }
    assert {r: s.policy for r, s in d.items()} == POLICY
    assert d["events"].configs["retention.ms"] == str(DAY_MS)
    assert d["deadletter"].configs["retention.ms"] == str(7 * DAY_MS)
    assert int(d["partials"].configs["retention.ms"]) <= DAY_MS / 2
    for s in DEFAULTS:
        assert (s.replication_factor, s.min_insync_replicas) == (3, 2)
        if s.policy == "compact":
            assert "retention.ms" not in s.configs and s.configs["segment.ms"] == "3600000"
    assert d["events"].partitions == d["partials"].partitions == 12
    assert d["job_status"].partitions == 1


@pytest.mark.parametrize(
    ("brokers", "rf", "isr"),
    [(1, 1, 1), (2, 2, 1), (3, 3, 2), (5, 3, 2)],
)
def test_replication_is_capped_to_the_cluster(brokers: int, rf: int, isr: int) -> None:
    s = for_cluster(DEFAULTS[0], brokers)
    assert (s.replication_factor, s.min_insync_replicas) == (rf, isr)
    assert s.configs["retention.ms"] == DEFAULTS[0].configs["retention.ms"]


def test_an_explicit_min_isr_is_kept_when_the_cluster_is_big_enough() -> None:
    (events, *_) = build_specs(
        {"topics": {"events": {"replication_factor": 5, "configs": {"min.insync.replicas": 4}}}}
    )
    assert (events.replication_factor, events.min_insync_replicas) == (5, 4)
    capped = for_cluster(events, 5)
    assert capped is events
    capped = for_cluster(events, 4)  # capped RF: one broker may still be down
    assert (capped.replication_factor, capped.min_insync_replicas) == (4, 3)


def test_file_then_set_overrides() -> None:
    file = {
        "replication_factor": 2,
        "min_insync_replicas": 1,
        "topics": {
            "events": {
                "name": "team.events",
                "partitions": 24,
                "configs": {"retention.ms": 3_600_000},
            },
            "job-status": {"configs": {"segment.ms": "600000"}},
        },
    }
    cli = overrides_to_settings(
        {
            "events.partitions": "48",
            "findings.retention.ms": "86400000",
            "deadletter.replication_factor": "1",
            "findings.name": "team.findings",
        }
    )
    d = by_role(build_specs(file, cli))
    assert (d["events"].name, d["events"].partitions) == ("team.events", 48)
    assert d["events"].configs["retention.ms"] == "3600000"
    assert d["job_status"].configs["segment.ms"] == "600000"
    assert d["findings"].name == "team.findings"
    assert d["findings"].configs["retention.ms"] == "86400000"
    assert d["findings"].configs["cleanup.policy"] == "compact"
    assert d["deadletter"].replication_factor == 1
    assert d["aggregates"].replication_factor == 2
    assert {s.min_insync_replicas for s in d.values()} == {1}


def test_set_pairs_take_the_file_shape() -> None:
    assert overrides_to_settings(
        {"replication_factor": "2", "events.retention.ms": "1", "events.name": "x"}
    ) == {
        "replication_factor": "2",
        "topics": {"events": {"configs": {"retention.ms": "1"}, "name": "x"}},
    }


@pytest.mark.parametrize(
    ("layer", "named"),
    [
        ({"topics": {"events": {"partitions": 0}}}, "topics.events.partitions"),
        ({"topics": {"events": {"partitions": "many"}}}, "topics.events.partitions"),
        ({"topics": {"events": {"partitions": True}}}, "topics.events.partitions"),
        (
            {"topics": {"findings": {"replication_factor": -1}}},
            "topics.findings.replication_factor",
        ),
        ({"topics": {"findings": {"name": "bad name"}}}, "topics.findings.name"),
        (
            {"topics": {"findings": {"configs": {"cleanup.policy": "delete"}}}},
            "topics.findings.configs.cleanup.policy",
        ),
        (
            {"topics": {"events": {"configs": {"cleanup.policy": "compact"}}}},
            "topics.events.configs.cleanup.policy",
        ),
        (
            {"topics": {"events": {"configs": {"cleanup.policy": "compress"}}}},
            "topics.events.configs.cleanup.policy",
        ),
        (
            {"topics": {"events": {"configs": {"retention.ms": "1d"}}}},
            "topics.events.configs.retention.ms",
        ),
        (
            {"topics": {"events": {"configs": {"segment.bytes": "-5"}}}},
            "topics.events.configs.segment.bytes",
        ),
        (
            {"topics": {"aggregates": {"configs": {"min.cleanable.dirty.ratio": "2"}}}},
            "topics.aggregates.configs.min.cleanable.dirty.ratio",
        ),
        (
            {"topics": {"events": {"configs": {"min.insync.replicas": 4}}}},
            "topics.events.configs.min.insync.replicas",
        ),
        ({"topics": {"events": {"configs": {"Retention": "1"}}}}, "topics.events.configs"),
        ({"topics": {"events": {"configs": ["retention.ms"]}}}, "topics.events.configs"),
        ({"topics": {"events": {"partition": 3}}}, "topics.events.partition"),
        ({"topics": {"event": {}}}, "topics.event"),
        ({"topics": ["events"]}, "topics"),
        ({"topics": {"events": 3}}, "topics.events"),
        ({"replication_factor": "x"}, "replication_factor"),
        ({"min_insync_replicas": 0}, "min_insync_replicas"),
        ({"replication_factor": 1, "min_insync_replicas": 2}, "min.insync.replicas"),
        ({"topics": {"findings": {"name": "connmon.events"}}}, "name"),
    ],
)
def test_a_bad_setting_fails_with_its_name(layer: dict, named: str) -> None:
    with pytest.raises(ConfigError) as exc:
        build_specs(layer)
    assert named in str(exc.value)


def test_a_malformed_set_pair_fails() -> None:
    with pytest.raises(ConfigError, match="set: 'partitions'"):
        overrides_to_settings({"partitions": "3"})


def test_compact_and_delete_is_allowed_for_a_compacted_role() -> None:
    d = by_role(
        build_specs(
            {
                "topics": {
                    "findings": {
                        "configs": {
                            "cleanup.policy": "delete, compact",
                            "retention.ms": 30 * DAY_MS,
                        }
                    }
                }
            }
        )
    )
    assert d["findings"].policy == "compact,delete"


@pytest.mark.parametrize(("rf", "isr"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_the_default_min_isr_follows_a_configured_replication_factor(rf: int, isr: int) -> None:
    specs = build_specs({"replication_factor": rf})
    assert {(s.replication_factor, s.min_insync_replicas) for s in specs} == {(rf, isr)}
