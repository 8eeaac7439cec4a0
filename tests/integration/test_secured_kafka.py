"""connmon on a secured cluster: a real KRaft broker with TLS, SASL/SCRAM-SHA-512 and ACLs on
(nothing is allowed that no ACL allows). Each component connects as its own user holding
exactly the ACLs ``streaming.topics.acls`` lists, made by ``secure_for_connmon`` as
``connmon stack up --security sasl_ssl`` makes them.

Under test: the agent, the job and the exporter find a real CLOSE_WAIT leak with nothing more
than those ACLs; each component missing one ACL stops at start naming it; a client with a wrong
password is refused with a message naming the settings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import close_wait_leak
from job_helpers import wait_for

from streaming.stack.kafka import KafkaCluster
from streaming.stack.ports import free_port
from streaming.stack.secure import secure_for_connmon
from streaming.topics import acls, admin
from streaming.topics.spec import DEFAULT_NAMES

pytestmark = pytest.mark.integration

# The broker closes idle connections after this, so a client that never closes its end of one
# holds a CLOSE_WAIT socket: the leak the pipeline must find.
IDLE_MS = 4000
LEAKER = "leaky-client"


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[tuple[KafkaCluster, Path]]:
    d = tmp_path_factory.mktemp("secured")
    cluster = KafkaCluster(
        brokers=1,
        security="sasl_ssl",
        base_dir=str(d / "kafka"),
        overrides={"connections.max.idle.ms": str(IDLE_MS)},
    )
    with cluster:
        yield cluster, secure_for_connmon(cluster, d / "clients")


def _settings(clients: Path, component: str) -> dict[str, Any]:
    return json.loads((clients / f"{component}.yaml").read_text())


def _without_bootstrap(conf: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in conf.items() if k != "bootstrap.servers"}


def _agent_config(d: Path, cluster: KafkaCluster, kafka: dict[str, str], metrics: str) -> Path:
    path = d / "agent.json"
    path.write_text(
        json.dumps(
            {
                "host": "secured-host",
                "scan_interval_s": 1,
                "summary_interval_s": 2,
                "metrics_address": metrics,
                "kafka": kafka,
                "clusters": [
                    {
                        "name": "secured",
                        "bootstrap_servers": cluster.bootstrap_servers,
                        "metadata_refresh_s": 5,
                        "kafka": _without_bootstrap(kafka),
                    }
                ],
                "apps": [{"match": r"--app (\S+)", "name": r"\1", "on": "cmdline"}],
            }
        )
    )
    return path


def _job_config(d: Path, cluster: KafkaCluster, job: dict[str, Any]) -> Path:
    path = d / "job.json"
    path.write_text(
        json.dumps(
            {
                "job": {
                    "bootstrap_servers": cluster.bootstrap_servers,
                    "master": "local[2]",
                    "checkpoint": str(d / "ckpt"),
                    "trigger": "2s",
                    "starting_offsets": "earliest",
                    "shuffle_partitions": 2,
                    "state_buckets": 4,
                },
                "detectors": {"window_s": 10, "watermark_s": 5, "close_wait_grace_s": 5},
                "kafka": job["kafka"],
                "producer": _without_bootstrap(job["producer"]),
            }
        )
    )
    return path


def _exporter_argv(cluster: KafkaCluster, kafka: dict[str, str], listen: str) -> list[str]:
    argv = [sys.executable, "-m", "streaming", "exporter", "--listen", listen]
    argv += ["--bootstrap-servers", cluster.bootstrap_servers]
    for k, v in _without_bootstrap(kafka).items():
        argv += ["--kafka-config", f"{k}={v}"]
    return argv


def _spawn(argv: list[str], log: Path) -> subprocess.Popen:
    out = log.open("wb")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _metrics(listen: str) -> str:
    try:
        with urllib.request.urlopen(f"http://{listen}/metrics", timeout=3) as r:
            return r.read().decode()
    except OSError:
        return ""


def test_connmon_finds_a_close_wait_leak_with_only_its_acls(secured, tmp_path) -> None:
    cluster, clients = secured
    agent_metrics, exporter_listen = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    agent_cfg = _agent_config(
        tmp_path, cluster, _settings(clients, "agent")["kafka"], agent_metrics
    )
    job_cfg = _job_config(tmp_path, cluster, _settings(clients, "job"))
    cli = [sys.executable, "-m", "streaming"]
    leak = close_wait_leak(cluster.nodes[0].endpoint, LEAKER)
    procs = [
        _spawn([*cli, "agent", "--config", str(agent_cfg)], tmp_path / "agent.log"),
        _spawn([*cli, "job", "--config", str(job_cfg)], tmp_path / "job.log"),
        _spawn(
            _exporter_argv(cluster, _settings(clients, "exporter")["kafka"], exporter_listen),
            tmp_path / "exporter.log",
        ),
    ]

    def logs() -> str:
        return "\n".join(
            f"--- {n}\n{(tmp_path / f'{n}.log').read_text()[-1500:]}"
            for n in ("agent", "job", "exporter")
        )

    def finding() -> str | None:
        dead = [p.args[3] for p in procs if p.poll() is not None]
        assert not dead, f"{dead} exited: {logs()}"
        lines = [
            ln
            for ln in _metrics(exporter_listen).splitlines()
            if ln.startswith("connmon_finding_active{") and 'kind="close_wait_buildup"' in ln
        ]
        return next((ln for ln in lines if f'app="{LEAKER}"' in ln), None)

    try:
        line = wait_for("a close_wait_buildup finding on /metrics", finding, 240, logs)
        assert 'side="client"' in line and 'cluster="secured"' in line
        text = _metrics(exporter_listen)
        # The exporter's consumer was never refused (a missing group ACL shows here).
        assert "connmon_exporter_consumer_errors_total 0" in text or (
            "connmon_exporter_consumer_errors_total " not in text
        ), logs()
        for n in ("agent", "exporter"):
            assert "AUTHORIZATION_FAILED" not in (tmp_path / f"{n}.log").read_text(), logs()
    finally:
        _stop(procs)
        leak.kill()
        leak.wait()


def _run(argv: list[str], timeout_s: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


def _start_check(component: str, cluster: KafkaCluster, clients: Path, d: Path, **kw: str):
    """Run ``component`` up to its start check (it stops there when the check fails)."""
    cli = [sys.executable, "-m", "streaming"]
    settings = _settings(clients, component)
    kafka = {**settings["kafka"], **kw} if component != "job" else settings["kafka"]
    if component == "agent":
        cfg = _agent_config(d, cluster, kafka, f"127.0.0.1:{free_port()}")
        return _run([*cli, "agent", "--config", str(cfg), "--max-scans", "1"])
    if component == "job":
        cfg = _job_config(d, cluster, {**settings, "producer": {**settings["producer"], **kw}})
        return _run([*cli, "job", "--config", str(cfg), "--run-for", "1"], 240)
    if component == "exporter":
        listen = f"127.0.0.1:{free_port()}"
        try:
            return _run(_exporter_argv(cluster, kafka, listen), 30)
        except subprocess.TimeoutExpired:
            pytest.fail("the exporter passed its start check and kept serving")
    admin_cfg = d / "admin.json"
    admin_cfg.write_text(json.dumps({"kafka": kafka}))
    return _run([*cli, "topics", "check", "--config", str(admin_cfg)])


def _grant(component: str, role: str, operation: str) -> acls.Grant:
    names = dict(DEFAULT_NAMES)
    found = [
        g
        for g in acls.grants(component, acls.topics_of(component, names))
        if g.role == role and g.operation == operation
    ]
    assert len(found) == 1, (component, role, operation)
    return found[0]


def _delete(cluster: KafkaCluster, principal: str, g: acls.Grant) -> None:
    from confluent_kafka.admin import AclBindingFilter

    client = admin.admin_client(cluster.client_config())
    f = AclBindingFilter(*admin.acl_fields(principal, g))
    for fut in client.delete_acls([f], request_timeout=30).values():
        assert len(fut.result()) == 1, f"no ACL {g} of {principal} to delete"


@pytest.mark.parametrize(
    ("component", "role", "operation"),
    [
        ("agent", "events", "WRITE"),
        ("agent", "events", "DESCRIBE_CONFIGS"),
        ("job", "events", "READ"),
        ("job", "partials", "WRITE"),
        ("job", "findings", "WRITE"),
        ("exporter", "findings", "READ"),
        ("exporter", "group", "DESCRIBE"),
        ("admin", "events", "DESCRIBE"),
    ],
)
def test_a_component_missing_one_acl_stops_at_start_naming_it(
    secured, tmp_path, component, role, operation
) -> None:
    cluster, clients = secured
    principal = acls.DEFAULT_PRINCIPALS[component]
    g = _grant(component, role, operation)
    _delete(cluster, principal, g)
    try:
        got = wait_for(
            "the start check to see the ACL gone",
            lambda: (
                (r := _start_check(component, cluster, clients, tmp_path)).returncode != 0 and r
            ),
            60,
        )
    finally:
        su = admin.admin_client(cluster.client_config())
        assert not admin.create_acls(su, [(principal, g)], 30)
    text = got.stdout + got.stderr
    want = (
        f"{operation} on groups prefixed {g.name}"
        if g.resource == "group"
        else f"{operation} on topic {g.name}"
    )
    assert want in text, text[-3000:]
    assert "Traceback" not in text and "Exception" not in text, text[-3000:]
    # Only the ACL removed is named: the check does not guess.
    named = [ln for ln in text.splitlines() if " on topic " in ln or " on groups " in ln]
    assert len(named) == 1, named


def test_a_wrong_password_is_refused_naming_the_settings(secured, tmp_path) -> None:
    cluster, clients = secured
    got = _start_check("agent", cluster, clients, tmp_path, **{"sasl.password": "wrong"})
    text = got.stdout + got.stderr
    assert got.returncode == 2, text[-3000:]
    assert "refused" in text and "sasl.password" in text, text[-3000:]
    assert "Authentication failed" in text, text[-3000:]


def test_the_broker_refuses_an_unauthenticated_connection(secured) -> None:
    """The listener speaks TLS only: a plaintext Kafka request gets no answer."""
    cluster, _ = secured
    from confluent_kafka.admin import AdminClient

    plain = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
    with pytest.raises(Exception, match="_TRANSPORT|_TIMED_OUT"):
        plain.list_topics(timeout=5)
    host, port = cluster.nodes[0].endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass  # the port is open: the refusal above is the protocol's, not a closed port


def test_topics_acls_apply_needs_a_principal_that_may_alter_the_cluster(secured, tmp_path) -> None:
    cluster, clients = secured
    argv = [sys.executable, "-m", "streaming", "topics", "acls", "--component", "agent"]
    argv += ["--principal", "agent=User:another-agent", "--apply"]
    as_admin = _run([*argv, "--config", str(clients / "admin.yaml")])
    assert as_admin.returncode == 3, as_admin.stdout + as_admin.stderr
    assert "needs ALTER on the cluster" in as_admin.stderr
    su = tmp_path / "super.json"
    su.write_text(json.dumps({"kafka": cluster.client_config()}))
    as_super = _run([*argv, "--config", str(su)])
    assert as_super.returncode == 0, as_super.stdout + as_super.stderr
    assert as_super.stdout.count("User:another-agent: ") == 2
    listed = admin.admin_client(cluster.client_config())
    from confluent_kafka.admin import AclBindingFilter

    g = acls.grants("agent", {DEFAULT_NAMES["events"]: "events"})[0]
    found = listed.describe_acls(
        AclBindingFilter(*admin.acl_fields("User:another-agent", g)), request_timeout=30
    ).result()
    assert len(found) == 1, found


def test_stack_up_with_security_gives_each_component_working_settings(tmp_path) -> None:
    """The command a person runs: the cluster, its ACLs and the client settings files."""
    import os

    env = {**os.environ, "CONNMON_STATE_DIR": str(tmp_path / "stack")}
    cli = [sys.executable, "-m", "streaming"]
    up = subprocess.run(
        [*cli, "stack", "up", "--security", "sasl_ssl", "--brokers", "1", "--no-prometheus"],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        clients = tmp_path / "stack" / "clients"
        assert "SASL_SSL (SCRAM-SHA-512), ACLs on" in up.stdout
        assert sorted(p.name for p in clients.iterdir()) == [
            "admin.yaml", "agent.yaml", "exporter.yaml", "job.yaml",
        ]  # fmt: skip
        assert all(p.stat().st_mode & 0o077 == 0 for p in clients.iterdir())
        ok = _run([*cli, "topics", "check", "--config", str(clients / "admin.yaml")])
        assert ok.returncode == 0, ok.stdout + ok.stderr
        # The agent's user sees only its own topic: the ACLs are on.
        denied = _run([*cli, "topics", "check", "--config", str(clients / "agent.yaml")])
        assert denied.returncode == 3 and "lacks ACL DESCRIBE on topic connmon.findings" in (
            denied.stdout
        )
    finally:
        subprocess.run([*cli, "stack", "down"], capture_output=True, timeout=60, env=env)
