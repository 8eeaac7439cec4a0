"""Fixtures shared by the integration tests: a TLS certificate, a Kubernetes API server."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.stack import operator_routing
from streaming.stack.kubecontrol import ControlPlane

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA) and its key: (cert, key)."""
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


@pytest.fixture(scope="session")
def kube() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (Kubernetes 1.37, built by ``make setup``) on loopback, with the
    Prometheus Operator's CRDs connmon's objects use, for the whole session."""
    plane = ControlPlane().start()
    try:
        crds = operator_routing.crd_dir()
        for kind in ("servicemonitors", "prometheusrules", "alertmanagerconfigs"):
            plane.kubectl(
                "apply", "--server-side", "--field-manager=connmon-test",
                "-f", str(crds / f"monitoring.coreos.com_{kind}.yaml"),
            )  # fmt: skip
            name = f"{kind}.monitoring.coreos.com"
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            deadline = time.monotonic() + 60
            while not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in plane.request("GET", path).get("status", {}).get("conditions") or []
            ):
                assert time.monotonic() < deadline, f"CRD {name} not established"
                time.sleep(0.2)
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube_applied(kube: ControlPlane) -> ControlPlane:
    """The API server with ``deploy/kubernetes`` as committed applied server-side (kubectl's
    own kustomize, strict field validation), and the ``default`` ServiceAccounts the
    ServiceAccount controller would add to its namespaces."""
    kube.kubectl("apply", "--server-side", "--field-manager=connmon-test",
                 "-k", str(REPO / "deploy" / "kubernetes"))  # fmt: skip
    for ns in ("connmon", "connmon-job"):
        kube.ensure_service_account(ns, "default")
    return kube
