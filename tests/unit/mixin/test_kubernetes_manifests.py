"""The generated Kubernetes objects (deploy/kubernetes/): valid against Kubernetes' own schemas
(kubernetes-validate, offline), the Prometheus Operator's objects against the published CRD
schemas, the security properties a reviewer checks, the configs parsed by connmon's own
loaders, and a kustomization that lists exactly the generated files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

import streaming
from streaming.cli import build_parser
from streaming.errors import ConfigError
from streaming.exporter import cli as exporter_cli
from streaming.exporter import config as exporter_config
from streaming.job.cli import settings_from_args
from streaming.metricnames import AGENT_JOB, EXPORTER_JOB
from streaming.mixin import build, kubernetes
from streaming.mixin.config import DEFAULT, MixinConfig, with_settings
from streaming.options import env_settings

ROOT = build.ROOT
KDIR = ROOT / "deploy" / "kubernetes"
# Oldest Kubernetes release the manifests target, and the newest kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.30", "1.37")
CRD_KINDS = {"PrometheusRule", "ServiceMonitor", "AlertmanagerConfig"}


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifest_files() -> list[Path]:
    kust = yaml.safe_load((KDIR / "kustomization.yaml").read_text())
    return [KDIR / name for name in kust["resources"]]


OBJECTS = [obj for path in _manifest_files() for obj in _load(path)]
TEMPLATE = _load(KDIR / "config" / "executor-pod-template.yaml")[0]


def _by(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


AGENT = _by("DaemonSet", "connmon-agent")
AGENT_SA = "connmon-agent"
EXPORTER = _by("StatefulSet", "connmon-exporter")
DRIVER = _by("Deployment", "connmon-job")
WORKLOADS = [AGENT, EXPORTER, DRIVER]
RESTRICTED_PODS = {"exporter": EXPORTER, "job driver": DRIVER, "job executor": TEMPLATE}


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    containers = _pod_spec(obj)["containers"]
    assert len(containers) == 1
    return containers[0]


def generated_configmaps() -> list[dict[str, Any]]:
    """The ConfigMaps ``kubectl apply -k`` generates from config/ (before the name hash)."""
    kust = yaml.safe_load((KDIR / "kustomization.yaml").read_text())
    out = []
    for gen in kust["configMapGenerator"]:
        data: dict[str, str] = {}
        for rel in gen.get("files", []):
            data[Path(rel).name] = (KDIR / rel).read_text()
        for rel in gen.get("envs", []):
            for line in (KDIR / rel).read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    key, _, value = line.partition("=")
                    data[key] = value
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": gen["name"],
                    "namespace": gen["namespace"],
                    "labels": kust["generatorOptions"]["labels"],
                },
                "data": data,
            }
        )
    return out


CONFIGMAPS = {cm["metadata"]["name"]: cm for cm in generated_configmaps()}


# ---- schemas --------------------------------------------------------------------------------
SCHEMA_OBJECTS = [o for o in OBJECTS if o["kind"] not in CRD_KINDS]
SCHEMA_OBJECTS += [TEMPLATE, *CONFIGMAPS.values()]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "obj", SCHEMA_OBJECTS, ids=lambda o: f"{o['kind']}/{o['metadata'].get('name', 'template')}"
)
def test_object_validates_against_the_kubernetes_schema(obj: dict, version: str) -> None:
    """Strict: an unknown field (a typo) fails too, not only a wrong type."""
    kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_catches_mistakes() -> None:
    bad = kubernetes.agent_daemonset(DEFAULT)
    _container(bad)["securityContext"]["capabilites"] = {"add": ["SYS_ADMIN"]}
    with pytest.raises(kubernetes_validate.ValidationError, match="capabilites"):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)
    bad = kubernetes.exporter_statefulset(DEFAULT)
    bad["spec"]["replicas"] = "one"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)


# The parts of the Prometheus Operator's CRD schemas (monitoring.coreos.com/v1, operator
# v0.93.0, example/prometheus-operator-crd/) that connmon's objects use, with the complete
# property lists at each level they fill, so a misspelt field fails here instead of being
# pruned by the API server.
_DURATION = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OBJECT_META = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STR_MAP},
}
PROMETHEUS_RULE_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "labels": _STR_MAP,
                            "limit": {"type": "integer"},
                            "partial_response_strategy": {"type": "string"},
                            "query_offset": {"type": "string", "pattern": _DURATION},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": ["string", "integer"]},
                                        "for": {"type": "string", "pattern": _DURATION},
                                        "keep_firing_for": {"type": "string", "pattern": _DURATION},
                                        "labels": _STR_MAP,
                                        "annotations": _STR_MAP,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}
_SERVICE_MONITOR_SPEC_FIELDS = (  # noqa: SIM905 (the CRD's field list, compact)
    "attachMetadata bodySizeLimit convertClassicHistogramsToNHCB endpoints "
    "fallbackScrapeProtocol jobLabel keepDroppedTargets labelLimit labelNameLengthLimit "
    "labelValueLengthLimit namespaceSelector nativeHistogramBucketLimit "
    "nativeHistogramMinBucketFactor podTargetLabels sampleLimit scrapeClass "
    "scrapeClassicHistograms scrapeNativeHistograms scrapeProtocols selector selectorMechanism "
    "serviceDiscoveryRole targetLabels targetLimit"
).split()
_ENDPOINT_FIELDS = (  # noqa: SIM905
    "authorization basicAuth bearerTokenFile bearerTokenSecret enableHttp2 filterRunning "
    "followRedirects honorLabels honorTimestamps interval metricRelabelings noProxy oauth2 "
    "params path port proxyConnectHeader proxyFromEnvironment proxyUrl relabelings scheme "
    "scrapeTimeout targetPort tlsConfig trackTimestampsStaleness"
).split()
_TLS_CONFIG_FIELDS = (  # noqa: SIM905 (the endpoint's TLSConfig, compact)
    "ca caFile cert certFile insecureSkipVerify keyFile keySecret maxVersion minVersion serverName"
).split()
_SECRET_KEY = {
    "type": "object",
    "required": ["key"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "key": {"type": "string"},
        "optional": {"type": "boolean"},
    },
}
_TLS_CONFIG = {
    "type": "object",
    "propertyNames": {"enum": _TLS_CONFIG_FIELDS},
    "properties": {
        "ca": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"secret": _SECRET_KEY, "configMap": _SECRET_KEY},
        },
        "serverName": {"type": "string"},
        "insecureSkipVerify": {"type": "boolean"},
    },
}
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object",
            "required": ["endpoints", "selector"],
            "propertyNames": {"enum": _SERVICE_MONITOR_SPEC_FIELDS},
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
                },
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "propertyNames": {"enum": _ENDPOINT_FIELDS},
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                            "tlsConfig": _TLS_CONFIG,
                        },
                    },
                },
            },
        },
    },
}
# monitoring.coreos.com/v1alpha1 AlertmanagerConfig (operator v0.93.1): the route's fields
# (child routes are the same type), a matcher's, an inhibit rule's, a webhook receiver's.
_MATCHER = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "value": {"type": "string"},
        "matchType": {"enum": ["!=", "=", "=~", "!~"]},
        "regex": {"type": "boolean"},
    },
}
_AM_ROUTE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "receiver": {"type": "string"},
        "groupBy": {"type": "array", "items": {"type": "string"}},
        "groupWait": {"type": "string", "pattern": _DURATION},
        "groupInterval": {"type": "string", "pattern": _DURATION},
        "repeatInterval": {"type": "string", "pattern": _DURATION},
        "matchers": {"type": "array", "items": _MATCHER},
        "continue": {"type": "boolean"},
        "routes": {"type": "array", "items": {"$ref": "#/$defs/route"}},
        "muteTimeIntervals": {"type": "array"},
        "activeTimeIntervals": {"type": "array"},
    },
}
_WEBHOOK_FIELDS = ["sendResolved", "url", "urlSecret", "httpConfig", "maxAlerts", "timeout"]
ALERTMANAGER_CONFIG_SCHEMA = {
    "$defs": {"route": _AM_ROUTE},
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1alpha1"},
        "kind": {"const": "AlertmanagerConfig"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "route": {"$ref": "#/$defs/route"},
                "receivers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "webhookConfigs": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "propertyNames": {"enum": _WEBHOOK_FIELDS},
                                    "properties": {
                                        "url": {"type": "string", "pattern": "^https?://.+$"}
                                    },
                                },
                            },
                        },
                    },
                },
                "inhibitRules": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "equal": {"type": "array", "items": {"type": "string"}},
                            "sourceMatch": {"type": "array", "items": _MATCHER},
                            "targetMatch": {"type": "array", "items": _MATCHER},
                        },
                    },
                },
                "muteTimeIntervals": {"type": "array"},
            },
        },
    },
}
CRD_SCHEMAS = {
    "PrometheusRule": PROMETHEUS_RULE_SCHEMA,
    "ServiceMonitor": SERVICE_MONITOR_SCHEMA,
    "AlertmanagerConfig": ALERTMANAGER_CONFIG_SCHEMA,
}


@pytest.mark.parametrize(
    "obj", [o for o in OBJECTS if o["kind"] in CRD_KINDS], ids=lambda o: o["metadata"]["name"]
)
def test_operator_object_validates_against_its_crd_schema(obj: dict) -> None:
    jsonschema.Draft202012Validator(CRD_SCHEMAS[obj["kind"]]).validate(obj)
    assert obj["metadata"]["namespace"] == DEFAULT.kubernetes_namespace


def test_crd_schema_catches_a_misspelt_field() -> None:
    bad = kubernetes.service_monitors(DEFAULT)[0]
    bad["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.Draft202012Validator(SERVICE_MONITOR_SCHEMA).validate(bad)
    bad = kubernetes.service_monitors(DEFAULT)[0]
    bad["spec"]["endpoints"][0]["tlsConfig"]["servername"] = "x"
    with pytest.raises(jsonschema.ValidationError, match="servername"):
        jsonschema.Draft202012Validator(SERVICE_MONITOR_SCHEMA).validate(bad)


# ---- the kustomization ----------------------------------------------------------------------
def test_kustomization_lists_exactly_the_generated_files() -> None:
    kust = yaml.safe_load((KDIR / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    for gen in kust["configMapGenerator"]:
        listed |= set(gen.get("files", [])) | set(gen.get("envs", []))
    generated = {
        rel.removeprefix("deploy/kubernetes/")
        for rel in build.render()
        if rel.startswith("deploy/kubernetes/")
    } - {"kustomization.yaml"}
    assert listed == generated
    on_disk = {str(p.relative_to(KDIR)) for p in KDIR.rglob("*") if p.is_file()}
    assert on_disk - {"kustomization.yaml", "README.md"} == generated
    assert len(kust["resources"]) == len(listed & set(kust["resources"]))  # no duplicates
    # The objects are in two namespaces: kustomize must not move them into one.
    assert "namespace" not in kust
    namespaces = {gen["name"]: gen["namespace"] for gen in kust["configMapGenerator"]}
    assert namespaces == {
        "connmon-agent": DEFAULT.kubernetes_namespace,
        "connmon-exporter": DEFAULT.kubernetes_namespace,
        "connmon-job": DEFAULT.job_namespace,
    }


def _kustomize() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def test_kustomize_builds_what_the_schemas_accept() -> None:
    """The real kustomize (``kubectl kustomize``, offline): every rendered object validates,
    and the workloads refer to the generated ConfigMaps by their hashed names."""
    cmd = _kustomize()
    if cmd is None:
        pytest.skip("neither kustomize nor kubectl is installed; the checks above still ran")
    proc = subprocess.run([*cmd, str(KDIR)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    plain = {(o["kind"], o["metadata"]["name"]) for o in OBJECTS}
    hashed = {n for k, n in names if k == "ConfigMap"}
    assert names - {("ConfigMap", n) for n in hashed} == plain
    assert {re.sub(r"-[a-z0-9]{10}$", "", n) for n in hashed} == set(CONFIGMAPS)
    for obj in rendered:
        if obj["kind"] in CRD_KINDS:
            jsonschema.Draft202012Validator(CRD_SCHEMAS[obj["kind"]]).validate(obj)
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[0], strict=True)
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            spec = _pod_spec(obj)
            refs = {v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
            refs |= {
                e["configMapRef"]["name"]
                for e in spec["containers"][0].get("envFrom", [])
                if "configMapRef" in e
            }
            assert refs and refs <= hashed, obj["metadata"]["name"]


def test_every_configmap_a_pod_uses_is_generated_and_every_generated_one_is_used() -> None:
    used = set()
    for obj in WORKLOADS:
        spec = _pod_spec(obj)
        used |= {v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v}
        for c in spec["containers"]:
            used |= {e["configMapRef"]["name"] for e in c.get("envFrom", []) if "configMapRef" in e}
    assert used == set(CONFIGMAPS)


def test_every_service_selects_pods_of_a_workload() -> None:
    pod_labels = [obj["spec"]["template"]["metadata"]["labels"] for obj in WORKLOADS]
    for svc in (o for o in OBJECTS if o["kind"] == "Service"):
        sel = svc["spec"]["selector"]
        assert any(sel.items() <= lab.items() for lab in pod_labels), svc["metadata"]["name"]
    for obj in WORKLOADS:
        match = obj["spec"]["selector"]["matchLabels"]
        assert match.items() <= obj["spec"]["template"]["metadata"]["labels"].items()


def test_service_monitors_find_a_metrics_port_on_their_services() -> None:
    for sm in (o for o in OBJECTS if o["kind"] == "ServiceMonitor"):
        name = sm["metadata"]["name"]
        svc = _by("Service", name)
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        port_names = {p["name"] for p in svc["spec"]["ports"]}
        assert {e["port"] for e in sm["spec"]["endpoints"]} <= port_names == {"metrics"}
        workload = AGENT if name == "connmon-agent" else EXPORTER
        assert [p["name"] for p in _container(workload)["ports"]] == ["metrics"]


def test_service_monitors_give_the_job_label_the_rules_select() -> None:
    """The operator takes the job label from the Service's ``jobLabel`` label; the alert and
    recording rules and the dashboards select on exactly those values."""
    jobs = set()
    for sm in (o for o in OBJECTS if o["kind"] == "ServiceMonitor"):
        svc = _by("Service", sm["metadata"]["name"])
        jobs.add(svc["metadata"]["labels"][sm["spec"]["jobLabel"]])
    assert jobs == {AGENT_JOB, EXPORTER_JOB}
    assert DEFAULT.exporter_selector == f'job="{EXPORTER_JOB}"'
    assert DEFAULT.agent_selector == f'job="{AGENT_JOB}"'


# ---- the agent ------------------------------------------------------------------------------
def test_agent_sees_every_process_without_being_privileged() -> None:
    spec = _pod_spec(AGENT)
    sc = _container(AGENT)["securityContext"]
    assert spec["hostPID"] is True
    assert spec["hostNetwork"] is False  # it enters pods' network namespaces through /proc
    assert not spec.get("hostIPC")
    assert sc["privileged"] is False
    assert sc["capabilities"] == {
        "drop": ["ALL"],
        "add": ["SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"],
    }
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # The API server rejects allowPrivilegeEscalation=false together with SYS_ADMIN.
    assert "allowPrivilegeEscalation" not in sc


def test_agent_mounts_only_the_pod_folders_and_tracefs_and_only_read_only() -> None:
    spec = _pod_spec(AGENT)
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    # Not /var/lib/kubelet/pods (every pod's Secrets): the API watch names the pods.
    assert sorted(host.values()) == ["/sys/kernel/tracing", "/var/log/pods"]
    # No kubelet check: a node without the folder still runs the agent, which reports it.
    assert {v["hostPath"]["type"] for v in spec["volumes"] if "hostPath" in v} == {""}
    for mount in _container(AGENT)["volumeMounts"]:
        if mount["name"] in host:
            assert mount["readOnly"] is True
            assert mount["mountPath"] == host[mount["name"]]
            assert "mountPropagation" not in mount
        elif mount["name"] == "config":
            assert mount["readOnly"] is True


def test_agent_runs_on_every_node_with_its_node_name_as_host() -> None:
    spec = _pod_spec(AGENT)
    c = _container(AGENT)
    assert spec["tolerations"] == [{"operator": "Exists"}]  # every taint, every effect
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node_name in c["env"]
    assert "--host=$(NODE_NAME)" in c["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics", "scheme": "HTTPS"}
    assert set(c["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(c["resources"]["requests"]) & set(c["resources"]["limits"])


def test_agent_host_network_is_a_setting() -> None:
    spec = _pod_spec(kubernetes.agent_daemonset(DEFAULT.replace(agent_host_network=True)))
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"


# ---- everything else: the restricted Pod Security Standard ------------------------------------
@pytest.mark.parametrize("name", sorted(RESTRICTED_PODS))
def test_pod_meets_the_restricted_pod_security_standard(name: str) -> None:
    spec = _pod_spec(RESTRICTED_PODS[name])
    for key in ("hostPID", "hostIPC", "hostNetwork"):
        assert not spec.get(key), key
    assert not [v for v in spec.get("volumes", []) if "hostPath" in v]
    pod_sc = spec["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == DEFAULT.image_uid != 0
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["privileged"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert not c.get("ports") or all("hostPort" not in p for p in c["ports"])


def test_only_the_agent_is_root_and_only_it_shares_host_namespaces() -> None:
    for obj in WORKLOADS:
        spec = _pod_spec(obj)
        shares = spec.get("hostPID") or spec.get("hostNetwork") or spec.get("hostIPC")
        assert bool(shares) == (obj is AGENT)
        assert not _container(obj)["securityContext"].get("privileged")


# ---- RBAC -----------------------------------------------------------------------------------
def test_rbac_is_the_job_drivers_role_and_the_agents_pod_reader() -> None:
    cluster_wide = [o for o in OBJECTS if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    assert [(o["kind"], o["metadata"]["name"]) for o in cluster_wide] == [
        ("ClusterRole", "connmon-agent"),
        ("ClusterRoleBinding", "connmon-agent"),
    ]
    roles = [o for o in OBJECTS if o["kind"] == "Role"]
    bindings = [o for o in OBJECTS if o["kind"] == "RoleBinding"]
    assert [r["metadata"]["name"] for r in roles] == ["connmon-job"]
    assert [b["metadata"]["name"] for b in bindings] == ["connmon-job"]
    assert bindings[0]["subjects"] == [
        {"kind": "ServiceAccount", "name": "connmon-job", "namespace": DEFAULT.job_namespace}
    ]
    assert roles[0]["metadata"]["namespace"] == bindings[0]["metadata"]["namespace"]
    assert roles[0]["metadata"]["namespace"] == DEFAULT.job_namespace
    assert bindings[0]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "connmon-job",
    }


def test_job_role_verbs_are_limited() -> None:
    rules = _by("Role", "connmon-job")["rules"]
    resources = sorted(r for rule in rules for r in rule["resources"])
    assert resources == ["configmaps", "pods", "services"]
    for rule in rules:
        assert rule["apiGroups"] == [""]
        assert rule["verbs"] == ["get", "list", "watch", "create", "delete", "deletecollection"]
        assert "resourceNames" not in rule
    flat = {v for rule in rules for v in rule["verbs"] + rule["resources"] + rule["apiGroups"]}
    assert not flat & {"*", "secrets", "update", "patch", "escalate", "bind", "impersonate"}


def test_exporter_has_no_api_access_and_no_token() -> None:
    bindings = ("RoleBinding", "ClusterRoleBinding")
    bound = {s["name"] for b in OBJECTS if b["kind"] in bindings for s in b["subjects"]}
    sa = _by("ServiceAccount", "connmon-exporter")
    assert sa["automountServiceAccountToken"] is False
    assert sa["metadata"]["name"] not in bound
    spec = _pod_spec(EXPORTER)
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    assert TEMPLATE["spec"]["automountServiceAccountToken"] is False  # executors: no token


def test_agent_may_only_read_pods() -> None:
    """Least privilege: get, list and watch on pods, nothing else (RBAC cannot narrow it to
    one node's pods; the agent's requests do)."""
    role = _by("ClusterRole", "connmon-agent")
    assert "namespace" not in role["metadata"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = _by("ClusterRoleBinding", "connmon-agent")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "connmon-agent",
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "connmon-agent",
            "namespace": DEFAULT.kubernetes_namespace,
        }
    ]
    spec = _pod_spec(AGENT)
    assert spec["serviceAccountName"] == "connmon-agent"
    assert spec["automountServiceAccountToken"] is True
    assert _by("ServiceAccount", "connmon-agent")["automountServiceAccountToken"] is True
    # The node's name for the field selector comes from the downward API.
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node_name in _container(AGENT)["env"]


def test_agent_without_the_api_has_no_token_no_role_and_no_api_egress() -> None:
    cfg = DEFAULT.replace(agent_kubernetes_api=False)
    objs = [o for objects in kubernetes.manifests(cfg).values() for o in objects]
    assert not {o["kind"] for o in objs} & {"ClusterRole", "ClusterRoleBinding"}
    agent = next(o for o in objs if o["kind"] == "DaemonSet")
    assert _pod_spec(agent)["automountServiceAccountToken"] is False
    sa = next(
        o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == AGENT_SA
    )
    assert sa["automountServiceAccountToken"] is False
    policy = next(
        o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == AGENT_SA
    )
    assert {p["port"] for e in policy["spec"]["egress"] for p in e["ports"]} == {
        53,
        *DEFAULT.kafka_ports,
    }
    assert kubernetes.agent_config(cfg)["kubernetes"] == {"api": "off"}
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[0], strict=True)


# ---- network policies -----------------------------------------------------------------------
def test_every_pod_is_behind_a_policy_that_denies_what_it_does_not_allow() -> None:
    policies = [o for o in OBJECTS if o["kind"] == "NetworkPolicy"]
    for pod_labels in [o["spec"]["template"]["metadata"]["labels"] for o in WORKLOADS] + [
        TEMPLATE["metadata"]["labels"]
    ]:
        covering = [
            p
            for p in policies
            if p["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
        ]
        assert len(covering) == 1, pod_labels
        assert covering[0]["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_only_prometheus_scrapes_the_agent_and_the_exporter() -> None:
    for name, port in (("connmon-agent", 9852), ("connmon-exporter", 9853)):
        (rule,) = _by("NetworkPolicy", name)["spec"]["ingress"]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
        (peer,) = rule["from"]
        assert peer == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
        egress_ports = {
            p["port"] for e in _by("NetworkPolicy", name)["spec"]["egress"] for p in e["ports"]
        }
        # No API server rule until kubernetes_api_cidrs names its addresses.
        assert egress_ports == {53, *DEFAULT.kafka_ports}


def test_job_reaches_dns_kafka_and_its_own_pods_until_the_cidrs_are_set() -> None:
    egress = _by("NetworkPolicy", "connmon-job")["spec"]["egress"]
    ports = {p["port"] for e in egress for p in e.get("ports", [])}
    assert ports == {53, *DEFAULT.kafka_ports}
    job_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "connmon-job"}}}
    assert {"to": [job_pods]} in egress
    assert _by("NetworkPolicy", "connmon-job")["spec"]["ingress"] == [{"from": [job_pods]}]


def _policies(cfg: MixinConfig) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kubernetes.network_policies(cfg)}


def test_api_server_and_checkpoint_egress_go_to_the_configured_cidrs_only() -> None:
    cfg = DEFAULT.replace(
        kubernetes_api_cidrs=("10.0.0.10/32", "10.0.0.11/32"),
        job_checkpoint_cidrs=("192.168.50.0/24",),
        job_checkpoint_ports=(443, 9000),
        kafka_egress_cidrs=("10.20.0.0/16",),
    ).validate()
    policies = _policies(cfg)
    api = {
        "to": [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "10.0.0.11/32"}}],
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
    }
    storage = {
        "to": [{"ipBlock": {"cidr": "192.168.50.0/24"}}],
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 9000, "protocol": "TCP"}],
    }
    assert api in policies["connmon-agent"]["spec"]["egress"]
    assert api not in policies["connmon-exporter"]["spec"]["egress"]
    job_egress = policies["connmon-job"]["spec"]["egress"]
    assert api in job_egress and storage in job_egress
    kafka = {"ipBlock": {"cidr": "10.20.0.0/16"}}
    for policy in policies.values():
        assert any(kafka in e.get("to", []) for e in policy["spec"]["egress"])
        kubernetes_validate.validate(policy, KUBERNETES_VERSIONS[0], strict=True)


def test_no_egress_rule_without_peers_but_dns() -> None:
    """An empty ``to`` admits every address: a setting left empty drops its rule instead."""
    cfg = DEFAULT.replace(kafka_namespace="", kafka_egress_cidrs=())
    for policy in _policies(cfg).values():
        for rule in policy["spec"]["egress"]:
            assert rule.get("to") or {p["port"] for p in rule["ports"]} == {53}, rule


# ---- the job --------------------------------------------------------------------------------
def _spark_defaults() -> dict[str, str]:
    text = CONFIGMAPS["connmon-job"]["data"]["spark-defaults.conf"]
    pairs = [ln.split(None, 1) for ln in text.splitlines() if ln and not ln.startswith("#")]
    return {k: v for k, v in pairs}


def test_job_driver_is_one_spark_submit_in_client_mode_on_kubernetes() -> None:
    assert DRIVER["spec"]["replicas"] == 1
    assert DRIVER["spec"]["strategy"] == {"type": "Recreate"}
    args = _container(DRIVER)["args"]
    assert args[0] == "spark-submit"
    opts = dict(zip(args[1:], args[2:], strict=False))
    assert opts["--master"] == "k8s://https://kubernetes.default.svc"
    assert opts["--deploy-mode"] == "client"
    assert opts["--properties-file"] == "/etc/connmon/spark-defaults.conf"
    assert _pod_spec(DRIVER)["serviceAccountName"] == "connmon-job"


def test_executors_find_the_driver_through_its_headless_service() -> None:
    conf = _spark_defaults()
    svc = _by("Service", "connmon-job-driver")
    assert svc["spec"]["clusterIP"] == "None"
    ns = DEFAULT.job_namespace
    assert conf["spark.driver.host"] == f"{svc['metadata']['name']}.{ns}.svc"
    assert conf["spark.kubernetes.namespace"] == ns
    svc_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert svc_ports == {
        "driver-rpc": int(conf["spark.driver.port"]),
        "blockmanager": int(conf["spark.driver.blockManager.port"]),
    }
    container_ports = {p["name"]: p["containerPort"] for p in _container(DRIVER)["ports"]}
    assert svc_ports.items() <= container_ports.items()


def test_executors_run_the_same_image_from_the_generated_pod_template() -> None:
    c = _container(DRIVER)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SPARK_EXECUTOR_IMAGE"] == c["image"] == DEFAULT.image
    assert "spark.kubernetes.container.image=$(SPARK_EXECUTOR_IMAGE)" in c["args"]
    assert "spark.kubernetes.driver.pod.name=$(POD_NAME)" in c["args"]
    conf = _spark_defaults()
    template = conf["spark.kubernetes.executor.podTemplateFile"]
    assert Path(template).parent.as_posix() == "/etc/connmon"
    assert Path(template).name in CONFIGMAPS["connmon-job"]["data"]
    assert (
        conf["spark.kubernetes.executor.podTemplateContainerName"]
        == (TEMPLATE["spec"]["containers"][0]["name"])
    )
    assert all(k.startswith("spark.") for k in conf)


def test_every_container_runs_the_configured_image() -> None:
    for obj in WORKLOADS:
        assert _container(obj)["image"] == DEFAULT.image
    assert DEFAULT.image.endswith(f":{streaming.__version__}")


def test_image_user_matches_the_containerfile() -> None:
    text = (ROOT / "deploy" / "container" / "Containerfile").read_text()
    assert f"USER {DEFAULT.image_uid}:{DEFAULT.image_uid}" in text
    assert f"--uid {DEFAULT.image_uid}" in text


# ---- the configs, read by connmon's own loaders ---------------------------------------------
def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' ``$(VAR)`` expansion of container arguments."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def _with_config(args: list[str], tmp_path: Path, configmap: str) -> list[str]:
    """Arguments with the mounted config folder pointing at the ConfigMap's files."""
    for key, text in CONFIGMAPS[configmap]["data"].items():
        (tmp_path / key).write_text(text)
    return [a.replace("/etc/connmon", str(tmp_path)) for a in args]


