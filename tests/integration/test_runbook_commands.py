"""Every command docs/runbook.md gives as a remedy (a fenced ``connmon ...`` line) does what the
runbook says, run as written against a real KRaft broker (only the broker's address is the
test's). A new command in the runbook fails ``test_every_runbook_command_is_covered`` until a
test here runs it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.job.cli import settings_from_args
from streaming.topics import admin

pytestmark = pytest.mark.integration

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
CLI = [sys.executable, "-c", "import sys; from streaming.cli import main; sys.exit(main())"]


def runbook_commands() -> list[str]:
    """The ``connmon`` lines of the runbook's fenced code blocks."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", RUNBOOK.read_text(), re.M | re.S)
    lines = [ln.strip() for b in blocks for ln in b.splitlines()]
    return [ln for ln in lines if ln.startswith("connmon ")]


def _command(prefix: str) -> list[str]:
    found = [c for c in runbook_commands() if c.startswith(prefix)]
    assert len(found) == 1, f"the runbook gives {len(found)} commands starting {prefix!r}"
    return shlex.split(found[0])[1:]


COVERED = ("connmon topics create", "connmon job")


def test_every_runbook_command_is_covered() -> None:
    commands = runbook_commands()
    assert commands, "no fenced connmon command found in the runbook"
    assert [c for c in commands if not c.startswith(COVERED)] == []


def test_raising_the_partials_retention_changes_the_existing_topic(kafka_cluster_factory) -> None:
    cluster = kafka_cluster_factory()
    argv = _command("connmon topics create")
    argv[argv.index("--bootstrap-servers") + 1] = cluster.bootstrap_servers
    want = next(a.split("=", 1)[1] for a in argv if a.startswith("partials.retention.ms="))

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)

    without = [a for a in argv if a != "--alter"]
    made = run(["topics", "create", "--bootstrap-servers", cluster.bootstrap_servers])
    assert made.returncode == 0, made.stdout + made.stderr  # the topics as documented
    client = admin.admin_client({"bootstrap.servers": cluster.bootstrap_servers})

    def retention() -> str | None:
        found, failed = admin.describe_configs(client, ["connmon.partials"], 30.0)
        assert not failed, failed
        return (found["connmon.partials"] or {}).get("retention.ms")

    assert retention() != want
    again = run(without)  # without --alter an existing topic is left as it was, and said so
    assert again.returncode == 1 and retention() != want, again.stdout + again.stderr
    done = run(argv)  # the runbook's command, as written
    assert done.returncode == 0, done.stdout + done.stderr
    assert retention() == want


def test_the_lagging_jobs_remedy_moves_to_a_new_checkpoint_with_the_new_partitions(
    tmp_path,
) -> None:
    """The command's settings: a new checkpoint, the old one to migrate from, the new state
    partitions (the migration itself runs for real in test_job_migrate.py, to 8 partitions)."""
    from streaming.cli import build_parser

    argv = _command("connmon job")
    config = tmp_path / "job.yaml"
    config.write_text("job: {bootstrap_servers: 127.0.0.1:9092}\n")
    argv[argv.index("--config") + 1] = str(config)
    s = settings_from_args(build_parser().parse_args(argv))
    assert s.migrate_from and s.checkpoint and s.migrate_from != s.checkpoint
    assert s.shuffle_partitions == 8
