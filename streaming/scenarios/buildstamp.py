"""Build stamps of the scenario clients: a build directory holds a marker with the hash of the
sources it was built from, so a second ``make setup`` starts no compiler at all."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

MARKER = ".complete"


def digest(root: Path, files: Iterable[Path]) -> str:
    """Hash of the files' paths (relative to ``root``) and contents, in sorted order."""
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def is_current(build_dir: Path, stamp: str) -> bool:
    """Whether ``build_dir`` was completed from sources with hash ``stamp``."""
    marker = build_dir / MARKER
    return marker.exists() and marker.read_text().strip() == stamp


def mark(build_dir: Path, stamp: str) -> None:
    """Record a completed build (last, so an interrupted build is redone)."""
    (build_dir / MARKER).write_text(stamp)
