"""Every command docs/runbook.md gives does what the runbook says, run as written against a real
KRaft broker (and, for ``connmon job``, real Spark); only the runbook's placeholders (the
broker's address, the config file, the checkpoint folders) are replaced by the test's own.

Which text counts as a command (``runbook_commands``):

- every line of a fenced code block marked ``sh``, ``shell``, ``bash``, ``console`` or nothing
  (``\\`` continues a line; ``#`` comment lines are skipped);
- every inline code span (single backticks, possibly wrapped over two lines) whose first word
  is ``connmon`` followed by one of the CLI's commands (``connmon topics check``; a log line such
  as ``connmon job: stopped on SIGTERM`` is not one), a program of ``PROGRAMS``, or any
  lowercase program name followed by an option (``-x``/``--x``).

Each command is either run by a test here (``RUN``, with the test that runs it) or listed in
``NOT_RUN`` with the reason; ``test_every_runbook_command_is_run_or_excused`` fails for a command
in neither (someone has to decide) and for an entry the runbook no longer gives. One KRaft
cluster serves every test of the module.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from job_helpers import (
    CONNMON,
    TRIGGER,
    Topics,
    _kill_group,
    consume_all,
    lines,
    produce,
    recording,
)

from streaming.cli import build_parser
from streaming.job.checkpoint import STATE_QUERY, recorded_shuffle_partitions
from streaming.stack.kafka import KafkaCluster
from streaming.topics import admin

pytestmark = pytest.mark.integration

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"

# The runbook's placeholders, replaced by the test's own values.
BROKER = "kafka-1:9092"
JOB_CONFIG = "job.yaml"
OLD_CHECKPOINT = "/var/lib/connmon/ckpt"
NEW_CHECKPOINT = "/var/lib/connmon/ckpt-2"

# Programs whose inline mentions are commands even without an option.
PROGRAMS = ("ss", "jstack", "systemctl", "kubectl", "timedatectl", "chronyc", "ntpq")
_SHELL_FENCES = ("", "sh", "shell", "bash", "console")

# ---- the commands ---------------------------------------------------------------------------
ALTER = (
    "connmon topics create --bootstrap-servers kafka-1:9092 --alter "
    "--set partials.retention.ms=43200000"
)
CHECK_SET = (
    "connmon topics check --bootstrap-servers kafka-1:9092 --set partials.retention.ms=43200000"
)
CHECK = "connmon topics check --bootstrap-servers kafka-1:9092"
MIGRATE = (
    "connmon job --config job.yaml --checkpoint /var/lib/connmon/ckpt-2 "
    "--migrate-from /var/lib/connmon/ckpt --shuffle-partitions 8"
)

# Commands the runbook names in its prose without the broker's address: run with the test
# broker's ``--bootstrap-servers`` added.
CREATE = "connmon topics create"
CHECK_PLAIN = "connmon topics check"
CREATE_ALTER = "connmon topics create --alter"

# Each command the runbook gives -> the test that runs it.
_ALTER_TEST = "test_alter_raises_the_retention_of_the_existing_partials_topic"
RUN = {
    ALTER: _ALTER_TEST,
    CHECK_SET: _ALTER_TEST,
    CREATE: _ALTER_TEST,
    CHECK_PLAIN: _ALTER_TEST,
    CREATE_ALTER: _ALTER_TEST,
    CHECK: "test_check_names_a_retention_that_is_not_the_configured_one",
    MIGRATE: "test_the_lagging_jobs_remedy_moves_to_a_new_checkpoint_with_8_partitions",
}
_ON_HOST = "reads the alert's host (its sockets, processes or clock); run there, not here"
_KAFKA_TOOLS = "a Kafka distribution's script; the test stack runs the broker from its jars only"
# Each command the runbook gives that no test here runs -> why.
NOT_RUN = {
    "ss -tnpo state <state> dst <broker>": _ON_HOST,
    "ss -tnpo src :<listener port>": _ON_HOST,
    "ss -tnpo state close-wait dst <broker>": _ON_HOST,
    "ss -tnpi dst <broker>": _ON_HOST,
    "ls /proc/<pid>/fd | wc -l": _ON_HOST,
    "prlimit --pid <pid> --nofile=<soft>:<hard>": (
        _ON_HOST + " (and it changes a live process's limit)"
    ),
    "jstack": _ON_HOST,
    "timedatectl": _ON_HOST,
    "chronyc tracking": _ON_HOST,
    "ntpq -p": _ON_HOST,
    "chronyc makestep": _ON_HOST + " (and it steps the clock)",
    "systemctl status connmon-agent": _ON_HOST + " (a systemd unit)",
    "kubectl -n connmon get pods -l app.kubernetes.io/name=connmon-exporter": (
        "needs a Kubernetes cluster with connmon deployed"
    ),
    "kafka-broker-api-versions --bootstrap-server <broker>": _KAFKA_TOOLS,
    "connmon topics": "the command group's name in prose, not a command line",
    "connmon job": (
        "the command's name in prose (how it stops); its stop on SIGTERM is run in "
        "test_clean_stop.py, and here after each run of the job"
    ),
    "kafka-get-offsets --bootstrap-server <broker> --topic connmon.events": _KAFKA_TOOLS,
    "kafka-console-consumer --bootstrap-server <broker> --topic connmon.deadletter "
    "--from-beginning --max-messages 10": _KAFKA_TOOLS,
}


def _subcommands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001
    return set(sub.choices)


def _is_command(span: str, subcommands: set[str]) -> bool:
    words = span.split()
    first = words[0]
    if first == "connmon":
        return len(words) > 1 and words[1] in subcommands
    if first in PROGRAMS:
        return True
    named = re.fullmatch(r"[a-z][a-z0-9_-]*", first) is not None
    return named and any(re.match(r"--?[A-Za-z]", w) for w in words[1:])


def runbook_commands(text: str) -> list[str]:
    """The commands of the runbook's text, as the module's docstring defines them, each with
    its whitespace normalised."""
    found: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    pending = ""
    for line in text.splitlines():
        opened = re.match(r"^\s*```\s*(\S*)", line)
        if opened and fence is None:
            fence = opened.group(1)
            continue
        if opened:
            fence = None
            continue
        if fence is None:
            prose.append(line)
        elif fence in _SHELL_FENCES:
            pending += line.rstrip().removesuffix("\\")
            if line.rstrip().endswith("\\"):
                continue
            cmd, pending = " ".join(pending.split()), ""
            if cmd and not cmd.startswith("#"):
                found.append(cmd)
    subcommands = _subcommands()
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", "\n".join(prose)):
        cmd = " ".join(span.split())
        if cmd and _is_command(cmd, subcommands):
            found.append(cmd)
    return list(dict.fromkeys(found))


def as_run(command: str, values: dict[str, str]) -> list[str]:
    """``command``'s words with each placeholder word replaced; every placeholder given must
    be in the command, so a changed command cannot slip by unreplaced."""
    words = shlex.split(command)
    missing = [p for p in values if p not in words]
    assert not missing, f"{command!r} lost its placeholders {missing}"
    words = [values.get(w, w) for w in words]
    assert words[0] == "connmon"
    return [CONNMON, *words[1:]]


def test_every_runbook_command_is_run_or_excused() -> None:
    commands = runbook_commands(RUNBOOK.read_text())
    assert commands, "no command found in the runbook"
    undecided = [c for c in commands if c not in RUN and c not in NOT_RUN]
    assert undecided == [], "run these in a test here, or list them in NOT_RUN with the reason"
    stale = [c for c in [*RUN, *NOT_RUN] if c not in commands]
    assert stale == [], "the runbook no longer gives these commands"
    assert set(RUN) & set(NOT_RUN) == set()


def test_the_collector_finds_each_form_and_only_commands() -> None:
    text = "\n".join(
        [
            "Run `connmon topics check\n--bootstrap-servers b:9092` and `ss -tn` or `jstack`;",
            "the log says `connmon job: stopped on SIGTERM`; set `connections.max.idle.ms=-1`;",
            "`sum by (app) (connmon_sockets)`; `--skip-offsets 0:1-2`.",
            "```sh",
            "connmon topics create \\",
            "  --alter",
            "# a comment",
            "```",
            "```yaml",
            "job: {trigger: 1s}",
            "```",
        ]
    )
    assert runbook_commands(text) == [
        "connmon topics create --alter",
        "connmon topics check --bootstrap-servers b:9092",
        "ss -tn",
        "jstack",
    ]


# ---- one cluster for the module ------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    """Its own cluster: the remedies alter connmon's default-named topics."""
    with KafkaCluster(brokers=1, name="connmon-test") as c:
        yield c


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def _connmon_topics(cluster: KafkaCluster, command: str) -> subprocess.CompletedProcess:
    """One of the runbook's prose commands, with the test broker's address added."""
    return _run([*as_run(command, {}), "--bootstrap-servers", cluster.bootstrap_servers])


