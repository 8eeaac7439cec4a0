"""``connmon topics`` and the components' start check against a real broker that never
auto-creates topics (``auto.create.topics.enable=false``): nothing works unless connmon
creates its topics itself."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from streaming.cli import main
from streaming.errors import ConfigError
from streaming.stack.ports import free_port
from streaming.topics import admin
from streaming.topics.spec import DEFAULTS, ROLES

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from streaming.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    """One broker for the module (as ``kafka_cluster_factory`` starts it, but shared by the
    tests here: each uses its own topic names)."""
    from streaming.stack.kafka import KafkaCluster

    c = KafkaCluster(
        brokers=1, overrides={"auto.create.topics.enable": "false"}, name="connmon-test"
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def names_for(prefix: str) -> dict[str, str]:
    return {s.role: f"{prefix}.{s.name.removeprefix('connmon.')}" for s in DEFAULTS}


def config_file(tmp_path: Path, bootstrap: str, names: dict[str, str]) -> Path:
    path = tmp_path / "topics.yaml"
    data = {
        "bootstrap_servers": bootstrap,
        "topics": {role: {"name": names[role]} for role in ROLES},
        "kafka": {"client.id": "connmon-topics-test"},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def described(bootstrap: str, names: list[str]) -> dict[str, dict]:
    """Partitions, replicas and configs of each topic, read back from the broker."""
    client = admin.admin_client({"bootstrap.servers": bootstrap})
    _, out = admin.describe(client, names, 30)
    return {n: d for n, d in out.items()}


def test_check_fails_then_create_makes_every_topic_as_documented(
    cluster, unique_name, tmp_path, capsys
) -> None:
    names = names_for(unique_name)
    cfg = str(config_file(tmp_path, cluster.bootstrap_servers, names))
    assert main(["topics", "check", "--config", cfg]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{names[r]}: does not exist (run connmon topics create)" for r in ROLES]

    assert main(["topics", "create", "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert all(f"created {n}:" in out for n in names.values())
    got = described(cluster.bootstrap_servers, list(names.values()))
    for spec in DEFAULTS:
        d = got[names[spec.role]]
        assert d is not None, spec.role
        assert (d.partitions, d.replication_factor) == (spec.partitions, 1)  # 1 broker: RF 1
        assert d.configs["min.insync.replicas"] == "1"
        assert d.configs["cleanup.policy"] == spec.policy
        for key in ("retention.ms", "segment.ms", "min.cleanable.dirty.ratio"):
            if key in spec.configs:
                assert float(d.configs[key]) == float(spec.configs[key]), (spec.role, key)
    assert got[names["events"]].configs["retention.ms"] == "86400000"
    assert got[names["findings"]].configs["cleanup.policy"] == "compact"

    assert main(["topics", "check", "--config", cfg]) == 0
    assert "6 topics as configured (1 broker(s))" in capsys.readouterr().out
    assert main(["topics", "create", "--config", cfg]) == 0  # idempotent
    assert "created" not in capsys.readouterr().out


def test_a_wrong_policy_fails_check_and_the_components_start(
    cluster, unique_name, tmp_path, capsys
) -> None:
    from streaming.stack.kafka import create_topics

    bootstrap = cluster.bootstrap_servers
    names = names_for(unique_name)
    create_topics(bootstrap, {names["findings"]: 3})  # the broker's default: delete
    deadline = time.monotonic() + 30  # the broker lists a new topic a moment later
    while described(bootstrap, [names["findings"]])[names["findings"]] is None:
        assert time.monotonic() < deadline, "the pre-created topic never showed up"
        time.sleep(0.2)
    cfg = str(config_file(tmp_path, bootstrap, names))
    status = main(["topics", "create", "--config", cfg])  # the others are created
    out = capsys.readouterr().out
    assert status == 1, out
    wrong = f"{names['findings']}: cleanup.policy is delete, must be compact"
    assert f"{wrong} (not changed: run with --alter)" in out
    assert main(["topics", "check", "--config", cfg]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert wrong in lines and all(names["findings"] in line for line in lines)

    # The exporter, as its own process: exit 2, naming the topic and the setting.
    exporter = subprocess.run(
        [*CLI, "exporter", "--bootstrap-servers", bootstrap,
         "--listen", f"127.0.0.1:{free_port()}",
         "--aggregates-topic", names["aggregates"], "--findings-topic", names["findings"],
         "--status-topic", names["job_status"]],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert exporter.returncode == 2, exporter.stderr[-2000:]
    assert wrong in exporter.stderr
    # The job stops before Spark starts; the agent on a missing events topic likewise.
    job_args = ["job", "--bootstrap-servers", bootstrap]
    for role in ROLES:
        flag = "status" if role == "job_status" else role
        job_args += [f"--{flag}-topic", names[role]]
    assert main(job_args) == 2
    assert wrong in capsys.readouterr().err
    agent_args = ["agent", "--bootstrap-servers", bootstrap, "--cluster-bootstrap", bootstrap,
                  "--topic", f"{unique_name}.nothing", "--once"]  # fmt: skip
    assert main(agent_args) == 2
    assert f"{unique_name}.nothing: does not exist (run connmon topics create)" in (
        capsys.readouterr().err
    )
    assert main(["topics", "create", "--config", cfg, "--alter"]) == 0
    assert f"{names['findings']}: set cleanup.policy=compact (was delete)" in (
        capsys.readouterr().out
    )
    assert main(["topics", "check", "--config", cfg]) == 0
    admin.check_at_start(
        "exporter",
        {"bootstrap.servers": bootstrap},
        {names[r]: r for r in ("aggregates", "findings", "job_status")},
    )


def test_a_topic_too_small_for_the_jobs_records_stops_the_job_at_start(
    cluster, unique_name, tmp_path, capsys
) -> None:
    """The job's writers fail a batch on a record its topic refuses: a topic that takes less
    than the job writes is a configuration error, named at start."""
    from streaming.stack.kafka import create_topics

    bootstrap = cluster.bootstrap_servers
    names = names_for(unique_name)
    assert main(["topics", "create", "--config", str(config_file(tmp_path, bootstrap, names))]) == 0
    small = f"{unique_name}.small-findings"
    create_topics(
        bootstrap, {small: 1}, config={"cleanup.policy": "compact", "max.message.bytes": "300"}
    )
    deadline = time.monotonic() + 30
    while described(bootstrap, [small])[small] is None:
        assert time.monotonic() < deadline, "the topic never showed up"
        time.sleep(0.2)
    capsys.readouterr()
    job_args = ["job", "--bootstrap-servers", bootstrap]
    for role in ROLES:
        flag = "status" if role == "job_status" else role
        job_args += [f"--{flag}-topic", small if role == "findings" else names[role]]
    assert main(job_args) == 2
    assert f"{small}: max.message.bytes is 300, must be at least 65536" in capsys.readouterr().err


def test_an_unreachable_cluster_at_start_is_a_warning(caplog) -> None:
    down = f"127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING):
        admin.check_at_start("agent", {"bootstrap.servers": down}, {"x": "events"}, timeout_s=2)
    assert "agent: could not check the topics x at start" in caplog.text
    with pytest.raises(ConfigError, match="bootstrap-servers"):
        admin.check_at_start("agent", {"bootstrap.servers": ""}, {"x": "events"})