# What the Secrets hold in these tests ("=" in a password must survive KEY=VALUE flags).
SECRETS = {
    f"connmon-{c}-kafka": {"username": f"connmon-{c}", "password": f"{c}=pw", "ca.crt": "CA"}
    for c in ("agent", "exporter", "job")
}
# A Strimzi KafkaUser Secret carries the JAAS line too; the job's Java clients read it.
SECRETS["connmon-job-kafka"]["sasl.jaas.config"] = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="connmon-job" '
    'password="job=pw";'
)
SECRET_ROOT = "/var/run/secrets/connmon"


@pytest.fixture(scope="module")
def mounted_secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Secrets' files as the pods see them under SECRET_ROOT: a real certificate and key
    for /metrics (the loaders open them), the Kafka CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the /metrics certificate")
    root = tmp_path_factory.mktemp("secrets")
    (root / "metrics-tls").mkdir()
    (root / "kafka").mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=connmon-agent.connmon.svc",
         "-keyout", str(root / "metrics-tls" / "tls.key"),
         "-out", str(root / "metrics-tls" / "tls.crt")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    shutil.copy(root / "metrics-tls" / "tls.crt", root / "kafka" / "ca.crt")
    return root


def _with_secrets(args: list[str], root: Path) -> list[str]:
    return [a.replace(SECRET_ROOT, str(root)) for a in args]