def _partials_retention(cluster: KafkaCluster) -> str | None:
    client = admin.admin_client({"bootstrap.servers": cluster.bootstrap_servers})
    found, failed = admin.describe_configs(client, ["connmon.partials"], 30.0)
    del client
    assert not failed, failed
    return (found["connmon.partials"] or {}).get("retention.ms")


def _retention_becomes(cluster: KafkaCluster, want: str, timeout_s: float = 30.0) -> str | None:
    """The partials topic's ``retention.ms`` once it is ``want`` (a broker serves a config
    change a moment after it was made), or as it is when ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while (have := _partials_retention(cluster)) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return have


def _set_partials_retention(cluster: KafkaCluster, value: str) -> None:
    """As an operator (or the default) left it before the runbook's command runs."""
    made = _connmon_topics(cluster, CREATE)  # connmon's topics, as docs/topics.md creates them
    assert made.returncode in (0, 1), made.stdout + made.stderr  # 1: a setting differs
    client = admin.admin_client({"bootstrap.servers": cluster.bootstrap_servers})
    errors = admin.alter(client, {"connmon.partials": {"retention.ms": value}}, 30.0)
    del client
    assert errors == {"connmon.partials": None}
    assert _retention_becomes(cluster, value) == value


DEFAULT_RETENTION = "21600000"  # 6 h, as docs/topics.md and the runbook say


