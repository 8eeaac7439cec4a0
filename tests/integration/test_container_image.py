"""The container image (deploy/container/Containerfile).

Always: the entry point's dispatch (Spark's executor contract, ``connmon`` otherwise) run with
bash against stand-ins for java and connmon, and the build inputs checked against the versions
the rest of the project pins.

Then the image is built by the command of deploy/kubernetes/README.md's "Without registry
access", as written, on the Debian base ``make setup`` makes from Debian's packages
(deploy/container/make-base.sh), or on ``CONNMON_IMAGE_BASE``; ``CONNMON_IMAGE_S3A`` sets
``S3A`` (about 3 minutes from a cold layer cache on the reference machine; with the cache, a
source change rebuilds from the connmon install on). Checked in it: versions, user, Spark with
the Kafka connector, the executor entry point, one agent scan. podman then runs the agent with
exactly the DaemonSet's security context against a real broker and a real CLOSE_WAIT leak in a
pod's network namespace, and the job's replay with the job pods' restricted context.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from netns_helpers import veth_pod, wait_line

from streaming import __version__
from streaming.stack import artifacts, images
from streaming.stack.kafka import create_topics

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_DIR = ROOT / "deploy" / "container"
CONTAINERFILE = CONTAINER_DIR / "Containerfile"
ENTRYPOINT = CONTAINER_DIR / "entrypoint.sh"
KUBE = ROOT / "deploy" / "kubernetes"
STALLED_CLIENT = ROOT / "tests" / "fixtures" / "agent" / "stalled_producer.py"


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


def _readme_build() -> list[str]:
    """The image build of deploy/kubernetes/README.md's "Without registry access", as written
    (its continuation lines joined), split as the shell splits it."""
    section = (KUBE / "README.md").read_text().split("### Without registry access", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    line = next(ln for ln in block.splitlines() if ln.startswith("buildah bud "))
    return shlex.split(line)


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_readme_builds_on_the_base_make_setup_makes() -> None:
    command = _readme_build()
    assert f"BASE_IMAGE={images.BASE_TAG}" in command
    assert command[-1] == "." and _option(command, "-f") == str(CONTAINERFILE.relative_to(ROOT))


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image the README's command builds from the checkout; its tag and the build stage's
    stay as the next build's cache."""
    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (Debian: apt-get install buildah)")
    *command, context = _readme_build()
    tag = _option(command, "-t")
    args = dict(a.split("=", 1) for a in command[command.index("bud") :] if "=" in a)
    base = os.environ.get("CONNMON_IMAGE_BASE") or args["BASE_IMAGE"]
    if _run(["buildah", "inspect", "--type", "image", base], timeout=60).returncode != 0:
        pytest.skip(
            f"base image {base} is not in local storage: make one from Debian's packages "
            "(`make setup` as root does: deploy/container/make-base.sh) or pull it "
            f"(`buildah pull {base}`)"
        )
    # What the README says to add: another base or S3A when asked, and behind a
    # TLS-intercepting proxy (locally added CAs) its CA for pip and Maven in the build stage.
    extra = [
        *(["--build-arg", f"BASE_IMAGE={base}"] if base != args["BASE_IMAGE"] else []),
        *(["--build-arg", f"S3A={s3a}"] if (s3a := os.environ.get("CONNMON_IMAGE_S3A")) else []),
    ]
    local_cas = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))
    ca_bundle = Path(f"/tmp/connmon-image-ca-{os.getpid()}.pem")
    if local_cas:
        ca_bundle.write_text("".join(p.read_text() for p in local_cas))
        extra += ["--secret", f"id=extra-ca,src={ca_bundle}"]
    at = command.index("-t")
    stage = [*command[:at], *command[at + 2 :], "--target", "build", "-t", f"{tag}-build"]
    try:
        # The build stage tagged too (its layers are no ancestors of the image's), then the
        # README's command itself.
        for cmd in (stage, command):
            proc = _run([*cmd, *extra, context], timeout=1800, cwd=ROOT)
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    finally:
        ca_bundle.unlink(missing_ok=True)
    # The tags stay, with the layers they were built from (the next build's cache); earlier
    # builds' layers go, so the storage does not grow with every source change.
    for _ in range(10):
        pruned = _run(["buildah", "rmi", "--prune"], timeout=300)
        if not pruned.stdout.strip():
            break
    yield tag


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
    version = artifacts.pom_property("spark-kafka", "spark.version")
    spark = run_in("spark-submit", "--version")
    assert f"version {version}" in spark.stdout + spark.stderr
    jars = run_in("sh", "-c", "ls $SPARK_HOME/jars").stdout.split()
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


# ---- podman runs the image as the manifests do ------------------------------------------------
def _podman_base() -> list[str]:
    """podman run, and what this kind of host needs: runc (crun refuses cgroup v1 hybrid
    hierarchies) and resource limits no higher than ours (podman asks for more than a host
    without CAP_SYS_RESOURCE may grant)."""
    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed (Debian: apt-get install podman runc)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    argv = [podman]
    if shutil.which("runc"):
        argv += ["--runtime", "runc"]
    return [*argv, "run", "--rm", f"--ulimit=nofile={soft}:{hard}", f"--ulimit=nproc={nproc}"]


def _manifest(name: str, kind: str) -> dict:
    """The object of ``kind`` in deploy/kubernetes/``name`` as committed."""
    return next(d for d in yaml.safe_load_all((KUBE / name).read_text()) if d and d["kind"] == kind)


