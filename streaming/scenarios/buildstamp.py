"""Build stamps of the scenario clients. Each build lives in a folder of the per-user cache
named after the hash of the sources it was built from (``<name>-<hash>``), holding a marker
with the whole hash: a second ``make setup``, from this checkout or another one with the same
sources, starts no compiler at all, and checkouts with different sources keep their own builds
side by side. A build is made in a folder beside its final one and renamed into place, so a
reader never sees a half-built folder."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from pathlib import Path

from streaming.cachedir import cache_dir
from streaming.stack import artifacts

MARKER = ".complete"
KEY_CHARS = 16  # of the hash, in the folder's name


def digest(root: Path, files: Iterable[Path]) -> str:
    """Hash of the files' paths (relative to ``root``) and contents, in sorted order."""
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def keyed_dir(name: str, stamp: str) -> Path:
    """The cache folder of build ``name`` from sources with hash ``stamp``."""
    return cache_dir() / f"{name}-{stamp[:KEY_CHARS]}"


def is_current(build_dir: Path, stamp: str) -> bool:
    """Whether ``build_dir`` was completed from sources with hash ``stamp``."""
    marker = build_dir / MARKER
    return marker.exists() and marker.read_text().strip() == stamp


def start(build_dir: Path) -> Path:
    """An empty folder beside ``build_dir`` to build into (``finish`` moves it into place)."""
    return artifacts.part_dir(build_dir)


def finish(part: Path, build_dir: Path, stamp: str) -> None:
    """Record a completed build (the marker last) and rename it into place."""
    (part / MARKER).write_text(stamp)
    artifacts.swap_in(part, build_dir)


def abandon(part: Path) -> None:
    """Remove a failed build's folder."""
    shutil.rmtree(part, ignore_errors=True)
