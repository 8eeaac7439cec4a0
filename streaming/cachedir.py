"""Where connmon keeps what it downloads and builds (Maven jars, scenario clients, Go tools):
one per-user cache shared by every checkout, so a second clone builds nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$CONNMON_CACHE_DIR`` if set, else ``${XDG_CACHE_HOME:-$HOME/.cache}/connmon``."""
    env = os.environ if environ is None else environ
    if env.get("CONNMON_CACHE_DIR"):
        return Path(env["CONNMON_CACHE_DIR"])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "connmon"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".cache" / "connmon"