def _secret_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment variables that come from Secrets, with SECRETS' values."""
    out = {}
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            out[var["name"]] = SECRETS[ref["name"]][ref["key"]]
    return out


def test_every_secret_reference_is_the_components_own() -> None:
    """Each pod reads only its own component's Kafka Secret (and only the CA as a file), and
    the /metrics certificate."""
    pods = {"agent": AGENT, "exporter": EXPORTER, "job": DRIVER, "job executor": TEMPLATE}
    for name, obj in pods.items():
        component = name.split()[0]
        spec = _pod_spec(obj)
        c = _container(obj)
        refs = {
            (v["valueFrom"]["secretKeyRef"]["name"], v["valueFrom"]["secretKeyRef"]["key"])
            for v in c.get("env", [])
            if "secretKeyRef" in v.get("valueFrom", {})
        }
        expected = {
            "agent": {"username", "password"},
            "exporter": {"username", "password"},
            "job": {"username", "password", "sasl.jaas.config"},
            "job executor": set(),
        }[name]
        assert refs == {(f"connmon-{component}-kafka", k) for k in expected}, name
        secrets = {
            v["secret"]["secretName"]: [i["key"] for i in v["secret"]["items"]]
            for v in spec["volumes"]
            if "secret" in v
        }
        tls = {"connmon-metrics-tls": ["tls.crt", "tls.key"]} if component != "job" else {}
        assert secrets == {f"connmon-{component}-kafka": ["ca.crt"], **tls}, name
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        for v in spec["volumes"]:
            if "secret" in v:
                assert mounts[v["name"]]["readOnly"] is True
                assert mounts[v["name"]]["mountPath"].startswith(SECRET_ROOT + "/")


