"""A Kubernetes control plane for the tests: etcd, kube-apiserver and kubectl, built from the
Go module proxy at the versions ``deploy/local/kubetools/go.mod`` pins (Kubernetes 1.37).

``python -m streaming.stack.kubetools`` builds them once per source hash into the per-user
cache (``make setup`` does); ``streaming.stack.kubernetes`` runs them.
"""

from __future__ import annotations

from pathlib import Path

from streaming.scenarios.gobuild import GoBuild
from streaming.stack import artifacts

KUBERNETES_VERSION = "v1.37.2"


def _version_ldflags(version: str) -> str:
    """What Kubernetes' release build stamps in, so ``/version`` and kubectl's version skew
    check see a real version instead of ``v0.0.0-master``."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


BUILD = GoBuild(
    name="kubetools",
    source=artifacts.repo_root() / "deploy" / "local" / "kubetools",
    targets=(
        "./cmd/etcd",
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kubectl",
    ),
    programs=("etcd", "kube-apiserver", "kubectl"),
    what="etcd, kube-apiserver and kubectl for the Kubernetes tests",
    ldflags=_version_ldflags(KUBERNETES_VERSION),
    cgo=False,
)


def binary(program: str) -> Path:
    """``etcd``, ``kube-apiserver`` or ``kubectl``, built first if needed."""
    BUILD.ensure_built()
    return BUILD.binary(program)


if __name__ == "__main__":
    print(BUILD.ensure_built(quiet=False))
