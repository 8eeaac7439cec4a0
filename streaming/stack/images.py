"""What building and running connmon's container image needs on this machine: Debian's
buildah, podman, runc and mmdebstrap, and a Debian 12 base image made from Debian's own
packages (``deploy/container/make-base.sh``) when no registry serves one.

``python -m streaming.stack.images`` installs and makes them once, as root (``make setup``
does); the image tests skip, naming what is missing, where they cannot.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from streaming.debian import apt_install
from streaming.stack import artifacts

BASE_TAG = "localhost/connmon-base/debian:bookworm"
PACKAGES = ("buildah", "podman", "runc", "mmdebstrap")  # each installs the program it names


def missing_tools() -> list[str]:
    return [pkg for pkg in PACKAGES if shutil.which(pkg) is None]


def has_image(tag: str) -> bool:
    podman = shutil.which("podman")
    if podman is None:
        return False
    proc = subprocess.run([podman, "image", "exists", tag], capture_output=True)
    return proc.returncode == 0


def ensure_base(quiet: bool = False) -> str:
    """The tools installed and the base image in local storage; its tag."""
    missing = missing_tools()
    if missing:
        apt_install(missing, quiet)
    if not has_image(BASE_TAG):
        if not quiet:
            print(f"connmon: making {BASE_TAG} with mmdebstrap (once)...", file=sys.stderr)
        script = artifacts.repo_root() / "deploy" / "container" / "make-base.sh"
        out = subprocess.DEVNULL if quiet else None
        rc = subprocess.run(["sh", str(script), BASE_TAG], stdout=out).returncode
        if rc != 0:
            raise RuntimeError(f"{script} failed with exit {rc}")
    return BASE_TAG


if __name__ == "__main__":
    print(ensure_base())
