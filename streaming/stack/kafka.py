"""A local KRaft Kafka cluster (1 or 3 combined broker+controller nodes) on 127.0.0.1.

``security="sasl_ssl"`` secures it as production clusters are: clients connect over TLS (a CA
and certificates made for the run) and authenticate with SASL/SCRAM-SHA-512, one user per
connmon component plus a super user for the brokers themselves, and the StandardAuthorizer
refuses whatever no ACL allows (``allow.everyone.if.no.acl.found=false``).

Each node gets its own ports (below the ephemeral range, chosen again if taken before a node
binds them), data dir, log4j2 config and ``server.properties``; broker settings can be
overridden per run and are checked against the broker's own list of configuration names
first, so a typo fails at once with its name. ``start()`` returns when the cluster answers
metadata with every broker; ``stop()`` leaves no process and no data behind.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from streaming.stack import artifacts
from streaming.stack.ports import free_port, port_in_use
from streaming.stack.tls import Authority
from streaming.topics.acls import DEFAULT_USERS

SECURITY = ("plaintext", "sasl_ssl")
SCRAM = "SCRAM-SHA-512"
# The brokers' own user (inter-broker and controller traffic); the only super user.
SUPER_USER = "broker"
# One SCRAM user per connmon component, named as the documented principals.
COMPONENT_USERS = tuple(DEFAULT_USERS.values())

log = logging.getLogger(__name__)

JVM_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")

# Prefixes Kafka accepts beyond its fixed configuration names.
_DYNAMIC_PREFIXES = ("listener.name.", "log.dir.", "metric.reporters.", "confluent.")

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaStackError(RuntimeError):
    """The cluster could not start or was misconfigured; the message names the cause."""


class PortTakenError(KafkaStackError):
    """A node could not bind its port: something else took it."""


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    dir: str
    pid: int | None = None
    host: str = "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return Path(self.dir) / "server.log"


@lru_cache(maxsize=1)
def broker_config_names() -> frozenset[str]:
    """Every configuration name the pinned broker knows (asked from the broker's own jars)."""
    java_dir = artifacts.repo_root() / "deploy" / "local" / "java"
    cp = os.pathsep.join(str(j) for j in artifacts.jars("kafka"))
    proc = subprocess.run(
        ["java", "-cp", cp, str(java_dir / "BrokerConfigNames.java")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise KafkaStackError(f"could not list broker config names: {proc.stderr[-1000:]}")
    return frozenset(line.strip() for line in proc.stdout.splitlines() if line.strip())


def validate_overrides(overrides: Mapping[str, str]) -> None:
    """Fail with the setting's name when a broker override is unknown or not a plain value."""
    known = broker_config_names()
    for key, value in overrides.items():
        if key not in known and not key.startswith(_DYNAMIC_PREFIXES):
            raise KafkaStackError(f"unknown broker setting {key!r} (Kafka does not know it)")
        if "\n" in str(value):
            raise KafkaStackError(f"broker setting {key!r} has a newline in its value")


def _cluster_id() -> str:
    """A KRaft cluster id (base64url of 16 random bytes). Like Kafka's own ``random-uuid`` it
    never starts with '-', which the storage tool's argument parser would take for an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class KafkaCluster:
    """A KRaft cluster of ``brokers`` combined nodes. Use as a context manager in tests."""

    brokers: int = 1
    overrides: dict[str, str] = field(default_factory=dict)
    name: str = "connmon"
    base_dir: str | None = None
    nodes: list[KafkaNode] = field(default_factory=list)
    cluster_id: str = ""
    keep_dir: bool = False
    # Address of the client listener; the controller listener stays on loopback.
    host: str = "127.0.0.1"
    security: str = "plaintext"
    # SCRAM user -> password (``sasl_ssl`` only), made at the first start.
    users: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.brokers not in (1, 3):
            raise KafkaStackError(f"brokers must be 1 or 3, not {self.brokers}")
        if self.security not in SECURITY:
            raise KafkaStackError(f"security must be one of {', '.join(SECURITY)}")
        self.overrides = {str(k): str(v) for k, v in (self.overrides or {}).items()}

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.endpoint for n in self.nodes)

    @property
    def secured(self) -> bool:
        return self.security == "sasl_ssl"

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients trust (``sasl_ssl`` only)."""
        return Path(str(self.base_dir)) / "tls" / "ca.crt"

    def client_config(self, user: str = SUPER_USER) -> dict[str, str]:
        """librdkafka settings of a client connecting as ``user`` (bootstrap included)."""
        conf = {"bootstrap.servers": self.bootstrap_servers}
        if self.secured:
            conf |= {
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": SCRAM,
                "sasl.username": user,
                "sasl.password": self.users[user],
                "ssl.ca.location": str(self.ca_file),
            }
        return conf

    def java_client_config(self, user: str = SUPER_USER) -> dict[str, str]:
        """The same for a Java client (Spark's Kafka source and writer), without bootstrap."""
        if not self.secured:
            return {}
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{self.users[user]}";'
        )
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM,
            "sasl.jaas.config": jaas,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
        }

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id}")

    def start(self, timeout_s: float = 180.0, ports: Iterable[int] | None = None) -> KafkaCluster:
        """Format and start every node; return once metadata lists all of them."""
        validate_overrides(self.overrides)
        wanted = list(ports or [])
        for p in wanted:
            if port_in_use(p):
                raise KafkaStackError(f"broker port {p} is already in use on 127.0.0.1")
        if self.base_dir is None:
            self.base_dir = tempfile.mkdtemp(prefix=f"{self.name}-kafka-")
        # Ports chosen here can still be taken by another listener before a node binds them:
        # then choose again, a few times. Ports the caller asked for are not changed.
        attempts = 1 if wanted else 3
        for attempt in range(1, attempts + 1):
            self._plan(wanted)
            try:
                if self.secured:
                    self._secure()
                for n in self.nodes:
                    self._write_config(n)
                    self._format(n)
                for n in self.nodes:
                    self._launch(n)
                self.wait_ready(timeout_s)
                return self
            except PortTakenError:
                self.stop()
                if attempt == attempts:
                    raise
                log.warning("a Kafka port was taken during start; choosing new ports")
            except BaseException:
                self.stop()
                raise
        return self

    def _plan(self, wanted: list[int]) -> None:
        """Fresh node directories, ports and cluster id."""
        self.cluster_id = _cluster_id()
        self.nodes = []
        for i in range(self.brokers):
            port = wanted[i] if i < len(wanted) else free_port()
            d = Path(str(self.base_dir)) / f"node-{i + 1}"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True, exist_ok=True)
            self.nodes.append(KafkaNode(i + 1, port, free_port(), str(d), host=self.host))

    def _secure(self) -> None:
        """A CA, each node's certificate, and a password per user."""
        ca = Authority.create(self.ca_file.parent)
        for n in self.nodes:
            hosts = ["127.0.0.1", "localhost", n.host]
            ca.issue(f"node-{n.node_id}", hosts, Path(n.dir))
        for user in (SUPER_USER, *COMPONENT_USERS):
            self.users.setdefault(user, secrets.token_hex(16))

    def _security_properties(self, n: KafkaNode) -> dict[str, str]:
        """SASL_SSL for clients and between brokers (SCRAM), SASL/PLAIN for the controller
        listener (SCRAM credentials live in the metadata the controllers serve), ACLs on."""
        pw = self.users[SUPER_USER]
        scram = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{SUPER_USER}" password="{pw}";'
        )
        plain = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{SUPER_USER}" password="{pw}" user_{SUPER_USER}="{pw}";'
        )
        store = Path(n.dir) / f"node-{n.node_id}.keystore.pem"
        return {
            "listeners": f"SASL_SSL://{n.endpoint},CONTROLLER://127.0.0.1:{n.controller_port}",
            "advertised.listeners": f"SASL_SSL://{n.endpoint}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": SCRAM,
            "sasl.mechanism.inter.broker.protocol": SCRAM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(store),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{SUPER_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def _properties(self, n: KafkaNode) -> dict[str, str]:
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self.nodes)
        rf = str(min(3, self.brokers))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(n.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{n.endpoint},CONTROLLER://127.0.0.1:{n.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{n.endpoint}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(Path(n.dir) / "data"),
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "num.partitions": "1",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        if self.secured:
            props.update(self._security_properties(n))
        props.update(self.overrides)
        return props

    def _write_config(self, n: KafkaNode) -> None:
        d = Path(n.dir)
        lines = [f"{k}={v}" for k, v in self._properties(n).items()]
        (d / "server.properties").write_text("\n".join(lines) + "\n")
        (d / "log4j2.properties").write_text(LOG4J2.format(log=d / "server.log"))

    def _java(self, n: KafkaNode, main: str, *args: str) -> list[str]:
        cp = os.pathsep.join(str(j) for j in artifacts.jars("kafka"))
        return [
            "java",
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={Path(n.dir) / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={n.dir}",
            "-cp",
            cp,
            main,
            *args,
        ]

    def _format(self, n: KafkaNode) -> None:
        scram = [
            f"--add-scram={SCRAM}=[name={user},password={pw}]" for user, pw in self.users.items()
        ]
        cmd = self._java(
            n,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={self.cluster_id}",
            "-c",
            str(Path(n.dir) / "server.properties"),
            "--ignore-formatted",
            *(scram if self.secured else []),
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise KafkaStackError(
                f"formatting node {n.node_id} failed: {(proc.stderr or proc.stdout)[-1500:]}"
            )

    def _launch(self, n: KafkaNode) -> None:
        out = open(Path(n.dir) / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            self._java(n, "kafka.Kafka", str(Path(n.dir) / "server.properties")),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the CLI that started it; killed by group
        )
        out.close()
        n.pid = proc.pid

    def wait_ready(self, timeout_s: float = 180.0, node_ids: Iterable[int] | None = None) -> None:
        """Block until metadata from the cluster lists the given (default: all) brokers."""
        from confluent_kafka.admin import AdminClient

        want = set(node_ids) if node_ids is not None else {n.node_id for n in self.nodes}
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({**self.client_config(), "log_level": 0})
        seen: set[int] = set()
        while time.monotonic() < deadline:
            for n in self.nodes:
                if n.node_id in want and not _alive(n.pid):
                    reason = self._death_reason(n)
                    taken = reason.endswith("is already in use")
                    raise (PortTakenError if taken else KafkaStackError)(reason)
            try:
                md = admin.list_topics(timeout=2)
                seen = set(md.brokers)
                if want <= seen:
                    return
            except Exception:  # not up yet: librdkafka raises KafkaException
                pass
            time.sleep(0.5)
        raise KafkaStackError(
            f"Kafka did not list brokers {sorted(want)} within {timeout_s:.0f}s "
            f"(saw {sorted(seen)}); logs in {self.base_dir}"
        )

    def _death_reason(self, n: KafkaNode) -> str:
        text = ""
        for f in (n.log_file, Path(n.dir) / "stdout.log"):
            if f.exists():
                text += f.read_text(errors="replace")
        if "Address already in use" in text:
            return f"node {n.node_id}: port {n.port} or {n.controller_port} is already in use"
        errors = [ln for ln in text.splitlines() if " ERROR " in ln or "Exception" in ln]
        tail = "\n".join(errors[-5:]) or text[-1500:]
        return f"Kafka node {n.node_id} exited during start:\n{tail}"

    def stop_node(self, node_id: int, timeout_s: float = 30.0) -> None:
        """Stop one node (SIGTERM, then SIGKILL) but keep its data, for failure tests."""
        n = self.node(node_id)
        _terminate(n.pid, timeout_s)
        n.pid = None

    def start_node(self, node_id: int, timeout_s: float = 120.0) -> None:
        n = self.node(node_id)
        if _alive(n.pid):
            return
        self._launch(n)
        self.wait_ready(timeout_s, node_ids=[node_id])

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop every node and delete the data (unless ``keep_dir``).

        All nodes get SIGTERM at once: stopped one by one, the last combined node waits for a
        controller quorum that is already gone."""
        _terminate_all([n.pid for n in self.nodes], timeout_s)
        for n in self.nodes:
            n.pid = None
        if self.base_dir and not self.keep_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start() if not self.nodes else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- persistence for `connmon stack` --------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> KafkaCluster:
        data = dict(state)
        nodes = [KafkaNode(**n) for n in data.pop("nodes", [])]
        c = cls(**data)
        c.nodes = nodes
        return c

    def status(self) -> list[dict[str, Any]]:
        return [
            {"node_id": n.node_id, "endpoint": n.endpoint, "pid": n.pid, "up": _alive(n.pid)}
            for n in self.nodes
        ]


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own exited child
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie whose parent is another process still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _terminate(pid: int | None, timeout_s: float) -> None:
    _terminate_all([pid], timeout_s)


def _terminate_all(pids: Iterable[int | None], timeout_s: float) -> None:
    """SIGTERM each process group, wait for all, then SIGKILL what is left."""
    live = [p for p in pids if p and _alive(p)]
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while live and time.monotonic() < deadline:
        time.sleep(0.2)
        live = [p for p in live if _alive(p)]
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for _ in range(50):
        live = [p for p in live if _alive(p)]
        if not live:
            return
        time.sleep(0.1)


def create_topics(
    bootstrap: str | Mapping[str, str],
    topics: Mapping[str, int],
    config: Mapping[str, str] | None = None,
    replication: int = 1,
    timeout_s: float = 60.0,
) -> None:
    """Create topics (name -> partitions); existing ones are left as they are. ``bootstrap``
    is the servers, or a client's whole librdkafka settings (``client_config()``)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = {"bootstrap.servers": bootstrap} if isinstance(bootstrap, str) else dict(bootstrap)
    admin = AdminClient(conf)
    new = [
        NewTopic(name, num_partitions=p, replication_factor=replication, config=dict(config or {}))
        for name, p in topics.items()
    ]
    for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except Exception as exc:  # KafkaException wraps a KafkaError
            err = exc.args[0] if exc.args else None
            if getattr(err, "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
                continue
            raise KafkaStackError(f"creating topic {name!r} failed: {exc}") from exc
