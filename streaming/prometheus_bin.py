"""Prometheus' binaries, ``prometheus`` and ``promtool`` from Debian's ``prometheus`` package,
Alertmanager's, ``prometheus-alertmanager`` and ``amtool`` from ``prometheus-alertmanager``:
where they are, and ``ensure_installed()``, which runs ``apt-get`` once when any is missing (as
root, as CI does).

Neutral ground: the mixin's checks run promtool and amtool, the local dev stack
(``streaming.stack``) runs the servers; neither imports the other for it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from streaming.debian import apt_install


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
    try:
        apt_install(missing, quiet)
    except RuntimeError as exc:
        raise PrometheusError(str(exc)) from None
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
