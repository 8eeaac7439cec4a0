"""connmon's Kubernetes objects against a real API server (etcd + kube-apiserver 1.37, built
from the Go module proxy by ``make setup``): what a cluster decides is decided by the cluster.

- ``deploy/kubernetes`` as committed, and the overlay deploy/kubernetes/README.md builds with
  ``connmon mixin build``, applied server-side with strict field validation (kubectl with its
  own kustomize): accepted, and a second apply changes nothing.
- Pod Security admission enforces the namespaces' shipped levels: the job's pods are admitted
  in its ``restricted`` namespace, a privileged variant is rejected there by the API server.
- RBAC, checked by the API server: each ServiceAccount can do what its component does and
  nothing more (SubjectAccessReview, and the rules the account itself is shown).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming.mixin.build import ROOT
from streaming.stack.kubecontrol import ControlPlane, KubeApiError

pytestmark = pytest.mark.integration

KUBE = ROOT / "deploy" / "kubernetes"
VENV_BIN = ROOT / ".venv" / "bin"
MANAGER = "--field-manager=connmon-test"


def _objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kind(path: Path, kind: str) -> dict[str, Any]:
    return next(o for o in _objects(path) if o["kind"] == kind)


def _versions(kube: ControlPlane, target: list[str]) -> dict[str, str]:
    """resourceVersion of every object the kustomization holds, by kind/namespace/name."""
    out = kube.kubectl("get", *target, "-o", "yaml").stdout
    items = yaml.safe_load(out)["items"]
    return {
        f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"][
            "resourceVersion"
        ]
        for o in items
    }


@pytest.fixture(scope="module")
def applied(kube_applied: ControlPlane) -> ControlPlane:
    return kube_applied


def test_shipped_objects_are_accepted_and_a_second_apply_changes_nothing(applied):
    before = _versions(applied, ["-k", str(KUBE)])
    kinds = {k.split("/")[0] for k in before}
    assert {
        "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
        "ClusterRoleBinding", "DaemonSet", "StatefulSet", "Deployment", "Service",
        "ConfigMap", "NetworkPolicy", "PrometheusRule", "ServiceMonitor", "AlertmanagerConfig",
    } <= kinds, kinds  # fmt: skip
    applied.kubectl("apply", "--server-side", MANAGER, "-k", str(KUBE))
    assert _versions(applied, ["-k", str(KUBE)]) == before
    ns = applied.request("GET", "/api/v1/namespaces/connmon-job")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_an_unknown_field_is_rejected_by_the_server(applied, tmp_path):
    """The strict validation the applies above pass is the server's: a typo fails."""
    rule = _kind(KUBE / "prometheusrule.yaml", "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["forr"] = "2m"
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(rule))
    proc = applied.kubectl(
        "apply", "--server-side", MANAGER, "--dry-run=server", "-f", str(tmp_path / "typo.yaml"),
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "rules[0].forr: field not declared in schema" in proc.stderr


def _readme_block(marker: str) -> str:
    """The shell block of deploy/kubernetes/README.md that contains ``marker``."""
    text = (KUBE / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if marker in b]
    return "\n".join(line[3:] if line.startswith("   ") else line for line in block.split("\n"))


def test_the_readmes_site_overlay_is_accepted(kube, tmp_path):
    """deploy/kubernetes/README.md's commands as written: the mixin build with its settings,
    then the overlay on top of it (an editor that changes nothing)."""
    script = _readme_block("connmon mixin build --out site-build")
    script += "\n" + _readme_block("cat > site/kustomization.yaml")
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "EDITOR": "true"}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    kube.kubectl("apply", "--server-side", MANAGER, "-k", str(tmp_path / "site"))
    policy = kube.request("GET", "/apis/networking.k8s.io/v1/namespaces/connmon/networkpolicies")[
        "items"
    ]
    assert any("10.0.0.10/32" in yaml.safe_dump(p) for p in policy)
    job = kube.request("GET", "/apis/apps/v1/namespaces/connmon-job/deployments/connmon-job")
    images = {c["image"] for c in job["spec"]["template"]["spec"]["containers"]}
    assert images == {"registry.internal/connmon:0.1.0"}


