"""connmon's topics on a local cluster and, on a secured one, each component's ACLs and client
settings.

Used by ``connmon stack up`` and the tests that run connmon there.
"""

from __future__ import annotations

import json
from pathlib import Path

from streaming.errors import ConfigError
from streaming.stack.kafka import KafkaCluster
from streaming.topics import acls, admin
from streaming.topics.spec import TopicSpec, build_specs, for_cluster


def secure_for_connmon(cluster: KafkaCluster, out: Path) -> Path:
    """On a secured cluster: create connmon's topics as its admin user, grant each component
    exactly its ACLs (as the brokers' super user), and write each component's client settings
    in the layout of its config file. Returns the folder of those files."""
    names = {s.role: s.name for s in _specs(cluster)}
    bindings = [
        (acls.DEFAULT_PRINCIPALS[c], g)
        for c in acls.COMPONENTS
        for g in acls.grants(c, acls.topics_of(c, names))
    ]
    failed = admin.create_acls(admin.admin_client(cluster.client_config()), bindings, 30.0)
    if failed:
        raise ConfigError(f"granting connmon's ACLs failed: {next(iter(failed.values()))}")
    create_topics_for_connmon(cluster, client(cluster, "admin"), "as connmon-admin ")
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "agent": {"kafka": client(cluster, "agent")},
        "exporter": {"kafka": client(cluster, "exporter")},
        "admin": {"kafka": client(cluster, "admin")},
        "job": {
            "kafka": cluster.java_client_config(acls.DEFAULT_USERS["job"]),
            "producer": client(cluster, "job"),
        },
    }
    for component, content in files.items():
        f = out / f"{component}.yaml"
        f.touch(mode=0o600)
        f.write_text(json.dumps(content, indent=2) + "\n")  # JSON is YAML
    return out


def _specs(cluster: KafkaCluster) -> list[TopicSpec]:
    return [for_cluster(s, len(cluster.nodes)) for s in build_specs({})]


def create_topics_for_connmon(
    cluster: KafkaCluster, conf: dict[str, str] | None = None, who: str = ""
) -> None:
    """Create connmon's topics with their documented settings (as ``connmon topics create``
    does) unless they exist, with the client settings ``conf`` (default: the cluster's)."""
    made = admin.create(admin.admin_client(conf or cluster.client_config()), _specs(cluster), 30.0)
    for name, err in made.items():
        if err is not None and not err.startswith("TOPIC_ALREADY_EXISTS"):
            raise ConfigError(f"creating topic {name} {who}failed: {err}")


def client(cluster: KafkaCluster, component: str) -> dict[str, str]:
    """librdkafka settings of ``component`` on ``cluster``."""
    return cluster.client_config(acls.DEFAULT_USERS[component])
