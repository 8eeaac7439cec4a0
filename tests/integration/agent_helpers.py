"""Running the real agent from an integration test: writing its events to a file, reading
them back."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).parents[2]


def events_in(path: Path) -> list[dict]:
    """The events an agent wrote to ``path`` so far (none before its first write)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def agent_writing(config: Path, out: Path) -> subprocess.Popen:
    """``connmon agent`` with ``config``, its events to ``out``: scans every 0.5 s, summaries
    every 2 s. Stop it with SIGTERM."""
    return subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "connmon"), "agent", "--config", str(config),
            "--output", str(out), "--interval", "0.5", "--summary-interval", "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def agent_config(path: Path, host: str, cluster: Any, apps: Iterable[dict] = ()) -> Path:
    """An agent configuration at ``path`` for one local ``cluster`` (``KafkaCluster``): its
    brokers' ports are the broker side on this host, metadata refreshed every 5 s."""
    path.write_text(
        yaml.safe_dump(
            {
                "host": host,
                "clusters": [
                    {
                        "name": "local",
                        "bootstrap_servers": cluster.bootstrap_servers,
                        "listener_ports": [n.port for n in cluster.nodes],
                        "metadata_refresh_s": 5,
                    }
                ],
                "apps": list(apps),
            }
        )
    )
    return path