def test_check_names_a_retention_that_is_not_the_configured_one(cluster: KafkaCluster) -> None:
    _set_partials_retention(cluster, "3600000")
    done = _run(as_run(CHECK, {BROKER: cluster.bootstrap_servers}))
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"connmon.partials: retention.ms is 3600000, must be {DEFAULT_RETENTION}"
        in done.stdout.splitlines()
    )
    _set_partials_retention(cluster, DEFAULT_RETENTION)
    done = _run(as_run(CHECK, {BROKER: cluster.bootstrap_servers}))
    assert done.returncode == 0 and "retention.ms" not in done.stdout, done.stdout


def test_alter_raises_the_retention_of_the_existing_partials_topic(cluster: KafkaCluster) -> None:
    """Without ``--alter`` the existing topic is left as it was and the output says to use it;
    the runbook's command sets the value, its check then passes; without the ``--set`` a check
    reports the raised value and a create with ``--alter`` sets the default back, as the
    runbook warns."""
    _set_partials_retention(cluster, DEFAULT_RETENTION)
    values = {BROKER: cluster.bootstrap_servers}
    alter = as_run(ALTER, values)
    without = _run([w for w in alter if w != "--alter"])
    assert without.returncode == 1, without.stdout + without.stderr
    assert (
        f"connmon.partials: retention.ms is {DEFAULT_RETENTION}, must be 43200000 "
        "(not changed: run with --alter)" in without.stdout.splitlines()
    )
    assert _partials_retention(cluster) == DEFAULT_RETENTION

    done = _run(alter)  # the runbook's command
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"connmon.partials: set retention.ms=43200000 (was {DEFAULT_RETENTION})" in done.stdout
    assert _retention_becomes(cluster, "43200000") == "43200000"
    check = _run(as_run(CHECK_SET, values))  # the runbook's check
    assert check.returncode == 0, check.stdout + check.stderr

    plain = _connmon_topics(cluster, CHECK_PLAIN)
    assert plain.returncode == 1
    assert (
        f"connmon.partials: retention.ms is 43200000, must be {DEFAULT_RETENTION}" in plain.stdout
    )
    back = _connmon_topics(cluster, CREATE_ALTER)
    assert back.returncode == 0, back.stdout + back.stderr
    assert _retention_becomes(cluster, DEFAULT_RETENTION) == DEFAULT_RETENTION