# ---- Pod Security admission -----------------------------------------------------------------
def _as_pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(template)}
    pod.setdefault("metadata", {})["name"] = name
    return pod


def _create_pod(kube: ControlPlane, namespace: str, pod: dict, token: str | None = None) -> Any:
    return kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        pod,
        token=token,
        params={"dryRun": "All"},  # through admission, nothing stored
    )


def _rejected(kube: ControlPlane, namespace: str, pod: dict, token: str | None = None) -> str:
    with pytest.raises(KubeApiError) as exc:
        _create_pod(kube, namespace, pod, token)
    assert exc.value.status == 403, exc.value
    return json.loads(exc.value.text)["message"]


@pytest.fixture(scope="module")
def job_token(applied) -> str:
    return applied.token_for("connmon-job", "connmon-job")


def _executor_pod() -> dict[str, Any]:
    """Spark's executor pod as the driver creates it: the shipped template and the image."""
    pod = yaml.safe_load((KUBE / "config" / "executor-pod-template.yaml").read_text())
    driver = _kind(KUBE / "job.yaml", "Deployment")["spec"]["template"]["spec"]
    pod["metadata"]["name"] = "connmon-job-exec-1"
    pod["spec"]["containers"][0]["image"] = driver["containers"][0]["image"]
    return pod


def test_the_job_creates_its_executors_in_its_restricted_namespace(applied, job_token):
    made = _create_pod(applied, "connmon-job", _executor_pod(), job_token)
    assert made["metadata"]["name"] == "connmon-job-exec-1"
    driver = _kind(KUBE / "job.yaml", "Deployment")["spec"]["template"]
    _create_pod(applied, "connmon-job", _as_pod(driver, "connmon-job-driver"))


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["spec"]["containers"][0]["securityContext"].update(
            privileged=True, allowPrivilegeEscalation=True
        ),
        lambda p: p["spec"].update(hostPID=True),
        lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/proc"}}),
        lambda p: (
            p["spec"]["securityContext"].pop("runAsNonRoot")
            and p["spec"]["securityContext"].update(runAsUser=0)
        ),
    ],
    ids=["privileged", "hostPID", "hostPath", "root"],
)
def test_pod_security_rejects_what_restricted_forbids(applied, job_token, change):
    pod = _executor_pod()
    change(pod)
    text = _rejected(applied, "connmon-job", pod, job_token)
    assert 'violates PodSecurity "restricted:latest"' in text


def test_the_agents_pod_is_admitted_only_in_its_privileged_namespace(applied):
    agent = _kind(KUBE / "agent.yaml", "DaemonSet")["spec"]["template"]
    _create_pod(applied, "connmon", _as_pod(agent, "connmon-agent-x"))
    elsewhere = _as_pod(agent, "connmon-agent-x")
    elsewhere["spec"]["serviceAccountName"] = "connmon-job"  # one that exists there
    text = _rejected(applied, "connmon-job", elsewhere)
    assert 'violates PodSecurity "restricted:latest"' in text


def test_the_job_cannot_create_pods_elsewhere(applied, job_token):
    text = _rejected(applied, "connmon", _executor_pod(), job_token)
    assert "cannot create resource" in text and "connmon-job" in text


# ---- RBAC -----------------------------------------------------------------------------------
def _allowed(
    kube: ControlPlane, account: str, verb: str, resource: str, namespace: str = ""
) -> bool:
    sa_ns, sa = account.split("/")
    resource, _, sub = resource.partition("/")
    attrs = {"verb": verb, "resource": resource, "namespace": namespace}
    if sub:
        attrs["subresource"] = sub
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{sa_ns}:{sa}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}",
                       "system:authenticated"],
            "resourceAttributes": attrs,
        },
    }  # fmt: skip
    out = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(out["status"].get("allowed"))


