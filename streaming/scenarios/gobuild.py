"""Go programs built from a folder of the repository into the per-user cache.

A ``GoBuild`` runs ``go build`` into ``<name>-<hash>/bin`` (``buildstamp``), keyed by the
hash of its ``go.mod``, ``go.sum`` and Go sources: a second run, from any checkout with the
same sources, starts no ``go`` at all. Modules come from the Go module proxy into Go's own
caches (``go env GOMODCACHE GOCACHE``, per user), checked against ``go.sum``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from streaming.scenarios import buildstamp


class GoBuildError(RuntimeError):
    """A Go program could not be built; the message names the failing step."""


@dataclass(frozen=True)
class GoBuild:
    """One folder's Go programs: ``targets`` are ``go build`` package patterns run in
    ``source``, ``programs`` the binaries they must leave in ``bin/``."""

    name: str
    source: Path
    targets: tuple[str, ...]
    programs: tuple[str, ...]
    what: str  # what the programs are, for messages
    ldflags: str = ""  # part of the build's key
    cgo: bool = True  # False: static binaries, no C toolchain needed

    def _sources(self) -> list[Path]:
        src = self.source
        return sorted([src / "go.mod", src / "go.sum", *src.rglob("*.go")])

    def digest(self) -> str:
        files = buildstamp.digest(self.source, self._sources())
        if not self.ldflags:
            return files
        return hashlib.sha256(f"{files}\nldflags {self.ldflags}".encode()).hexdigest()

    def build_dir(self) -> Path:
        """The build of the current sources (it may not exist yet)."""
        return buildstamp.keyed_dir(self.name, self.digest())

    def is_built(self) -> bool:
        return buildstamp.is_current(self.build_dir(), self.digest())

    def binary(self, program: str) -> Path:
        """A program's path in the current build (``ensure_built`` first to be sure it is)."""
        if program not in self.programs:
            raise ValueError(f"{self.name} builds no {program!r}; known: {list(self.programs)}")
        return self.build_dir() / "bin" / program

    def go(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``go <args>`` in the source folder, its output captured."""
        go = shutil.which("go")
        if go is None:
            raise GoBuildError(
                f"{self.what} need the 'go' toolchain on PATH "
                f"(the version go.mod names or newer): {self.source / 'go.mod'}"
            )
        # GOTOOLCHAIN=local: fail naming the version instead of fetching another toolchain;
        # -mod=readonly: go.sum must already pin every module.
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        if not self.cgo:
            env["CGO_ENABLED"] = "0"
        return subprocess.run([go, *args], cwd=self.source, env=env, capture_output=True, text=True)

    def ensure_built(self, quiet: bool = True) -> Path:
        """Build every program unless already built from the same sources; the bin dir."""
        stamp = self.digest()
        out = buildstamp.keyed_dir(self.name, stamp)
        if buildstamp.is_current(out, stamp):
            return out / "bin"
        part = buildstamp.start(out)
        (part / "bin").mkdir()
        if not quiet:
            print(
                f"connmon: building {self.what} (modules from the Go proxy; "
                "again only when their sources change)...",
                file=sys.stderr,
            )
        args = ["build", "-trimpath", "-o", str(part / "bin") + os.sep]
        if self.ldflags:
            args.append(f"-ldflags={self.ldflags}")
        try:
            proc = self.go(*args, *self.targets)
        except GoBuildError:
            buildstamp.abandon(part)
            raise
        if proc.returncode != 0:
            buildstamp.abandon(part)
            raise GoBuildError(
                f"go build in {self.source} failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout)[-2000:]}"
            )
        missing = [p for p in self.programs if not (part / "bin" / p).exists()]
        if missing:
            buildstamp.abandon(part)
            raise GoBuildError(f"go build produced no {missing} in {part / 'bin'}")
        buildstamp.finish(part, out, stamp)
        return out / "bin"
