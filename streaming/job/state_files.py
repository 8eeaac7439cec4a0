"""The window and detector state saved next to Spark's checkpoint: a snapshot now and then, and
for every batch in between a delta (what that batch changed).

A restarted query re-runs its last uncommitted batch with the same id and data; loading the
state saved *before* that id (the newest snapshot below it and every delta after that
snapshot) makes the re-run produce the same records again, which overwrite their keys in the
compacted topics instead of duplicating or losing them.

Writing only deltas keeps a batch's cost proportional to what it touched, not to the tens of
thousands of series a large fleet keeps in state. A new snapshot is written once the deltas
since the last one add up to its size (so restoring reads at most about twice the state) or
number ``max_deltas``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

SNAPSHOT, DELTA = ".json", ".delta.json"


@dataclass(frozen=True)
class Saved:
    """The state as of ``batch_id``: a snapshot and the deltas after it, oldest first."""

    batch_id: int
    snapshot: dict[str, Any]
    deltas: list[dict[str, Any]]


class StateFiles:
    """``<checkpoint>/detector-state/<batch_id>.json`` (snapshot) or ``.delta.json``,
    written atomically; older files are removed once no re-run can need them."""

    def __init__(self, checkpoint: str | Path, max_deltas: int = 100) -> None:
        self.dir = Path(checkpoint) / "detector-state"
        self.max_deltas = max_deltas

    def _files(self) -> dict[int, Path]:
        """Batch id -> its file (``save`` never leaves two for one id)."""
        if not self.dir.is_dir():
            return {}
        found: dict[int, Path] = {}
        for p in self.dir.iterdir():
            stem = p.name.removesuffix(DELTA).removesuffix(SNAPSHOT)
            if stem.isdigit() and p.name in (stem + DELTA, stem + SNAPSHOT):
                found[int(stem)] = p
        return found

    @staticmethod
    def _is_snapshot(p: Path) -> bool:
        return not p.name.endswith(DELTA)

    def _chain(self, batch_id: int) -> list[tuple[int, Path]]:
        """The newest snapshot below ``batch_id`` and the files after it, in order."""
        files = sorted((i, p) for i, p in self._files().items() if i < batch_id)
        starts = [k for k, (_, p) in enumerate(files) if self._is_snapshot(p)]
        if not starts:
            if files:
                raise ValueError(
                    f"checkpoint: {self.dir} has deltas but no snapshot below batch {batch_id}"
                )
            return []
        chain = files[starts[-1] :]
        for (a, _), (b, _) in zip(chain, chain[1:], strict=False):
            if b != a + 1:
                raise ValueError(f"checkpoint: {self.dir} misses the state of batch {a + 1}")
        return chain

    def load_before(self, batch_id: int) -> Saved | None:
        """The newest saved state with an id below ``batch_id``."""
        chain = self._chain(batch_id)
        if not chain:
            return None
        docs = [orjson.loads(p.read_bytes()) for _, p in chain]
        return Saved(chain[-1][0], docs[0], docs[1:])

    def wants_snapshot(self, batch_id: int) -> bool:
        """Whether ``batch_id`` should write a snapshot rather than a delta."""
        chain = self._chain(batch_id)
        if not chain:
            return True
        sizes = [p.stat().st_size for _, p in chain]
        return len(chain) > self.max_deltas or sum(sizes[1:]) >= sizes[0]

    def save(self, batch_id: int, state: dict[str, Any], snapshot: bool) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        suffix, other = (SNAPSHOT, DELTA) if snapshot else (DELTA, SNAPSHOT)
        # A failed attempt of this batch may have written the other kind. Removed first: no
        # file for this batch is harmless (only its own re-run, which needs older ones, runs
        # before it is saved again); two would be ambiguous.
        (self.dir / f"{batch_id}{other}").unlink(missing_ok=True)
        tmp = self.dir / f".{batch_id}{suffix}.tmp"
        with open(tmp, "wb") as f:
            f.write(orjson.dumps(state))
            f.flush()
            os.fsync(f.fileno())  # a later batch's delta relies on this file: durable first
        os.replace(tmp, self.dir / f"{batch_id}{suffix}")
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)  # and the rename with it
        finally:
            os.close(fd)
        for left in self.dir.glob(".*.tmp"):  # from attempts that crashed mid-write
            left.unlink(missing_ok=True)
        # A re-run of this batch needs the chain below it; nothing older.
        below = self._chain(batch_id)
        first = below[0][0] if below else batch_id
        for i, p in self._files().items():
            if i < first:
                p.unlink(missing_ok=True)
