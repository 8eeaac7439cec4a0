"""The start check's setting (``check_topics``) in the agent, the job and the exporter, and
which topics each checks with which role."""

from __future__ import annotations

import pytest

from streaming.agent import cli as agent_cli
from streaming.agent import config as agent_config
from streaming.cli import main
from streaming.errors import ConfigError
from streaming.exporter import cli as exporter_cli
from streaming.exporter import config as exporter_config
from streaming.job import cli as job_cli
from streaming.job.settings import from_sources
from streaming.topics import admin

CLUSTER = {"clusters": [{"name": "c", "bootstrap_servers": "k:9092"}]}


@pytest.fixture
def calls(monkeypatch) -> list[tuple]:
    seen: list[tuple] = []
    monkeypatch.setattr(
        admin,
        "check_at_start",
        lambda component, conf, required, timeout_s=10.0, skip_hint="", setting="": seen.append(
            (component, conf["bootstrap.servers"], dict(required), timeout_s)
        ),
    )
    return seen


def test_agent_setting_from_file_env_and_flag() -> None:
    assert agent_config.build(CLUSTER, env={}).check_topics is True
    assert agent_config.build({**CLUSTER, "check_topics": False}, env={}).check_topics is False
    env = agent_config.from_env({"CONNMON_AGENT_CHECK_TOPICS": "false"})
    assert agent_config.build(CLUSTER, env).check_topics is False
    assert agent_config.build(CLUSTER, env, {"check_topics": True}).check_topics is True
    with pytest.raises(ConfigError, match="check_topics: 'maybe' is not a valid boolean"):
        agent_config.build({**CLUSTER, "check_topics": "maybe"}, env={})


def test_agent_checks_its_events_topic(calls) -> None:
    cfg = agent_config.build(
        {**CLUSTER, "kafka": {"bootstrap.servers": "home:9092"}, "events_topic": "e"}, env={}
    )
    agent_cli.check_events_topic(cfg)
    assert calls == [("agent", "home:9092", {"e": "events"}, cfg.metadata_timeout_s)]


def test_job_setting_and_its_six_topics(calls) -> None:
    assert from_sources({}).check_topics is True
    assert from_sources({"job": {"check_topics": False}}).check_topics is False
    assert from_sources({}, {"check_topics": "false"}).check_topics is False
    with pytest.raises(ConfigError, match="check-topics"):
        from_sources({"job": {"check_topics": "sometimes"}})
    job_cli.check_topics(from_sources({"job": {"partials_topic": "p"}}))
    ((component, bootstrap, required, _),) = calls
    assert (component, bootstrap) == ("job", "127.0.0.1:9092")
    assert required == {
        "connmon.events": "events",
        "connmon.aggregates": "aggregates",
        "connmon.findings": "findings",
        "connmon.deadletter": "deadletter",
        "connmon.job-status": "job_status",
        "p": "partials",
    }


def test_exporter_checks_the_topics_it_reads(calls) -> None:
    conf = exporter_config.build("k:1", findings_topic="f")
    assert conf.check_topics is True
    exporter_cli.check_topics(conf)
    assert calls == [
        ("exporter", "k:1",
         {"connmon.aggregates": "aggregates", "f": "findings", "connmon.job-status": "job_status"},
         10.0)
    ]  # fmt: skip


def test_exporter_start_fails_with_exit_2_on_a_wrong_topic(monkeypatch, capsys) -> None:
    def wrong(component, conf, required, timeout_s=10.0, skip_hint="", setting=""):
        raise ConfigError("topics not as exporter needs them:\n  f: cleanup.policy is delete, "
                          "must be compact")  # fmt: skip

    monkeypatch.setattr(admin, "check_at_start", wrong)
    assert main(["exporter", "--bootstrap-servers", "k:1", "--listen", "127.0.0.1:1"]) == 2
    assert "f: cleanup.policy is delete, must be compact" in capsys.readouterr().err


def test_no_check_topics_skips_the_check(monkeypatch) -> None:
    def never(*_a, **_k):
        raise AssertionError("checked")

    monkeypatch.setattr(admin, "check_at_start", never)
    parser_args = ["exporter", "--bootstrap-servers", "k:1", "--no-check-topics"]
    from streaming.cli import build_parser

    args = build_parser().parse_args(parser_args)
    assert args.check_topics is False
    args = build_parser().parse_args(["job", "--no-check-topics"])
    assert job_cli.settings_from_args(args).check_topics is False
    args = build_parser().parse_args(["agent", "--no-check-topics"])
    assert agent_cli._flags(args)["check_topics"] is False


def test_job_kafka_and_producer_settings_from_the_environment(monkeypatch) -> None:
    from streaming.cli import build_parser

    monkeypatch.setenv("CONNMON_JOB_KAFKA_SASL_JAAS_CONFIG", "jaas-from-secret")
    monkeypatch.setenv("CONNMON_JOB_PRODUCER_SASL_PASSWORD", "pw-from-secret")
    monkeypatch.setenv("CONNMON_JOB_PRODUCER_SASL_USERNAME", "env-user")
    args = build_parser().parse_args(["job", "--producer-option", "sasl.username=flag-user"])
    s = job_cli.settings_from_args(args)
    assert s.kafka == {"sasl.jaas.config": "jaas-from-secret"}
    assert s.producer == {"sasl.password": "pw-from-secret", "sasl.username": "flag-user"}