def test_agent_arguments_and_config_parse(tmp_path: Path, mounted_secrets: Path) -> None:
    from streaming.agent import config as agent_config

    c = _container(AGENT)
    args = _expand(c["args"], {"NODE_NAME": "node-1"})
    ns = build_parser().parse_args(
        _with_secrets(_with_config(args, tmp_path, "connmon-agent"), mounted_secrets)
    )
    flags = {
        "host": ns.host,
        "metrics_address": ns.metrics_address,
        "tls_cert_file": ns.tls_cert_file,
        "tls_key_file": ns.tls_key_file,
    }
    cfg = agent_config.load(ns.config, flags, environ=_secret_env(c))
    assert cfg.host == "node-1"
    assert cfg.metrics_address == f"0.0.0.0:{DEFAULT.agent_port}"
    assert cfg.metrics_security.tls_cert_file == str(mounted_secrets / "metrics-tls" / "tls.crt")
    assert cfg.bootstrap_servers == DEFAULT.kafka_bootstrap_servers
    assert cfg.kafka == {
        "bootstrap.servers": DEFAULT.kafka_bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "ssl.ca.location": f"{SECRET_ROOT}/kafka/ca.crt",
        "sasl.username": "connmon-agent",
        "sasl.password": "agent=pw",
    }
    assert [c.name for c in cfg.clusters] == [DEFAULT.kafka_cluster_name]
    # The cluster's metadata client authenticates as the producer does.
    metadata = cfg.metadata_client(cfg.clusters[0])
    assert metadata["security.protocol"] == "SASL_SSL"
    assert metadata["sasl.password"] == "agent=pw"
    assert "agent=pw" not in " ".join(args)
    assert cfg.network_namespaces == "all"  # pods' sockets, without the host network
    assert cfg.kubernetes.api == "auto" and cfg.kubernetes.node_name is None  # NODE_NAME
    # The commented example of label rules in the file is a valid rule.
    text = CONFIGMAPS["connmon-agent"]["data"]["agent.yaml"]
    example = "\n".join(ln[2:] for ln in text.splitlines() if ln.startswith("#   "))
    rules = agent_config.build({**yaml.safe_load(example), "cluster_bootstrap": ["h:1"]}).apps
    assert [r.label_key for r in rules] == ["app.kubernetes.io/name"]