def _security_flags(pod_spec: dict, container: dict) -> list[str]:
    """podman flags for a pod spec's and its container's security settings; anything the
    mapping does not know fails the test, so a manifest change cannot go unnoticed."""
    sc = {**pod_spec.get("securityContext", {}), **container.get("securityContext", {})}
    flags = []
    known = {
        "runAsUser", "runAsGroup", "runAsNonRoot", "privileged", "readOnlyRootFilesystem",
        "capabilities", "seccompProfile", "appArmorProfile", "allowPrivilegeEscalation",
        "fsGroup",
    }  # fmt: skip
    assert set(sc) <= known, set(sc) - known
    if "runAsUser" in sc:
        flags.append(f"--user={sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}")
    assert not sc.get("privileged")
    if sc.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]
    caps = sc.get("capabilities", {})
    flags += [f"--cap-drop={c}" for c in caps.get("drop", [])]
    flags += [f"--cap-add={c}" for c in caps.get("add", [])]
    assert sc.get("seccompProfile", {}).get("type", "RuntimeDefault") == "RuntimeDefault"
    if sc.get("appArmorProfile", {}).get("type") == "Unconfined":
        flags.append("--security-opt=apparmor=unconfined")
    if sc.get("allowPrivilegeEscalation") is False:
        flags.append("--security-opt=no-new-privileges")
    if pod_spec.get("hostPID"):
        flags.append("--pid=host")
    for vol in pod_spec.get("volumes", []):
        if "emptyDir" in vol:
            (mount,) = [m for m in container["volumeMounts"] if m["name"] == vol["name"]]
            size = vol["emptyDir"].get("sizeLimit", "256Mi").replace("Mi", "m").replace("Gi", "g")
            flags.append(f"--mount=type=tmpfs,destination={mount['mountPath']},tmpfs-size={size}")
    return flags


def test_agent_image_with_the_daemonsets_security_context_reports_a_leak(
    image, kafka_cluster_factory, unique_name, tmp_path
) -> None:
    """The agent in its own network namespace (the DaemonSet's hostNetwork: false), host PID,
    exactly the DaemonSet's capabilities, read-only root: it finds the sockets of a Kafka
    client in another pod's network namespace whose connection the broker closed and which
    never closes it, and names the process and the broker."""
    ds = _manifest("agent.yaml", "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["hostNetwork"] is False
    flags = _security_flags(spec, container)
    with veth_pod() as client_pod, veth_pod() as agent_pod:
        cluster = kafka_cluster_factory(
            brokers=1, overrides={"connections.max.idle.ms": "5000"}, host=client_pod.host_ip
        )
        create_topics(cluster.bootstrap_servers, {unique_name: 1})
        config = tmp_path / "config"
        config.mkdir()
        (config / "agent.yaml").write_text(
            yaml.safe_dump(
                {
                    "network_namespaces": "all",
                    "clusters": [
                        {
                            "name": "local",
                            "bootstrap_servers": cluster.bootstrap_servers,
                            "listener_ports": [cluster.nodes[0].port],
                        }
                    ],
                    "apps": [{"match": "stalled_producer", "name": "orders-in-pod"}],
                }
            )
        )
        client = client_pod.popen(
            sys.executable, str(STALLED_CLIENT), cluster.bootstrap_servers, unique_name,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_line(client, "ready")
            os.kill(client.pid, signal.SIGSTOP)  # its network thread stalls; it cannot close
            argv = [
                *_podman_base(), *flags, f"--network=ns:/run/netns/{agent_pod.name}",
                f"--volume={config}:/etc/connmon:ro", "--env=NODE_NAME=node-1",
                image, "agent", "--config=/etc/connmon/agent.yaml", "--host=node-1",
                "--once", "--output=-",
            ]  # fmt: skip
            leaked: list[dict] = []
            deadline = time.monotonic() + 90
            while not leaked and time.monotonic() < deadline:
                time.sleep(2)
                once = _run(argv, timeout=120)
                assert once.returncode == 0, once.stderr[-3000:]
                events = [json.loads(line) for line in once.stdout.splitlines()]
                leaked = [
                    e
                    for e in events
                    if e.get("side") == "client"
                    and e.get("state") == "CLOSE_WAIT"
                    and e.get("conn")  # one socket's event, not a summary
                ]
            assert leaked, once.stderr[-3000:]
            named = {(e["pid"], e["app"], e["broker_id"], e["cluster"]) for e in leaked}
            assert named == {(client.pid, "orders-in-pod", 1, "local")}, leaked
            assert all(e["conn"].startswith(f"{client_pod.ns_ip}:") for e in leaked), leaked
        finally:
            os.kill(client.pid, signal.SIGCONT)
            client.kill()
            client.wait()


def test_job_image_replays_with_the_job_pods_security_context(image, tmp_path) -> None:
    """The job's replay in the image, as the job's restricted pods run (non-root, read-only
    root, no capability, no network but loopback): the same findings as on the host."""
    dep = _manifest("job.yaml", "Deployment")
    spec = dep["spec"]["template"]["spec"]
    flags = _security_flags(spec, spec["containers"][0])
    events = ROOT / "tests" / "fixtures" / "events" / "close_wait_leak.jsonl"
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # the image's user writes there
    argv = [
        *_podman_base(), *flags, "--network=none",
        f"--volume={events.parent}:/data:ro", f"--volume={out}:/out",
        image, "replay", f"--events=/data/{events.name}", "--findings=/out/findings.jsonl",
    ]  # fmt: skip
    proc = _run(argv, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    host = tmp_path / "host.jsonl"
    ref = _run(
        [str(ROOT / ".venv" / "bin" / "connmon"), "replay", f"--events={events}",
         f"--findings={host}"],
        timeout=600,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr[-3000:]
    got = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    want = [json.loads(line) for line in host.read_text().splitlines()]
    assert got and {f["kind"] for f in got} >= {"close_wait_buildup"}
    assert sorted(got, key=json.dumps) == sorted(want, key=json.dumps)
