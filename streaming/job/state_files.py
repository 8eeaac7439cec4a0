"""The detector state (``tracker.Tracker``) saved next to Spark's checkpoint, one file per batch.

A restarted query re-runs its last uncommitted batch with the same id and data; loading the
newest state saved *before* that id makes the re-run produce the same records again, which
overwrite their keys in the compacted topics instead of duplicating or losing them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class StateFiles:
    """``<checkpoint>/detector-state/<batch_id>.json``, written atomically; the last few kept."""

    def __init__(self, checkpoint: str | Path, keep: int = 5) -> None:
        self.dir = Path(checkpoint) / "detector-state"
        self.keep = keep

    def _ids(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(int(p.stem) for p in self.dir.glob("*.json") if p.stem.isdigit())

    def load_before(self, batch_id: int) -> tuple[int, dict[str, Any]] | None:
        """The newest saved (batch id, state) with an id below ``batch_id``."""
        older = [i for i in self._ids() if i < batch_id]
        if not older:
            return None
        i = older[-1]
        return i, json.loads((self.dir / f"{i}.json").read_text())

    def save(self, batch_id: int, state: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{batch_id}.json.tmp"
        tmp.write_text(json.dumps(state, sort_keys=True))
        os.replace(tmp, self.dir / f"{batch_id}.json")
        for old in self._ids()[: -self.keep]:
            (self.dir / f"{old}.json").unlink(missing_ok=True)