def test_exporter_arguments_and_config_parse(mounted_secrets: Path) -> None:
    assert CONFIGMAPS["connmon-exporter"]["data"] == kubernetes.exporter_env(DEFAULT)
    cfg = DEFAULT.replace(exporter_shards=3)
    (sts,) = [d for d in kubernetes.manifests(cfg)["exporter.yaml"] if d["kind"] == "StatefulSet"]
    for ordinal in range(sts["spec"]["replicas"]):
        pod_env = {
            **kubernetes.exporter_env(cfg),
            **_secret_env(_container(sts)),
            "POD_NAME": f"connmon-exporter-{ordinal}",
        }
        args = _with_secrets(_expand(_container(sts)["args"], pod_env), mounted_secrets)
        ns = build_parser().parse_args(args)
        conf = exporter_config.build(
            bootstrap_servers=ns.bootstrap_servers,
            listen=ns.listen,
            series_limit=ns.series_limit,
            staleness_s=ns.staleness,
            finding_staleness_s=ns.finding_staleness,
            shards=ns.shards,
            shard_index=ns.shard_index,
            tls_cert_file=ns.tls_cert_file,
            tls_key_file=ns.tls_key_file,
            kafka_config=ns.kafka_config,
            kafka_env=env_settings(pod_env, exporter_cli.KAFKA_ENV_PREFIX),
        )
        assert "exporter=pw" not in " ".join(args)  # never in a command line
        assert (conf.listen_host, conf.listen_port) == ("0.0.0.0", DEFAULT.exporter_port)
        assert conf.bootstrap_servers == DEFAULT.kafka_bootstrap_servers
        assert conf.series_limit == DEFAULT.exporter_series_limit
        assert conf.tls_key_file == str(mounted_secrets / "metrics-tls" / "tls.key")
        assert conf.kafka_config == {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "ssl.ca.location": str(mounted_secrets / "kafka" / "ca.crt"),
            "sasl.username": "connmon-exporter",
            "sasl.password": "exporter=pw",
        }
        # Every pod serves its own shard of as many as there are pods.
        assert (conf.shard.index, conf.shard.count) == (ordinal, 3)


