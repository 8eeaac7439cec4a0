"""Build the Go scenario clients (``deploy/local/go-clients``): one program per library,
``sarama-client`` (github.com/IBM/sarama) and ``franz-client`` (github.com/twmb/franz-go).

``ensure_built()`` runs ``go build`` into ``go-clients-<hash>/bin`` in the per-user cache
(``streaming.cachedir``), keyed by the hash of ``go.mod``, ``go.sum`` and the sources: a
second run, from any checkout with the same sources, starts no ``go`` at all. The modules come
from the Go module proxy into Go's own module and build caches (``go env GOMODCACHE GOCACHE``,
per user), checked against ``go.sum``. ``python -m streaming.scenarios.goclients`` builds them
(``make setup`` does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from streaming.scenarios import buildstamp
from streaming.stack import artifacts

# client kind (streaming.scenarios.model.CLIENTS) -> program under cmd/
PROGRAMS = {"sarama": "sarama-client", "franz-go": "franz-client"}


class GoClientsError(RuntimeError):
    """The Go clients could not be built; the message names the failing step."""


def source_dir() -> Path:
    return artifacts.repo_root() / "deploy" / "local" / "go-clients"


def build_dir() -> Path:
    """The build of the current sources (it may not exist yet)."""
    return buildstamp.keyed_dir("go-clients", _digest())


def _sources() -> list[Path]:
    src = source_dir()
    return sorted([src / "go.mod", src / "go.sum", *src.rglob("*.go")])


def _digest() -> str:
    return buildstamp.digest(source_dir(), _sources())


def is_built() -> bool:
    return buildstamp.is_current(build_dir(), _digest())


def binary(client: str) -> Path:
    """The built program of a client kind (``sarama`` or ``franz-go``)."""
    if client not in PROGRAMS:
        raise ValueError(f"no Go program for client {client!r}; known: {sorted(PROGRAMS)}")
    return build_dir() / "bin" / PROGRAMS[client]


def ensure_built(quiet: bool = True) -> Path:
    """Build every program unless already built from the same sources; return the bin dir."""
    stamp = _digest()
    out = buildstamp.keyed_dir("go-clients", stamp)
    if buildstamp.is_current(out, stamp):
        return out / "bin"
    go = shutil.which("go")
    if go is None:
        raise GoClientsError(
            "the Go scenario clients (Sarama, franz-go) need the 'go' toolchain on PATH "
            f"(the version go.mod names or newer): {source_dir() / 'go.mod'}"
        )
    part = buildstamp.start(out)
    (part / "bin").mkdir()
    if not quiet:
        print(
            "connmon: building the Go clients (Sarama, franz-go; modules from the Go proxy; "
            "again only when their sources change)...",
            file=sys.stderr,
        )
    # GOTOOLCHAIN=local: fail naming the version instead of fetching another toolchain;
    # -mod=readonly: go.sum must already pin every module.
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    proc = subprocess.run(
        [go, "build", "-trimpath", "-o", str(part / "bin") + os.sep, "./cmd/..."],
        cwd=source_dir(),
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        buildstamp.abandon(part)
        raise GoClientsError(
            f"go build in {source_dir()} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout)[-2000:]}"
        )
    missing = [p for p in PROGRAMS.values() if not (part / "bin" / p).exists()]
    if missing:
        buildstamp.abandon(part)
        raise GoClientsError(f"go build produced no {missing} in {part / 'bin'}")
    buildstamp.finish(part, out, stamp)
    return out / "bin"


if __name__ == "__main__":
    print(ensure_built(quiet=False))