# ---- the job -------------------------------------------------------------------------------
def _start(argv: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, env=None,
    )  # fmt: skip


def _wait(what: str, fn: Callable[[], object], log: Path, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")
        time.sleep(1)


def _committed(checkpoint: Path) -> bool:
    return any(f.name.isdigit() for f in (checkpoint / STATE_QUERY / "commits").glob("*"))


def _stop(p: subprocess.Popen, log: Path) -> None:
    """SIGTERM to the job's process group, as its service manager sends it: exit 0."""
    _kill_group(p, signal.SIGTERM, timeout_s=180)
    assert p.returncode == 0, log.read_text()[-4000:]


def test_the_lagging_jobs_remedy_moves_to_a_new_checkpoint_with_8_partitions(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    """A job runs on the old checkpoint with its usual settings (4 shuffle partitions) and is
    stopped; started there again with 8 it refuses, naming the setting, both values and
    ``--migrate-from``; the runbook's command starts it on the new checkpoint, migrated, with 8
    state-store partitions."""
    t = Topics(cluster.bootstrap_servers, f"rb-{time.time_ns()}")
    config = tmp_path / "job.yaml"
    job = {
        "bootstrap_servers": t.bootstrap, "master": "local[2]", "events_topic": t.events,
        "aggregates_topic": t.aggregates, "findings_topic": t.findings,
        "deadletter_topic": t.deadletter, "status_topic": t.status,
        "partials_topic": t.partials, "state_buckets": 16, "trigger": TRIGGER,
        "starting_offsets": "earliest",
    }  # fmt: skip
    config.write_text(yaml.safe_dump({"job": job}))
    old, new = tmp_path / "ckpt", tmp_path / "ckpt-2"
    produce(t.bootstrap, t.events, lines(recording("close_wait_leak")))
    log = tmp_path / "job.log"

    p = _start([CONNMON, "job", "--config", str(config), "--checkpoint", str(old)], log)
    try:
        _wait(
            "aggregates from the job on the old checkpoint and a committed state batch",
            lambda: _committed(old) and consume_all(t.bootstrap, t.aggregates),
            log,
        )
    finally:
        _stop(p, log)

    # The job compares the partitions Spark recorded in the state query's offset log.
    before = sorted((old / STATE_QUERY / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    assert recorded_shuffle_partitions(before[-1].read_text()) == 4
    # --run-for: a job that does not refuse ends on its own and fails the assertions below.
    # The partitions Spark would use are compared, however they were given.
    base = ["--config", str(config), "--checkpoint", str(old), "--run-for", "30"]
    for given in (
        ["--shuffle-partitions", "8"],
        ["--spark-conf", "spark.sql.shuffle.partitions=8"],
    ):
        refused = _run([CONNMON, "job", *base, *given])
        assert refused.returncode == 2, refused.stdout + refused.stderr[-4000:]
        assert (
            "connmon: configuration error: shuffle-partitions: the checkpoint has 4, the config 8"
            in refused.stderr
        ), refused.stderr[-4000:]
        assert f"--checkpoint NEW --migrate-from {old}" in refused.stderr
    assert not (old / "migrated").exists()

    argv = as_run(
        MIGRATE,
        {JOB_CONFIG: str(config), OLD_CHECKPOINT: str(old), NEW_CHECKPOINT: str(new)},
    )
    p = _start(argv, log)
    try:
        _wait("a committed state batch on the new checkpoint", lambda: _committed(new), log)
    finally:
        _stop(p, log)
    assert f"migrated the state of {old}" in log.read_text()  # as the runbook says
    partitions = {d.name for d in (new / STATE_QUERY / "state" / "0").iterdir() if d.name.isdigit()}
    assert partitions == {str(i) for i in range(8)}
    offsets = sorted((new / STATE_QUERY / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    assert recorded_shuffle_partitions(offsets[-1].read_text()) == 8  # what Spark itself keeps