def test_job_arguments_and_config_parse(tmp_path: Path, monkeypatch) -> None:
    c = _container(DRIVER)
    for name, value in _secret_env(c).items():
        monkeypatch.setenv(name, value)
    args = _expand(c["args"], _secret_env(c))
    assert "job=pw" not in " ".join(args)  # never in a command line
    job_args = args[args.index(kubernetes.SPARK_MAIN) + 1 :]
    ns = build_parser().parse_args(_with_config(job_args, tmp_path, "connmon-job"))
    settings = settings_from_args(ns)
    assert settings.master == "k8s://https://kubernetes.default.svc"
    assert not settings.local
    assert settings.checkpoint == DEFAULT.job_checkpoint
    assert settings.bootstrap_servers == DEFAULT.kafka_bootstrap_servers
    ca = f"{SECRET_ROOT}/kafka/ca.crt"
    assert settings.kafka == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": ca,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="connmon-job" password="job=pw";',
    }
    assert settings.producer == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "ssl.ca.location": ca,
        "sasl.username": "connmon-job",
        "sasl.password": "job=pw",
    }
    # The executors' Kafka clients find the same CA file.
    (mount,) = [
        m for m in TEMPLATE["spec"]["containers"][0]["volumeMounts"] if m["name"] == "kafka-ca"
    ]
    assert f"{mount['mountPath']}/ca.crt" == ca


