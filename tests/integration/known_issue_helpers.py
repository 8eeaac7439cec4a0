"""Real client libraries at given releases, for the tests of known bugs
(test_known_issues_live.py): confluent-kafka wheels from PyPI and kafka-clients jars from Maven
Central, each fetched once into the per-user cache (``streaming.cachedir``, the folder the
scenario clients and the broker jars use) so that a second run downloads and compiles nothing;
the client programs of ``known_issue_clients/``; a TCP forwarder; the real agent with its eBPF
collector writing events to a file.

A download or build that fails raises: CI installs everything, so a missing package is a
failure, not a reason to skip."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml
from agent_helpers import wait_for_ebpf

from streaming.scenarios import buildstamp
from streaming.stack import artifacts

REPO = Path(__file__).parents[2]
CLIENTS = Path(__file__).parent / "known_issue_clients"
CONNMON = str(REPO / ".venv" / "bin" / "connmon")
JAVA_CLIENT = CLIENTS / "KnownIssueClient.java"
RDKAFKA_PROBE = CLIENTS / "rdkafka_probe.py"
FORWARDER = CLIENTS / "forwarder.py"
# The JVM options of every short-lived test JVM (tests/conftest.py, TEST_JVM_OPTIONS), with an
# eden that holds one 336 MB buffer: a plaintext client reads a TLS listener's alert
# (15 03 03 00 ..) as the size of a response and allocates that much before it sees the
# connection closed. With less heap its network thread dies of OutOfMemoryError and never
# reconnects; with the buffer in the old generation every attempt costs a full collection.
JVM = ("java", "-Xms600m", "-Xmx600m", "-Xmn450m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.connmon.tests</groupId>
  <artifactId>known-issue-java-client</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-clients</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class ClientBuildError(RuntimeError):
    """A client library release could not be fetched or built; the message says which step."""


def _stamp(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def confluent_kafka(version: str) -> Path:
    """A folder holding confluent-kafka ``version`` (its wheel for this interpreter, with the
    librdkafka it bundles) and nothing else, for ``PYTHONPATH``; from PyPI on first use."""
    tag = f"{sys.implementation.cache_tag}-{platform.machine()}"
    stamp = _stamp("confluent-kafka", version, tag)
    out = buildstamp.keyed_dir(f"confluent-kafka-{version}", stamp)
    if buildstamp.is_current(out, stamp):
        return out
    part = buildstamp.start(out)
    cmd = [
        sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
        "--only-binary", ":all:", "--target", str(part), f"confluent-kafka=={version}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise ClientBuildError(
            f"pip could not install confluent-kafka=={version}: {proc.stderr[-2000:]}"
        )
    buildstamp.finish(part, out, stamp)
    return out


def java_client(version: str) -> Path:
    """``KnownIssueClient.java`` compiled against kafka-clients ``version``: a folder with
    ``lib/`` (kafka-clients and its runtime dependencies, from Maven Central into the shared
    Maven repository of the cache) and ``classes/``."""
    pom = _POM.format(version=version)
    stamp = _stamp("known-issue-java-client", pom, JAVA_CLIENT.read_bytes())
    out = buildstamp.keyed_dir(f"known-issue-java-{version}", stamp)
    if buildstamp.is_current(out, stamp):
        return out
    mvn, javac = shutil.which("mvn"), shutil.which("javac")
    if mvn is None or javac is None:
        raise ClientBuildError("the Java client needs 'mvn' and 'javac' on PATH (a JDK + Maven)")
    part = buildstamp.start(out)
    (part / "pom.xml").write_text(pom)
    cmd = [
        mvn, "-B", "-q", "-f", str(part / "pom.xml"),
        f"-Dmaven.repo.local={artifacts.cache_dir() / 'm2'}",
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={part / 'lib'}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise ClientBuildError(
            f"mvn could not fetch kafka-clients {version} (exit {proc.returncode}): "
            f"{proc.stdout[-2000:]}{proc.stderr[-1000:]}"
        )
    (part / "classes").mkdir()
    proc = subprocess.run(
        [javac, "-d", str(part / "classes"), "-cp", str(part / "lib" / "*"),
         "--release", "17", str(JAVA_CLIENT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise ClientBuildError(f"javac failed against kafka-clients {version}: {proc.stderr}")
    buildstamp.finish(part, out, stamp)
    return out


def java_client_argv(build: Path, app: str, bootstrap: str, topic: str) -> list[str]:
    cp = os.pathsep.join([str(build / "classes"), str(build / "lib" / "*")])
    return [*JVM, "-cp", cp, "KnownIssueClient", "--app", app, "--bootstrap", bootstrap,
            "--topic", topic]  # fmt: skip


def rdkafka_probe_argv(bootstrap: str, app: str) -> list[str]:
    """The probe under this venv's interpreter without its site-packages (``-S``): the
    confluent-kafka it imports is the one of ``PYTHONPATH`` (``rdkafka_probe_env``)."""
    return [sys.executable, "-S", str(RDKAFKA_PROBE), bootstrap, "--app", app]


def rdkafka_probe_env(package_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(package_dir), "PYTHONUNBUFFERED": "1"}


# ---- processes -----------------------------------------------------------------------------
class Client:
    """A client process with its output in a log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: dict | None = None):
        self.name = name
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env,
            )  # fmt: skip

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, line: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while line not in self.text().splitlines():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} never printed {line!r}:\n{self.text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@contextmanager
def clients() -> Iterator[list[Client]]:
    """A list to start ``Client``s into; every one is killed at the end."""
    started: list[Client] = []
    try:
        yield started
    finally:
        for c in started:
            c.stop()


class Forwarder:
    """``known_issue_clients/forwarder.py`` from 127.0.0.1:``port`` to 127.0.0.1:``target``."""

    def __init__(self, port: int, target: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, str(FORWARDER), str(port), str(target)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._expect("up")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline().strip()
        assert got == word, f"forwarder said {got!r}, not {word!r}"

    def command(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()
        self._expect(word)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# ---- the agent -------------------------------------------------------------------------------
@contextmanager
def ebpf_agent(tmp_path: Path, endpoints: Sequence[str], apps: Sequence[str]) -> Iterator[Path]:
    """The real agent (``connmon agent``) with its eBPF collector on, watching ``endpoints``
    (``"<broker id>@host:port"``), naming each of ``apps`` after the marker of that name in a
    process's command line; yields the file its events go to, once the collector is attached.
    Stopped with SIGTERM at the end; it must exit cleanly."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "host": "known-issues-host",
                "scan_interval_s": 1,
                "summary_interval_s": 2,
                "metrics_address": "",
                "ebpf": "on",
                "network_namespaces": "own",
                "clusters": [{"name": "local", "endpoints": list(endpoints)}],
                "apps": [{"match": re.escape(f"--app {a}") + r"(?:\s|$)", "name": a} for a in apps],
            }
        )
    )
    out, log = tmp_path / "events.jsonl", tmp_path / "agent.log"
    with log.open("w") as log_f:
        agent = subprocess.Popen(
            [CONNMON, "agent", "--config", str(cfg), "--output", str(out)],
            stdout=log_f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        wait_for_ebpf(agent, log)
        yield out
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    text = log.read_text()
    assert agent.returncode == 0 and "Traceback" not in text, text[-3000:]


def identities(events: list[dict], app: str) -> set[tuple[str | None, str | None, str | None]]:
    """(library, version, evidence) of the client-side events of ``app`` that name one."""
    return {
        (e.get("client_library"), e.get("client_version"), e.get("client_library_evidence"))
        for e in events
        if e.get("app") == app and e.get("side") == "client" and e.get("client_library")
    }
