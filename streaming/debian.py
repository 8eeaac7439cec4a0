"""Installing Debian packages with apt-get, as root (as CI does), for the tools setup needs."""

from __future__ import annotations

import os
import subprocess
import sys


def apt_install(packages: list[str], quiet: bool = False) -> None:
    """``apt-get update`` and ``install --no-install-recommends`` of ``packages``; a
    RuntimeError naming the failed command (or the missing privilege)."""
    if os.geteuid() != 0:
        raise RuntimeError(
            f"{', '.join(packages)} not installed; run: sudo apt-get install {' '.join(packages)}"
        )
    if not quiet:
        names = ", ".join(packages)
        print(f"connmon: installing Debian's {names} (first run only)...", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    out = subprocess.DEVNULL if quiet else None
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        rc = subprocess.run(cmd, env=env, stdout=out).returncode
        if rc != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed with exit {rc}")
