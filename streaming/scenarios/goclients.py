"""Build the Go scenario clients (``deploy/local/go-clients``): one program per library,
``sarama-client`` (github.com/IBM/sarama) and ``franz-client`` (github.com/twmb/franz-go).

``ensure_built()`` builds them once per source hash into the per-user cache
(``streaming.scenarios.gobuild``); ``python -m streaming.scenarios.goclients`` builds them
(``make setup`` does).
"""

from __future__ import annotations

from pathlib import Path

from streaming.scenarios.gobuild import GoBuild
from streaming.stack import artifacts

# client kind (streaming.scenarios.model.CLIENTS) -> program under cmd/
PROGRAMS = {"sarama": "sarama-client", "franz-go": "franz-client"}

BUILD = GoBuild(
    name="go-clients",
    source=artifacts.repo_root() / "deploy" / "local" / "go-clients",
    targets=("./cmd/...",),
    programs=tuple(PROGRAMS.values()),
    what="the Go scenario clients (Sarama, franz-go)",
)


def build_dir() -> Path:
    """The build of the current sources (it may not exist yet)."""
    return BUILD.build_dir()


def is_built() -> bool:
    return BUILD.is_built()


def binary(client: str) -> Path:
    """The built program of a client kind (``sarama`` or ``franz-go``)."""
    if client not in PROGRAMS:
        raise ValueError(f"no Go program for client {client!r}; known: {sorted(PROGRAMS)}")
    return BUILD.binary(PROGRAMS[client])


def ensure_built(quiet: bool = True) -> Path:
    """Build every program unless already built from the same sources; return the bin dir."""
    return BUILD.ensure_built(quiet=quiet)


if __name__ == "__main__":
    print(ensure_built(quiet=False))
