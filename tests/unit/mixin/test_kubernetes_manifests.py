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
from streaming.exporter import config as exporter_config
from streaming.job.cli import settings_from_args
from streaming.mixin import build, kubernetes
from streaming.mixin.config import DEFAULT

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
                    "namespace": kust["namespace"],
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
    assert kust["namespace"] == DEFAULT.kubernetes_namespace


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
    assert sorted(host.values()) == [
        "/sys/kernel/tracing",
        "/var/lib/kubelet/pods",
        "/var/log/pods",
    ]
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
        assert c[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
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
        {"kind": "ServiceAccount", "name": "connmon-job", "namespace": DEFAULT.kubernetes_namespace}
    ]
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
        api = set(DEFAULT.kubernetes_api_ports) if name == "connmon-agent" else set()
        assert egress_ports == {53, *DEFAULT.kafka_ports, *api}


def test_job_reaches_kafka_the_api_server_and_its_checkpoint_storage() -> None:
    egress = _by("NetworkPolicy", "connmon-job")["spec"]["egress"]
    ports = {p["port"] for e in egress for p in e.get("ports", [])}
    assert ports == {53, *DEFAULT.kafka_ports, 443, 6443}
    job_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "connmon-job"}}}
    assert {"to": [job_pods]} in egress
    assert _by("NetworkPolicy", "connmon-job")["spec"]["ingress"] == [{"from": [job_pods]}]


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
    ns = DEFAULT.kubernetes_namespace
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


def test_agent_arguments_and_config_parse(tmp_path: Path) -> None:
    from streaming.agent import config as agent_config

    args = _expand(_container(AGENT)["args"], {"NODE_NAME": "node-1"})
    ns = build_parser().parse_args(_with_config(args, tmp_path, "connmon-agent"))
    cfg = agent_config.load(
        ns.config, {"host": ns.host, "metrics_address": ns.metrics_address}, environ={}
    )
    assert cfg.host == "node-1"
    assert cfg.metrics_address == f"0.0.0.0:{DEFAULT.agent_port}"
    assert cfg.bootstrap_servers == DEFAULT.kafka_bootstrap_servers
    assert [c.name for c in cfg.clusters] == [DEFAULT.kafka_cluster_name]
    assert cfg.network_namespaces == "all"  # pods' sockets, without the host network
    assert cfg.kubernetes.api == "auto" and cfg.kubernetes.node_name is None  # NODE_NAME
    # The commented example of label rules in the file is a valid rule.
    text = CONFIGMAPS["connmon-agent"]["data"]["agent.yaml"]
    example = "\n".join(ln[2:] for ln in text.splitlines() if ln.startswith("#   "))
    rules = agent_config.build({**yaml.safe_load(example), "cluster_bootstrap": ["h:1"]}).apps
    assert [r.label_key for r in rules] == ["app.kubernetes.io/name"]


def test_exporter_arguments_and_config_parse() -> None:
    assert CONFIGMAPS["connmon-exporter"]["data"] == kubernetes.exporter_env(DEFAULT)
    cfg = DEFAULT.replace(exporter_shards=3)
    (sts,) = [d for d in kubernetes.manifests(cfg)["exporter.yaml"] if d["kind"] == "StatefulSet"]
    for ordinal in range(sts["spec"]["replicas"]):
        pod_env = {**kubernetes.exporter_env(cfg), "POD_NAME": f"connmon-exporter-{ordinal}"}
        ns = build_parser().parse_args(_expand(_container(sts)["args"], pod_env))
        conf = exporter_config.build(
            bootstrap_servers=ns.bootstrap_servers,
            listen=ns.listen,
            series_limit=ns.series_limit,
            staleness_s=ns.staleness,
            finding_staleness_s=ns.finding_staleness,
            shards=ns.shards,
            shard_index=ns.shard_index,
        )
        assert (conf.listen_host, conf.listen_port) == ("0.0.0.0", DEFAULT.exporter_port)
        assert conf.bootstrap_servers == DEFAULT.kafka_bootstrap_servers
        assert conf.series_limit == DEFAULT.exporter_series_limit
        # Every pod serves its own shard of as many as there are pods.
        assert (conf.shard.index, conf.shard.count) == (ordinal, 3)


def test_job_arguments_and_config_parse(tmp_path: Path) -> None:
    args = _container(DRIVER)["args"]
    job_args = args[args.index(kubernetes.SPARK_MAIN) + 1 :]
    ns = build_parser().parse_args(_with_config(job_args, tmp_path, "connmon-job"))
    settings = settings_from_args(ns)
    assert settings.master == "k8s://https://kubernetes.default.svc"
    assert not settings.local
    assert settings.checkpoint == DEFAULT.job_checkpoint
    assert settings.bootstrap_servers == DEFAULT.kafka_bootstrap_servers


# ---- settings flow through --------------------------------------------------------------------
def test_settings_reach_every_object() -> None:
    cfg = DEFAULT.replace(
        kubernetes_namespace="obs",
        image="reg.example/connmon:9",
        job_checkpoint="hdfs://nn/connmon",
        job_s3_endpoint="http://minio.obs.svc:9000",
    )
    objs = [o for objects in kubernetes.manifests(cfg).values() for o in objects]
    for obj in objs:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "obs"
        elif obj["kind"] == "ClusterRoleBinding":
            assert obj["subjects"][0]["namespace"] == "obs"
    assert {
        _container(o)["image"]
        for o in objs
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
    } == {"reg.example/connmon:9"}
    conf = kubernetes.spark_defaults(cfg)
    assert conf["spark.driver.host"] == "connmon-job-driver.obs.svc"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio.obs.svc:9000"
    assert kubernetes.job_config(cfg)["job"]["checkpoint"] == "hdfs://nn/connmon"
    assert kubernetes.kustomization(cfg, ["a.yaml"])["namespace"] == "obs"
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[0], strict=True)
