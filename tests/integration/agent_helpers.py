"""Running the real agent from an integration test: writing its events to a file, reading
them back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

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
