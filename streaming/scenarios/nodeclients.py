"""Install the Node.js scenario client (``deploy/local/node-clients``): ``kafkajs-client.js``.

``ensure_built()`` copies ``package.json``, ``package-lock.json`` and the script into
``node-clients-<hash>`` in the per-user cache (``streaming.cachedir``) and runs ``npm ci``
there (kafkajs from the npm registry through npm's own per-user cache, exactly as the lock file
pins it), so ``node_modules`` never lands in the work tree. The folder is keyed by the hash of
the three files: a second run, from any checkout with the same files, starts no ``npm``.
``python -m streaming.scenarios.nodeclients`` installs it (``make setup`` does).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from streaming.scenarios import buildstamp
from streaming.stack import artifacts

SCRIPT = "kafkajs-client.js"
FILES = ("package.json", "package-lock.json", SCRIPT)


class NodeClientsError(RuntimeError):
    """The Node.js client could not be installed; the message names the failing step."""


def source_dir() -> Path:
    return artifacts.repo_root() / "deploy" / "local" / "node-clients"


def build_dir() -> Path:
    """The install of the current files (it may not exist yet)."""
    return buildstamp.keyed_dir("node-clients", _digest())


def _digest() -> str:
    return buildstamp.digest(source_dir(), [source_dir() / name for name in FILES])


def is_built() -> bool:
    return buildstamp.is_current(build_dir(), _digest())


def script() -> Path:
    """The installed script (run it with ``node``)."""
    return build_dir() / SCRIPT


def node() -> str:
    """The ``node`` executable; a clear error when there is none."""
    found = shutil.which("node")
    if found is None:
        raise NodeClientsError("the kafkajs scenario client needs 'node' (Node.js 18+) on PATH")
    return found


def ensure_built(quiet: bool = True) -> Path:
    """``npm ci`` into the cache unless already done from the same files; return the dir."""
    stamp = _digest()
    out = buildstamp.keyed_dir("node-clients", stamp)
    if buildstamp.is_current(out, stamp):
        return out
    node()
    npm = shutil.which("npm")
    if npm is None:
        raise NodeClientsError("the kafkajs scenario client needs 'npm' on PATH (with Node.js)")
    part = buildstamp.start(out)
    for name in FILES:
        shutil.copy2(source_dir() / name, part / name)
    if not quiet:
        print(
            "connmon: npm ci for the kafkajs client (again only when it changes)...",
            file=sys.stderr,
        )
    proc = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=part,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise NodeClientsError(
            f"npm ci in {part} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout)[-2000:]}"
        )
    buildstamp.finish(part, out, stamp)
    return out


if __name__ == "__main__":
    print(ensure_built(quiet=False))