# ---- settings flow through --------------------------------------------------------------------
def test_settings_reach_every_object() -> None:
    cfg = DEFAULT.replace(
        kubernetes_namespace="obs",
        job_namespace="obs-job",
        image="reg.example/connmon:9",
        job_checkpoint="hdfs://nn/connmon",
        job_s3_endpoint="http://minio.obs.svc:9000",
    ).validate()
    objs = [o for objects in kubernetes.manifests(cfg).values() for o in objects]
    for obj in objs:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            job = obj["metadata"]["name"].startswith("connmon-job")
            assert obj["metadata"]["namespace"] == ("obs-job" if job else "obs")
        elif obj["kind"] == "ClusterRoleBinding":
            assert obj["subjects"][0]["namespace"] == "obs"
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"} == {"obs", "obs-job"}
    for sm in kubernetes.service_monitors(cfg):
        assert sm["metadata"]["namespace"] == "obs"
        name = sm["metadata"]["name"]
        assert sm["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == f"{name}.obs.svc"
    assert {
        _container(o)["image"]
        for o in objs
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
    } == {"reg.example/connmon:9"}
    conf = kubernetes.spark_defaults(cfg)
    assert conf["spark.driver.host"] == "connmon-job-driver.obs-job.svc"
    assert conf["spark.kubernetes.namespace"] == "obs-job"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio.obs.svc:9000"
    assert kubernetes.job_config(cfg)["job"]["checkpoint"] == "hdfs://nn/connmon"
    generators = kubernetes.kustomization(cfg, ["a.yaml"])["configMapGenerator"]
    assert {g["name"]: g["namespace"] for g in generators} == {
        "connmon-agent": "obs",
        "connmon-exporter": "obs",
        "connmon-job": "obs-job",
    }
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[0], strict=True)


# ---- security settings ------------------------------------------------------------------------
def _objects(cfg: MixinConfig) -> list[dict[str, Any]]:
    objs = [o for objects in kubernetes.manifests(cfg).values() for o in objects]
    return [*objs, kubernetes.executor_pod_template(cfg)]


