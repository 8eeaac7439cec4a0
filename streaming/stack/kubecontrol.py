"""A Kubernetes control plane on 127.0.0.1 for the tests: etcd and kube-apiserver, nothing else.

It is what a cluster's API server decides that the tests need: server-side apply with strict
field validation, RBAC, Pod Security admission, ServiceAccount tokens, watches. No scheduler,
controllers or kubelet run, so nothing creates pods from workloads, pods bound to a node are
only deleted with a grace period of 0, deleted namespaces stay ``Terminating`` and no
namespace gets its ``default`` ServiceAccount by itself (``ensure_namespace`` makes one).

Authentication: a static admin token (group ``system:masters``) for the test itself, and
ServiceAccount tokens (``token_for``) signed with the run's own key.
"""

from __future__ import annotations

import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from streaming.stack import kubetools
from streaming.stack.daemon import DaemonError, start_ready
from streaming.stack.kafka import _terminate
from streaming.stack.ports import free_port
from streaming.stack.tls import Authority, _write_key

ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN = "connmon-test-admin"


@dataclass
class ControlPlane:
    """etcd + kube-apiserver; ``start()`` returns once ``/readyz`` (RBAC's bootstrap roles
    included) answers."""

    base_dir: str | None = None
    keep_dir: bool = False
    api_port: int = 0
    etcd_port: int = 0
    etcd_pid: int | None = None
    pid: int | None = None  # kube-apiserver's
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    hosts: tuple[str, ...] = ("127.0.0.1",)  # the serving certificate's addresses

    @property
    def dir(self) -> Path:
        assert self.base_dir is not None
        return Path(self.base_dir)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca(self) -> Path:
        return self.dir / "pki" / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0) -> ControlPlane:
        if self.base_dir is None:
            self.base_dir = tempfile.mkdtemp(prefix="connmon-kube-")
        self._pki()
        self.etcd_port = self.etcd_port or free_port()
        self.api_port = self.api_port or free_port()
        peer = free_port()
        etcd = [
            str(kubetools.binary("etcd")),
            "--name=connmon-test",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=connmon-test=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        try:
            self.etcd_pid = start_ready(
                "etcd",
                etcd,
                self.dir / "etcd.log",
                f"http://127.0.0.1:{self.etcd_port}/health",
                timeout_s,
            )
            self.start_apiserver(timeout_s)
        except DaemonError:
            self.stop()
            raise
        self._write_kubeconfig()
        return self

    def start_apiserver(self, timeout_s: float = 180.0) -> None:
        """Start kube-apiserver (again, e.g. to expire every watch) on the same etcd."""
        pki = self.dir / "pki"
        argv = [
            str(kubetools.binary("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            "--advertise-address=127.0.0.1",
            # A loopback advertise address is no valid endpoint: keep the reconciler quiet.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki / 'apiserver.keystore.pem'}",
            f"--tls-private-key-file={pki / 'apiserver.keystore.pem'}",
            f"--client-ca-file={self.ca}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--api-audiences={ISSUER}",
            "--service-cluster-ip-range=10.0.0.0/24",  # allocated from, never contacted
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            f"--cert-dir={self.dir / 'certs'}",
            "--v=1",
        ]
        ctx = ssl.create_default_context(cafile=str(self.ca))
        self.pid = start_ready(
            "kube-apiserver",
            argv,
            self.dir / "kube-apiserver.log",
            f"{self.url}/readyz",
            timeout_s,
            context=ctx,
        )

    def stop_apiserver(self) -> None:
        _terminate(self.pid, 30.0)
        self.pid = None

    def stop(self) -> None:
        self.stop_apiserver()
        _terminate(self.etcd_pid, 15.0)
        self.etcd_pid = None
        if self.base_dir and not self.keep_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start() if self.pid is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pki(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        pki = self.dir / "pki"
        if (pki / "tokens.csv").exists():
            return
        ca = Authority.create(pki, name="connmon test cluster CA")
        ca.issue("apiserver", [*self.hosts, "localhost", "kubernetes.default.svc"], pki)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        _write_key(pki / "sa.key", sa_key)
        (pki / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        (pki / "tokens.csv").write_text(f'{self.admin_token},{ADMIN},{ADMIN},"system:masters"\n')

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: test, cluster: {{server: '{self.url}', "
            f"certificate-authority: '{self.ca}'}}}}]\n"
            f"users: [{{name: admin, user: {{token: '{self.admin_token}'}}}}]\n"
            "contexts: [{name: test, context: {cluster: test, user: admin}}]\n"
            "current-context: test\n"
        )
        self.kubeconfig.chmod(0o600)

    # ---- requests -----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        params: dict[str, str] | None = None,
        expect: tuple[int, ...] = (200, 201),
    ) -> Any:
        """One API request as the admin (or with ``token``); the decoded answer. A status
        outside ``expect`` raises with the server's message."""
        resp = requests.request(
            method,
            f"{self.url}{path}",
            json=body,
            params=params,
            headers={"Authorization": f"Bearer {token or self.admin_token}"},
            verify=str(self.ca),
            timeout=30,
        )
        if resp.status_code not in expect:
            raise KubeApiError(resp.status_code, resp.text)
        return resp.json() if resp.content else None

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl (built with the server, kustomize included) as the admin."""
        proc = subprocess.run(
            [str(kubetools.binary("kubectl")), f"--kubeconfig={self.kubeconfig}"] + list(args),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise KubeApiError(proc.returncode, f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """A namespace with its ``default`` ServiceAccount (what a controller would add)."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = labels
        self.request("POST", "/api/v1/namespaces", body, expect=(201, 409))
        self.ensure_service_account(name, "default")

    def ensure_service_account(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        self.request("POST", path, body, expect=(201, 409))

    def token_for(
        self, namespace: str, account: str, seconds: int = 3600, bound_secret: str | None = None
    ) -> str:
        """A ServiceAccount token (TokenRequest), bound to Secret ``bound_secret`` when given:
        deleting that Secret revokes it at once."""
        spec: dict[str, Any] = {"audiences": [ISSUER], "expirationSeconds": seconds}
        if bound_secret:
            secret = self.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{bound_secret}")
            spec["boundObjectRef"] = {
                "kind": "Secret",
                "apiVersion": "v1",
                "name": bound_secret,
                "uid": secret["metadata"]["uid"],
            }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        out = self.request("POST", path, {"spec": spec})
        return out["status"]["token"]

    def wait_gone(self, path: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.request("GET", path)
            except KubeApiError as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(0.2)
        raise TimeoutError(f"{path} still there after {timeout_s:.0f}s")


class KubeApiError(RuntimeError):
    """An API request answered outside what was expected; ``status`` is its HTTP status."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:2000]}")
        self.status = status
        self.text = text
