"""The container image (deploy/container/Containerfile).

Always: the entry point's dispatch (Spark's executor contract, ``connmon`` otherwise) run with
bash against stand-ins for java and connmon, and the build inputs checked against the versions
the rest of the project pins.

The build itself runs only when asked (``CONNMON_IMAGE_BUILD=1``), with buildah, from a base
image already in local storage (``CONNMON_IMAGE_BASE``, default Debian 12 slim): it takes
3.5-4.5 minutes on the reference machine, too long for the default run. Then the image is
started with buildah's chroot isolation and checked: versions, user, Spark with the Kafka
connector, the executor entry point, one agent scan.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming import __version__
from streaming.stack import artifacts

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_DIR = ROOT / "deploy" / "container"
CONTAINERFILE = CONTAINER_DIR / "Containerfile"
ENTRYPOINT = CONTAINER_DIR / "entrypoint.sh"
DEFAULT_BASE = "docker.io/library/debian:bookworm-slim"
BUILD_MINUTES = "3.5-4.5"


# ---- the entry point ------------------------------------------------------------------------
def _stub(path: Path, name: str) -> None:
    """An executable that prints its name and arguments, one per line."""
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(f'#!/bin/sh\necho {name}\nfor a in "$@"; do echo "$a"; done\n')
    (path / name).chmod(0o755)


def _entrypoint(tmp_path: Path, args: list[str], env: dict[str, str]) -> list[str]:
    _stub(tmp_path / "java" / "bin", "java")
    _stub(tmp_path / "bin", "connmon")
    base = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "JAVA_HOME": str(tmp_path / "java"),
        "SPARK_HOME": "/opt/spark-home",
    }
    proc = subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_executor_follows_sparks_kubernetes_executor_contract(tmp_path: Path) -> None:
    """The variables Spark's driver sets on executor pods become the executor backend's
    arguments; SPARK_JAVA_OPT_<n> come in numeric order."""
    env = {
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@connmon-job-driver.connmon.svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "2048m",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
        "SPARK_EXECUTOR_POD_NAME": "connmon-job-exec-3",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_CONF_DIR": "/opt/spark/conf",
        "SPARK_JAVA_OPT_10": "-Dten=10",
        "SPARK_JAVA_OPT_0": "-Dzero=0",
        "SPARK_JAVA_OPT_2": "-Dtwo=2",
    }
    out = _entrypoint(tmp_path, ["executor"], env)
    assert out[0] == "java"
    assert out[1:4] == ["-Dzero=0", "-Dtwo=2", "-Dten=10"]
    assert out[4:6] == ["-Xms2048m", "-Xmx2048m"]
    assert out[6:8] == ["-cp", "/opt/spark/conf:/opt/spark-home/jars/*"]
    assert out[8] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    opts = dict(zip(out[9::2], out[10::2], strict=True))
    assert opts == {
        "--driver-url": env["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "1",
        "--app-id": "spark-app-1",
        "--hostname": "10.1.2.3",
        "--resourceProfileId": "0",
        "--podName": "connmon-job-exec-3",
    }


def test_anything_else_runs_connmon(tmp_path: Path) -> None:
    assert _entrypoint(tmp_path, ["agent", "--once"], {}) == ["connmon", "agent", "--once"]
    assert _entrypoint(tmp_path, [], {}) == ["connmon"]
    assert _entrypoint(tmp_path, ["sh", "-c", "echo plain"], {}) == ["plain"]


# ---- build inputs ---------------------------------------------------------------------------
def test_image_gets_the_connector_the_local_stack_uses() -> None:
    """install-jars.py goes through streaming.stack.artifacts (same pom, same filter), and that
    pom's Spark version is the pinned PySpark."""
    text = CONTAINERFILE.read_text()
    assert "COPY deploy/local/maven deploy/local/maven" in text
    assert "deploy/container/install-jars.py" in text
    pinned = re.search(r"^pyspark==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned and pinned.group(1) == artifacts.pom_property("spark-kafka", "spark.version")
    sys.path.insert(0, str(CONTAINER_DIR))
    try:
        install_jars = __import__("install-jars")
    finally:
        sys.path.remove(str(CONTAINER_DIR))
    names = ("kafka-clients-3.9.0.jar", "spark-sql-kafka-0-10_2.13-4.0.0.jar", "bundle-2.24.6.jar")
    for name in names:
        jar = Path(name)
        assert install_jars.artifact_name(jar) == artifacts._artifact_name(jar)


def test_image_runs_python_311_java_17_as_a_numeric_non_root_user() -> None:
    text = CONTAINERFILE.read_text()
    assert re.search(r"^ARG PYTHON_PACKAGE=python3\.11$", text, re.M)
    assert re.search(r"^ARG JAVA_PACKAGE=openjdk-17-jre-headless$", text, re.M)
    assert re.search(r"^ARG BASE_IMAGE=", text, re.M)
    assert re.search(r"^USER 10001:10001$", text, re.M)
    entrypoint = '["/usr/bin/tini", "-s", "--", "/opt/connmon/bin/entrypoint.sh"]'
    assert f"ENTRYPOINT {entrypoint}\n" in text


def test_build_context_holds_what_the_containerfile_copies() -> None:
    """Every COPY source from the context is let in by .containerignore; the Maven cache and
    the virtualenv are not."""
    rules = [
        ln.strip()
        for ln in (CONTAINER_DIR / ".containerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    assert rules[0] == "*"
    for line in CONTAINERFILE.read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            for src in line.split()[1:-1]:
                assert any(src == a or src.startswith(a + "/") for a in allowed), src
                assert (ROOT / src).exists(), src
    assert not any(a.startswith((".venv", "deploy/local/.cache", ".git")) for a in allowed)


# ---- the build (opt-in) ---------------------------------------------------------------------
def _run(cmd: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image built from the checkout, removed afterwards (the layer cache stays)."""
    buildah = shutil.which("buildah")
    if buildah is None:
        pytest.skip("buildah is not installed (Debian: apt-get install buildah)")
    base = os.environ.get("CONNMON_IMAGE_BASE", DEFAULT_BASE)
    if _run([buildah, "inspect", "--type", "image", base], timeout=60).returncode != 0:
        pytest.skip(
            f"base image {base} is not in local storage: pull it (`buildah pull {base}`), or "
            "without registry access build one (deploy/kubernetes/README.md, 'Without registry "
            "access') and set CONNMON_IMAGE_BASE"
        )
    if os.environ.get("CONNMON_IMAGE_BUILD") != "1":
        pytest.skip(
            f"building the image takes {BUILD_MINUTES} minutes, more than the default test run "
            "affords; set CONNMON_IMAGE_BUILD=1 to build and check it"
        )
    tag = f"localhost/connmon:test-{uuid.uuid4().hex[:8]}"
    cmd = [
        buildah,
        "bud",
        "--isolation",
        "chroot",
        "--layers",
        "-f",
        str(CONTAINERFILE),
        "--ignorefile",
        str(CONTAINER_DIR / ".containerignore"),
        "--build-arg",
        f"BASE_IMAGE={base}",
        "--build-arg",
        f"S3A={os.environ.get('CONNMON_IMAGE_S3A', 'false')}",
        "-t",
        tag,
    ]
    # Locally added CAs (a TLS-intercepting proxy) for pip and Maven in the build stage.
    local_cas = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))
    ca_bundle = Path(f"/tmp/connmon-image-ca-{os.getpid()}.pem")
    if local_cas:
        ca_bundle.write_text("".join(p.read_text() for p in local_cas))
        cmd += ["--secret", f"id=extra-ca,src={ca_bundle}"]
    try:
        proc = _run([*cmd, str(ROOT)], timeout=1800)
    finally:
        ca_bundle.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    try:
        yield tag
    finally:
        _run([buildah, "rmi", tag])


@pytest.fixture
def run_in(image: str) -> Iterator:
    """Run commands in a working container of the image (chroot isolation: no OCI runtime)."""
    ctr = _run(["buildah", "from", "--pull-never", image]).stdout.strip()
    assert ctr

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 180):
        # Outside Kubernetes the container's host name is not in its /etc/hosts.
        full_env = {"SPARK_LOCAL_HOSTNAME": "localhost", **(env or {})}
        envs = [f"--env={k}={v}" for k, v in full_env.items()]
        entry = ["/usr/bin/tini", "-s", "--", "/opt/connmon/bin/entrypoint.sh"]
        return _run(
            ["buildah", "run", "--isolation", "chroot", *envs, ctr, "--", *entry, *args],
            timeout=timeout,
        )

    try:
        yield run
    finally:
        _run(["buildah", "rm", ctr])


def test_image_runs_connmon_as_its_user(run_in) -> None:
    proc = run_in("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"connmon {__version__}"
    assert run_in("sh", "-c", "id -u; id -g").stdout.split() == ["10001", "10001"]
    versions = run_in("sh", "-c", "python --version; $JAVA_HOME/bin/java -version 2>&1")
    assert "Python 3.11." in versions.stdout
    assert 'version "17.' in versions.stdout


def test_image_has_spark_and_the_kafka_connector(run_in) -> None:
    spark = run_in("spark-submit", "--version")
    assert "version 4.0.0" in spark.stdout + spark.stderr
    jars = run_in("sh", "-c", "ls $SPARK_HOME/jars").stdout.split()
    version = artifacts.pom_property("spark-kafka", "spark.version")
    for name in (
        "spark-sql-kafka-0-10_2.13",
        "spark-token-provider-kafka-0-10_2.13",
        "spark-kubernetes_2.13",
    ):
        assert f"{name}-{version}.jar" in jars
    assert len([j for j in jars if j.startswith("kafka-clients-")]) == 1


def test_executor_entry_point_starts_sparks_executor_backend(run_in) -> None:
    """No driver listens at the URL: the backend starts, parses its arguments, and fails to
    connect, which is as far as an executor gets without a driver."""
    env = {
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:1",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_APPLICATION_ID": "spark-app-test",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "connmon-job-exec-1",
        "SPARK_RESOURCE_PROFILE_ID": "0",
    }
    proc = run_in("executor", env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in out
    assert "Failed to connect to /127.0.0.1:1" in out


def test_agent_scans_sockets_in_the_image(run_in) -> None:
    proc = run_in(
        "agent",
        "--once",
        "--output",
        "-",
        "--cluster-bootstrap",
        "t=127.0.0.1:1",
        "--collector",
        "netlink",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"kind":"heartbeat"' in proc.stdout
    assert '"collector":"netlink"' in proc.stdout