JOB_RESOURCES = ("pods", "services", "configmaps")
JOB_VERBS = ("get", "list", "watch", "create", "delete", "deletecollection")
# (account, verb, resource, namespace): what each component does
ALLOWED = [
    *[("connmon/connmon-agent", v, "pods", ns) for v in ("get", "list", "watch")
      for ns in ("", "default", "connmon-job")],
    *[("connmon-job/connmon-job", v, r, "connmon-job") for v in JOB_VERBS for r in JOB_RESOURCES],
]  # fmt: skip
DENIED = [
    *[("connmon/connmon-agent", v, "pods", "default")
      for v in ("create", "update", "patch", "delete", "deletecollection")],
    ("connmon/connmon-agent", "create", "pods/exec", "default"),
    ("connmon/connmon-agent", "get", "pods/log", "default"),
    ("connmon/connmon-agent", "create", "pods/eviction", "default"),
    ("connmon/connmon-agent", "list", "secrets", ""),
    ("connmon/connmon-agent", "get", "secrets", "connmon"),
    ("connmon/connmon-agent", "list", "nodes", ""),
    ("connmon/connmon-agent", "list", "configmaps", "connmon"),
    ("connmon/connmon-agent", "create", "serviceaccounts/token", "connmon"),
    *[("connmon/connmon-exporter", v, r, ns) for v in ("get", "list")
      for r in ("pods", "secrets", "configmaps") for ns in ("", "connmon")],
    *[("connmon-job/connmon-job", v, r, ns) for v in ("list", "create")
      for r in JOB_RESOURCES for ns in ("", "connmon", "default")],
    *[("connmon-job/connmon-job", v, r, "connmon-job") for v in ("update", "patch")
      for r in JOB_RESOURCES],
    ("connmon-job/connmon-job", "get", "secrets", "connmon-job"),
    ("connmon-job/connmon-job", "list", "secrets", "connmon-job"),
    ("connmon-job/connmon-job", "create", "pods/exec", "connmon-job"),
    ("connmon-job/connmon-job", "create", "persistentvolumeclaims", "connmon-job"),
]  # fmt: skip


def test_each_account_can_do_what_its_component_does(applied):
    wrong = [c for c in ALLOWED if not _allowed(applied, *c)]
    assert not wrong, f"denied: {wrong}"


def test_and_nothing_more(applied):
    wrong = [c for c in DENIED if _allowed(applied, *c)]
    assert not wrong, f"allowed: {wrong}"


def _own_rules(kube: ControlPlane, token: str, namespace: str) -> set[tuple]:
    """The resource rules an account is shown for itself in a namespace, without those every
    authenticated user has (those of an account bound to nothing)."""
    rules = _rules(kube, token, namespace)
    kube.ensure_service_account("default", "connmon-test-nobody")
    return rules - _rules(kube, kube.token_for("default", "connmon-test-nobody"), namespace)


def _rules(kube: ControlPlane, token: str, namespace: str) -> set[tuple]:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    out = kube.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", review, token=token
    )
    rules = set()
    for r in out["status"]["resourceRules"]:
        for res in r["resources"]:
            rules.add((tuple(r["apiGroups"]), res, tuple(sorted(r["verbs"]))))
    return rules


def test_the_rules_each_account_sees_for_itself(applied):
    agent = applied.token_for("connmon", "connmon-agent")
    read = ("get", "list", "watch")
    for ns in ("default", "connmon", "connmon-job"):
        assert _own_rules(applied, agent, ns) == {(("",), "pods", read)}
    job = applied.token_for("connmon-job", "connmon-job")
    assert _own_rules(applied, job, "connmon-job") == {
        (("",), r, tuple(sorted(JOB_VERBS))) for r in JOB_RESOURCES
    }
    assert _own_rules(applied, job, "connmon") == set()
    exporter = applied.token_for("connmon", "connmon-exporter")
    assert _own_rules(applied, exporter, "connmon") == set()
