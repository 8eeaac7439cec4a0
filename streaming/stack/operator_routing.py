"""The Prometheus Operator's own conversion of AlertmanagerConfig objects, and amtool.

``deploy/local/alertmanager-routing`` pins the Prometheus Operator and the Alertmanager
version it configures by default; ``amconfig`` runs the operator's ``ConfigBuilder`` (the code
that turns AlertmanagerConfig objects into the configuration an Alertmanager runs) and
``amtool`` tests routes on its output. They let the tests check connmon's shipped
AlertmanagerConfig as a cluster with the operator would route it. ``python -m
streaming.stack.operator_routing`` builds both (``make setup`` does).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from streaming.scenarios.gobuild import GoBuild
from streaming.stack import artifacts

BUILD = GoBuild(
    name="alertmanager-routing",
    source=artifacts.repo_root() / "deploy" / "local" / "alertmanager-routing",
    targets=("./cmd/...", "github.com/prometheus/alertmanager/cmd/amtool"),
    programs=("amconfig", "amtool"),
    what="the Prometheus Operator's Alertmanager configuration builder and amtool",
)


def generate(
    configs: list[Path],
    *,
    base: Path | None = None,
    strategy: str = "OnNamespace",
    alertmanager_namespace: str = "monitoring",
) -> str:
    """The Alertmanager configuration (YAML) the operator generates from AlertmanagerConfig
    objects ``configs`` on top of ``base`` for an Alertmanager in ``alertmanager_namespace``
    with matcher strategy ``strategy``."""
    argv = [
        str(binary("amconfig")),
        f"--strategy={strategy}",
        f"--alertmanager-namespace={alertmanager_namespace}",
    ]
    if base is not None:
        argv.append(f"--base={base}")
    proc = subprocess.run([*argv, *map(str, configs)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"amconfig failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"


def crd_dir() -> Path:
    """The operator's CustomResourceDefinitions, from its module at the pinned version (Go's
    module cache; downloaded from the Go proxy when missing)."""
    proc = BUILD.go("mod", "download", "-json", OPERATOR_MODULE)
    if proc.returncode != 0:
        raise RuntimeError(f"go mod download {OPERATOR_MODULE} failed: {proc.stderr[-2000:]}")
    return Path(json.loads(proc.stdout)["Dir"]) / "example" / "prometheus-operator-crd"


def binary(program: str) -> Path:
    """``amconfig`` or ``amtool``, built first if needed."""
    BUILD.ensure_built()
    return BUILD.binary(program)


if __name__ == "__main__":
    print(BUILD.ensure_built(quiet=False))