def _workload(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def test_namespaces_the_agents_admits_privileged_pods_the_jobs_only_restricted() -> None:
    levels = {
        o["metadata"]["name"]: o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for o in OBJECTS
        if o["kind"] == "Namespace"
    }
    assert levels == {
        DEFAULT.kubernetes_namespace: "privileged",
        DEFAULT.job_namespace: "restricted",
    }
    assert AGENT["metadata"]["namespace"] == EXPORTER["metadata"]["namespace"]
    assert DRIVER["metadata"]["namespace"] == DEFAULT.job_namespace
    assert _by("ServiceAccount", "connmon-job")["metadata"]["namespace"] == DEFAULT.job_namespace


@pytest.mark.parametrize("security", ["sasl_ssl", "ssl", "plaintext"])
def test_kafka_security_is_a_setting(security: str) -> None:
    cfg = DEFAULT.replace(kafka_security=security).validate()
    objs = _objects(cfg)
    protocol = {"sasl_ssl": "SASL_SSL", "ssl": "SSL", "plaintext": "PLAINTEXT"}[security]
    agent = kubernetes.agent_config(cfg)
    job = kubernetes.job_config(cfg)
    assert "kafka" not in agent["clusters"][0]  # the producer's settings serve it
    for conf in (agent["kafka"], job["kafka"], job["producer"]):
        assert conf["security.protocol"] == protocol
        assert ("ssl.ca.location" in conf or "ssl.truststore.location" in conf) == (
            security != "plaintext"
        )
    exporter_args = _container(_workload(objs, "StatefulSet"))["args"]
    assert f"--kafka-config=security.protocol={protocol}" in exporter_args
    for obj in objs:
        if obj["kind"] in ("DaemonSet", "StatefulSet", "Deployment", "Pod"):
            c = _container(obj)
            creds = [v for v in c.get("env", []) if "secretKeyRef" in v.get("valueFrom", {})]
            assert bool(creds) == (security == "sasl_ssl" and obj["kind"] != "Pod")
            ca = [v for v in _pod_spec(obj)["volumes"] if v["name"] == "kafka-ca"]
            assert bool(ca) == (security != "plaintext")
            # Credentials come from the environment: no argument carries one.
            assert not [a for a in c.get("args", []) if "sasl.username" in a or "jaas" in a]
        kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[0], strict=True)


def test_metrics_tls_off_is_plain_http() -> None:
    cfg = DEFAULT.replace(metrics_tls=False).validate()
    objs = _objects(cfg)
    for kind in ("DaemonSet", "StatefulSet"):
        c = _container(_workload(objs, kind))
        assert not [a for a in c["args"] if a.startswith("--tls-")]
        assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
        assert "metrics-tls" not in {m["name"] for m in c["volumeMounts"]}
    for sm in kubernetes.service_monitors(cfg):
        assert set(sm["spec"]["endpoints"][0]) == {"port", "interval", "path"}


def test_metrics_tls_is_on_by_default() -> None:
    for obj in (AGENT, EXPORTER):
        c = _container(obj)
        assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
        assert "--tls-cert-file=/var/run/secrets/connmon/metrics-tls/tls.crt" in c["args"]
    for sm in (o for o in OBJECTS if o["kind"] == "ServiceMonitor"):
        (endpoint,) = sm["spec"]["endpoints"]
        assert endpoint["scheme"] == "https"
        assert endpoint["tlsConfig"]["ca"] == {
            "secret": {"name": "connmon-metrics-tls", "key": "ca.crt"}
        }


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("Unconfined", {"type": "Unconfined"}),
        ("RuntimeDefault", {"type": "RuntimeDefault"}),
        ("Localhost/connmon-agent", {"type": "Localhost", "localhostProfile": "connmon-agent"}),
    ],
)
def test_agent_apparmor_profile_is_a_setting(setting: str, expected: dict[str, str]) -> None:
    agent = kubernetes.agent_daemonset(DEFAULT.replace(agent_apparmor_profile=setting).validate())
    assert _container(agent)["securityContext"]["appArmorProfile"] == expected
    kubernetes_validate.validate(agent, KUBERNETES_VERSIONS[0], strict=True)


def test_kubelet_pod_folders_only_without_the_api_watch() -> None:
    paths = ("/var/log/pods", "/var/lib/kubelet/pods")
    cfg = DEFAULT.replace(agent_kubernetes_api=False, agent_host_paths=paths).validate()
    spec = _pod_spec(kubernetes.agent_daemonset(cfg))
    assert {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v} >= set(paths)
    with pytest.raises(ConfigError, match=r"^agent_host_paths: /var/lib/kubelet/pods holds"):
        DEFAULT.replace(agent_host_paths=paths).validate()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kafka_security": "tls"}, r"^kafka_security: must be one of sasl_ssl, ssl, plaintext"),
        ({"kafka_sasl_mechanism": "PLAIN"}, r"^kafka_sasl_mechanism: must be one of"),
        ({"job_namespace": "connmon"}, r"^job_namespace: must differ from kubernetes_namespace"),
        ({"job_namespace": "Connmon_Job"}, r"^job_namespace: 'Connmon_Job' is not a namespace"),
        ({"kubernetes_api_cidrs": ("10.0.0.1/8",)}, r"^kubernetes_api_cidrs: '10.0.0.1/8' is not"),
        ({"job_checkpoint_cidrs": ("s3",)}, r"^job_checkpoint_cidrs: 's3' is not a CIDR"),
        ({"kafka_ports": (0,)}, r"^kafka_ports: 0 is not a port number"),
        ({"agent_host_paths": ("/",)}, r"^agent_host_paths: / is or contains /var/lib/kubelet"),
        ({"agent_host_paths": ("/etc/kubernetes/pki",)}, r"is inside /etc/kubernetes"),
        ({"agent_host_paths": ("var/log",)}, r"^agent_host_paths: 'var/log' is not an absolute"),
        ({"agent_tracefs": "/root"}, r"^agent_tracefs: /root is or contains /root"),
        ({"agent_apparmor_profile": "Localhost/"}, r"^agent_apparmor_profile: Unconfined,"),
        ({"metrics_tls_secret": ""}, r"^metrics_tls_secret: empty"),
    ],
)
def test_a_wrong_security_setting_fails_naming_it(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DEFAULT.replace(**changes).validate()


def test_command_line_settings_keep_ports_numbers() -> None:
    cfg = with_settings(
        DEFAULT,
        {"kubernetes_api_cidrs": "10.0.0.10/32, 10.0.0.11/32", "kafka_ports": "9093,9094"},
    )
    assert cfg.kubernetes_api_cidrs == ("10.0.0.10/32", "10.0.0.11/32")
    assert cfg.kafka_ports == (9093, 9094)
