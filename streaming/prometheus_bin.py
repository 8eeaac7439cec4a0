"""Prometheus' two binaries, ``prometheus`` and ``promtool``, from Debian's ``prometheus``
package: where they are, and ``ensure_installed()``, which runs ``apt-get`` once when either is
missing (as root, as CI does).

Neutral ground: the mixin's checks run promtool, the local dev stack (``streaming.stack``) runs
the server; neither imports the other for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


class PrometheusError(RuntimeError):
    """Prometheus is missing, misconfigured or did not answer; the message says which."""


def _which(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)


def ensure_installed(quiet: bool = False) -> None:
    """Install Debian's prometheus package (server + promtool) if either is missing."""
    if _which("prometheus") and _which("promtool"):
        return
    if os.geteuid() != 0:
        raise PrometheusError(
            "prometheus/promtool are not installed; run: sudo apt-get install prometheus"
        )
    if not quiet:
        print(
            "connmon: installing Debian's prometheus package (first run only)...", file=sys.stderr
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    out = subprocess.DEVNULL if quiet else None
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"],
    ):
        rc = subprocess.run(cmd, env=env, stdout=out).returncode
        if rc != 0:
            raise PrometheusError(f"{' '.join(cmd)} failed with exit {rc}")
    # The package's postinst may start a system Prometheus on :9090; ours never uses it.
    if not (_which("prometheus") and _which("promtool")):
        raise PrometheusError("apt-get installed prometheus but the binaries are not on PATH")


def prometheus_bin() -> str:
    """Path of the Prometheus server, installing the package first if needed."""
    ensure_installed()
    return _which("prometheus")  # type: ignore[return-value]


def promtool() -> str:
    """Path of promtool, installing the package first if needed."""
    ensure_installed()
    return _which("promtool")  # type: ignore[return-value]
