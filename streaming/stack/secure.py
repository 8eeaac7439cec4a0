"""connmon on a secured local cluster: its topics, each component's ACLs and client settings.

Used by ``connmon stack up --security sasl_ssl`` and the tests that run connmon there.
"""

from __future__ import annotations

import json
from pathlib import Path

from streaming.errors import ConfigError
from streaming.stack.kafka import KafkaCluster
from streaming.topics import acls, admin
from streaming.topics.spec import build_specs, for_cluster


def secure_for_connmon(cluster: KafkaCluster, out: Path) -> Path:
    """On a secured cluster: create connmon's topics as its admin user, grant each component
    exactly its ACLs (as the brokers' super user), and write each component's client settings
    in the layout of its config file. Returns the folder of those files."""
    specs = [for_cluster(s, len(cluster.nodes)) for s in build_specs({})]
    names = {s.role: s.name for s in specs}
    bindings = [
        (acls.DEFAULT_PRINCIPALS[c], g)
        for c in acls.COMPONENTS
        for g in acls.grants(c, acls.topics_of(c, names))
    ]
    failed = admin.create_acls(admin.admin_client(cluster.client_config()), bindings, 30.0)
    if failed:
        raise ConfigError(f"granting connmon's ACLs failed: {next(iter(failed.values()))}")
    made = admin.create(admin.admin_client(client(cluster, "admin")), specs, 30.0)
    for name, err in made.items():
        if err is not None and not err.startswith("TOPIC_ALREADY_EXISTS"):
            raise ConfigError(f"creating topic {name} as connmon-admin failed: {err}")
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


def client(cluster: KafkaCluster, component: str) -> dict[str, str]:
    """librdkafka settings of ``component`` on ``cluster``."""
    return cluster.client_config(acls.DEFAULT_USERS[component])
