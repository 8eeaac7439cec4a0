"""``connmon topics create|check`` and the components' start check against a fake admin
client (the real broker: tests/integration/test_topics.py)."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from streaming.cli import main
from streaming.errors import ConfigError
from streaming.topics import admin
from streaming.topics.spec import DEFAULTS


def _done(value=None, error: int | None = None) -> Future:
    f: Future = Future()
    if error is None:
        f.set_result(value)
    else:
        f.set_exception(KafkaException(KafkaError(error)))
    return f


class FakeCluster:
    """Topics name -> (partitions, replicas, configs), the admin-client calls connmon makes."""

    def __init__(self, brokers: int = 1, down: bool = False) -> None:
        self.brokers = brokers
        self.down = down
        self.topics: dict[str, tuple[int, int, dict[str, str]]] = {}
        self.describe_calls = 0
        self.created: list[str] = []
        self.altered: dict[str, dict[str, str]] = {}
        # Operations the client may do per topic or group prefix; None: no authorizer.
        self.acls: dict[str, list[str]] | None = None

    def _allowed(self, name: str):
        if self.acls is None:
            return None
        ops = self.acls.get(name, [])
        return [SimpleNamespace(name=op) for op in ops] if ops else False

    def describe_topics(self, topics, include_authorized_operations: bool, request_timeout: float):
        out = {}
        for name in topics.topic_names:
            ops = self._allowed(name)
            if self.down:
                out[name] = _done(error=KafkaError._TIMED_OUT)
            elif ops is False:
                out[name] = _done(error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
            elif name not in self.topics:
                out[name] = _done(error=KafkaError.UNKNOWN_TOPIC_OR_PART)
            else:
                out[name] = _done(SimpleNamespace(authorized_operations=ops))
        return out

    def describe_consumer_groups(
        self, groups, include_authorized_operations: bool, request_timeout: float
    ):
        out = {}
        for group in groups:
            ops = self._allowed(next((p for p in self.acls or {} if group.startswith(p)), group))
            if ops is False:
                out[group] = _done(error=KafkaError.GROUP_AUTHORIZATION_FAILED)
            else:
                out[group] = _done(SimpleNamespace(authorized_operations=ops))
        return out

    def poll(self, timeout: float) -> int:
        return 0

    def list_topics(self, timeout: float):
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        topics = {
            name: SimpleNamespace(
                error=None,
                partitions={i: SimpleNamespace(replicas=list(range(rf))) for i in range(n)},
            )
            for name, (n, rf, _) in self.topics.items()
        }
        return SimpleNamespace(topics=topics, brokers=dict.fromkeys(range(self.brokers)))

    def describe_configs(self, resources, request_timeout: float):
        self.describe_calls += 1
        out = {}
        for r in resources:
            if self.down:
                out[r] = _done(error=KafkaError._TIMED_OUT)
            elif r.name not in self.topics:
                out[r] = _done(error=KafkaError.UNKNOWN_TOPIC_OR_PART)
            else:
                configs = {"compression.type": "producer", **self.topics[r.name][2]}
                out[r] = _done({k: SimpleNamespace(value=v) for k, v in configs.items()})
        return out

    def create_topics(self, new, operation_timeout: float, request_timeout: float):
        out = {}
        for t in new:
            if t.replication_factor > self.brokers:
                out[t.topic] = _done(error=KafkaError.INVALID_REPLICATION_FACTOR)
                continue
            self.topics[t.topic] = (t.num_partitions, t.replication_factor, dict(t.config))
            self.created.append(t.topic)
            out[t.topic] = _done()
        return out

    def incremental_alter_configs(self, resources, request_timeout: float):
        out = {}
        for r in resources:
            changes = {e.name: e.value for e in r.incremental_configs}
            self.altered[r.name] = changes
            self.topics[r.name][2].update(changes)
            out[r] = _done()
        return out


@pytest.fixture
def cluster(monkeypatch) -> FakeCluster:
    fake = FakeCluster()
    monkeypatch.setattr(admin, "admin_client", lambda conf, setting="kafka", refusals=None: fake)
    return fake


def test_check_lists_every_missing_topic_then_create_then_check_passes(cluster, capsys) -> None:
    assert main(["topics", "check"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{s.name}: does not exist (run connmon topics create)" for s in DEFAULTS]
    assert main(["topics", "create"]) == 0
    out = capsys.readouterr().out
    assert "created connmon.events: 12 partition(s), replication 1," in out
    assert cluster.topics["connmon.findings"][2]["cleanup.policy"] == "compact"
    assert cluster.topics["connmon.events"][2]["min.insync.replicas"] == "1"
    assert main(["topics", "check"]) == 0
    assert "6 topics as configured (1 broker(s))" in capsys.readouterr().out
    assert main(["topics", "create"]) == 0  # a second run changes nothing
    assert "exist: connmon.events, connmon.aggregates" in capsys.readouterr().out


def test_create_reports_a_wrong_policy_and_alter_fixes_it(cluster, capsys) -> None:
    assert main(["topics", "create"]) == 0
    cluster.topics["connmon.findings"][2]["cleanup.policy"] = "delete"
    cluster.topics["connmon.events"] = (3, 1, cluster.topics["connmon.events"][2])
    capsys.readouterr()
    assert main(["topics", "check"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "connmon.events: partitions is 3, must be at least 12",
        "connmon.findings: cleanup.policy is delete, must be compact",
    ]
    assert main(["topics", "create"]) == 1
    out = capsys.readouterr().out
    assert (
        "connmon.findings: cleanup.policy is delete, must be compact (not changed: run "
        "with --alter)" in out
    )
    assert cluster.altered == {}
    assert main(["topics", "create", "--alter", "--dry-run"]) == 1
    assert "connmon.findings: would set cleanup.policy=compact (was delete)" in (
        capsys.readouterr().out
    )
    assert cluster.altered == {}
    assert main(["topics", "create", "--alter"]) == 1  # partitions stay as they are
    out = capsys.readouterr().out
    assert "connmon.findings: set cleanup.policy=compact (was delete)" in out
    assert "connmon.events: partitions is 3, must be at least 12 (not changed: connmon never" in out
    assert cluster.altered == {"connmon.findings": {"cleanup.policy": "compact"}}
    assert cluster.topics["connmon.events"][0] == 3


def test_config_file_and_set(cluster, tmp_path, capsys) -> None:
    cfg = tmp_path / "topics.toml"
    cfg.write_text(
        'replication_factor = 1\n[topics.events]\nname = "team.events"\npartitions = 2\n'
        '[topics.events.configs]\n"retention.ms" = 3600000\n[kafka]\n"client.id" = "x"\n'
    )
    assert main(["topics", "create", "--config", str(cfg), "--set", "findings.partitions=1",
                 "--set", "job-status.segment.ms=60000"]) == 0  # fmt: skip
    assert cluster.topics["team.events"][:2] == (2, 1)
    assert cluster.topics["team.events"][2]["retention.ms"] == "3600000"
    assert cluster.topics["connmon.findings"][0] == 1
    assert cluster.topics["connmon.job-status"][2]["segment.ms"] == "60000"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--set", "events.partitions=0"], "topics.events.partitions"),
        (["--set", "findings.cleanup.policy=delete"], "topics.findings.configs.cleanup.policy"),
        (["--set", "nonsense"], "set: 'nonsense' is not KEY=VALUE"),
        (["--config", "/nonexistent.yaml"], "config: cannot read"),
        (["--timeout", "0"], "timeout"),
    ],
)
def test_a_bad_setting_exits_2_naming_it(cluster, capsys, argv, named) -> None:
    assert main(["topics", "check", *argv]) == 2
    assert named in capsys.readouterr().err


def test_an_unknown_file_section_fails(cluster, tmp_path, capsys) -> None:
    cfg = tmp_path / "t.yaml"
    cfg.write_text("topic: {}\n")
    assert main(["topics", "check", "--config", str(cfg)]) == 2
    assert "topic: unknown setting" in capsys.readouterr().err


def test_an_unreachable_cluster_exits_3(cluster, capsys) -> None:
    cluster.down = True
    assert main(["topics", "check"]) == 3
    assert "cannot describe topics at 127.0.0.1:9092" in capsys.readouterr().err


# ---- the components' start check ---------------------------------------------------------
REQUIRED = {"connmon.aggregates": "aggregates", "connmon.findings": "findings"}


def test_start_check_passes_with_one_describe_call(cluster) -> None:
    cluster.topics = {
        "connmon.aggregates": (1, 1, {"cleanup.policy": "compact"}),
        "connmon.findings": (1, 1, {"cleanup.policy": "compact,delete"}),
    }
    admin.check_at_start("exporter", {"bootstrap.servers": "x:1"}, REQUIRED)
    assert cluster.describe_calls == 1


def test_start_check_fails_naming_topic_and_setting(cluster) -> None:
    cluster.topics = {"connmon.findings": (1, 1, {"cleanup.policy": "delete"})}
    with pytest.raises(ConfigError) as exc:
        admin.check_at_start("exporter", {"bootstrap.servers": "x:1"}, REQUIRED)
    text = str(exc.value)
    assert "connmon.findings: cleanup.policy is delete, must be compact" in text
    assert "connmon.aggregates: does not exist (run connmon topics create)" in text
    assert "check_topics: false" in text


def test_start_check_warns_and_goes_on_when_the_cluster_is_down(cluster, caplog) -> None:
    cluster.down = True
    with caplog.at_level(logging.WARNING):
        admin.check_at_start("agent", {"bootstrap.servers": "x:1"}, {"connmon.events": "events"})
    assert "agent: could not check the topics connmon.events at start" in caplog.text


def test_start_check_warns_on_a_topic_it_may_not_describe(cluster, monkeypatch, caplog) -> None:
    real = cluster.describe_configs

    def denied(resources, request_timeout):
        out = real(resources, request_timeout)
        out[resources[0]] = _done(error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
        return out

    monkeypatch.setattr(cluster, "describe_configs", denied)
    cluster.topics = {"connmon.findings": (1, 1, {"cleanup.policy": "compact"})}
    with caplog.at_level(logging.WARNING):
        admin.check_at_start("exporter", {"bootstrap.servers": "x:1"}, REQUIRED)
    assert "could not check topic connmon.aggregates" in caplog.text
    assert "TOPIC_AUTHORIZATION_FAILED" in caplog.text


def test_a_topic_created_meanwhile_is_compared_not_failed(cluster, monkeypatch, capsys) -> None:
    real = cluster.create_topics

    def racing(new, operation_timeout, request_timeout):
        cluster.topics["connmon.findings"] = (3, 1, {"cleanup.policy": "delete"})
        out = real([t for t in new if t.topic != "connmon.findings"], 1, 1)
        out["connmon.findings"] = _done(error=KafkaError.TOPIC_ALREADY_EXISTS)
        return out

    monkeypatch.setattr(cluster, "create_topics", racing)
    assert main(["topics", "create"]) == 1
    out = capsys.readouterr().out
    assert "created connmon.findings" not in out and "not created" not in out
    assert "connmon.findings: cleanup.policy is delete, must be compact (not changed" in out


EVENTS = {"connmon.events": (12, 1, {"cleanup.policy": "delete"})}


def test_start_check_names_the_acl_the_principal_lacks(cluster) -> None:
    cluster.topics = dict(EVENTS)
    cluster.acls = {"connmon.events": ["DESCRIBE", "DESCRIBE_CONFIGS"]}
    conf = {"bootstrap.servers": "x:1", "sasl.username": "node-agent"}
    with pytest.raises(ConfigError) as exc:
        admin.check_at_start("agent", conf, {"connmon.events": "events"})
    text = str(exc.value)
    assert "agent: Kafka user node-agent lacks ACLs it needs" in text
    assert "WRITE on topic connmon.events" in text
    assert "DESCRIBE_CONFIGS on" not in text
    cluster.acls["connmon.events"] = ["WRITE", "DESCRIBE_CONFIGS"]
    admin.check_at_start("agent", conf, {"connmon.events": "events"})  # passes


def test_a_topic_it_may_not_see_lacks_only_what_would_show_it(cluster) -> None:
    """Refused even DESCRIBE: READ and WRITE are missing for sure; DESCRIBE_CONFIGS may be
    granted, and the broker does not say, so it is not named."""
    cluster.topics = dict(EVENTS)
    cluster.acls = {"connmon.events": []}
    with pytest.raises(ConfigError) as exc:
        admin.check_at_start("job", {"bootstrap.servers": "x:1"}, {"connmon.events": "events"})
    lines = [ln.strip() for ln in str(exc.value).splitlines()[1:]]
    assert lines == ["READ on topic connmon.events (events: read its records)"]


def test_the_exporter_needs_describe_on_its_groups(cluster) -> None:
    cluster.topics = {n: (3, 1, {"cleanup.policy": "compact"}) for n in REQUIRED}
    cluster.acls = {n: ["READ", "DESCRIBE_CONFIGS"] for n in REQUIRED}
    with pytest.raises(ConfigError, match="DESCRIBE on groups prefixed connmon-exporter-"):
        admin.check_at_start("exporter", {"bootstrap.servers": "x:1"}, REQUIRED)
    cluster.acls["connmon-exporter-"] = ["DESCRIBE"]
    admin.check_at_start("exporter", {"bootstrap.servers": "x:1"}, REQUIRED)


def test_topics_check_says_which_acl_hides_a_topic(cluster, capsys) -> None:
    assert main(["topics", "create"]) == 0
    cluster.acls = {n: ["DESCRIBE", "DESCRIBE_CONFIGS"] for n in cluster.topics}
    cluster.acls["connmon.findings"] = ["DESCRIBE_CONFIGS"]
    capsys.readouterr()
    assert main(["topics", "check"]) == 3
    assert capsys.readouterr().out.splitlines() == [
        "lacks ACL DESCRIBE on topic connmon.findings (findings: see the topic in metadata)"
    ]
