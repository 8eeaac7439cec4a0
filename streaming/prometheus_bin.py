"""Prometheus' binaries, ``prometheus`` and ``promtool`` from Debian's ``prometheus`` package,
Alertmanager's, ``prometheus-alertmanager`` and ``amtool`` from ``prometheus-alertmanager``:
where they are, and ``ensure_installed()``, which runs ``apt-get`` once when any is missing (as
root, as CI does).

Neutral ground: the mixin's checks run promtool and amtool, the local dev stack
(``streaming.stack``) runs the servers; neither imports the other for it.
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


# Debian package -> the binaries it installs.
PACKAGES = {
    "prometheus": ("prometheus", "promtool"),
    "prometheus-alertmanager": ("prometheus-alertmanager", "amtool"),
}


def ensure_installed(quiet: bool = False) -> None:
    """Install Debian's prometheus and prometheus-alertmanager packages if a binary is missing."""
    missing = [pkg for pkg, bins in PACKAGES.items() if not all(map(_which, bins))]
    if not missing:
        return
    if os.geteuid() != 0:
        raise PrometheusError(
            f"{', '.join(missing)} not installed; run: sudo apt-get install {' '.join(missing)}"
        )
    if not quiet:
        print(
            f"connmon: installing Debian's {', '.join(missing)} (first run only)...",
            file=sys.stderr,
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    out = subprocess.DEVNULL if quiet else None
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        rc = subprocess.run(cmd, env=env, stdout=out).returncode
        if rc != 0:
            raise PrometheusError(f"{' '.join(cmd)} failed with exit {rc}")
    # The packages' postinst may start a system Prometheus on :9090 and Alertmanager on :9093;
    # ours never use them (their ports are picked by the kernel).
    for pkg in missing:
        if not all(map(_which, PACKAGES[pkg])):
            raise PrometheusError(f"apt-get installed {pkg} but its binaries are not on PATH")


def _installed(name: str) -> str:
    """Path of one of the packages' binaries, installing them first if needed."""
    ensure_installed()
    return _which(name)  # type: ignore[return-value]


def prometheus_bin() -> str:
    """Path of the Prometheus server."""
    return _installed("prometheus")


def promtool() -> str:
    return _installed("promtool")


def alertmanager_bin() -> str:
    """Path of the Alertmanager server."""
    return _installed("prometheus-alertmanager")


def amtool() -> str:
    return _installed("amtool")
