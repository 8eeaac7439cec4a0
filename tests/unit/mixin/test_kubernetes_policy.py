"""The security policy (streaming/mixin/kubernetes_policy.py) holds for the manifests built from
the default MixinConfig and for deploy/kubernetes/ as shipped, and every rule flags an insecure
variant, so none of them passes by checking nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from streaming.mixin import check, kubernetes
from streaming.mixin.config import DEFAULT, MixinConfig
from streaming.mixin.kubernetes_policy import host_path_problem, problems

Objects = list[dict[str, Any]]


def _built(cfg: MixinConfig) -> tuple[Objects, dict[str, Any], dict[str, Any]]:
    """Everything the policy reads, built in memory: (objects, agent config, job config)."""
    objects = [o for objs in kubernetes.manifests(cfg).values() for o in objs]
    objects += [*kubernetes.service_monitors(cfg), kubernetes.executor_pod_template(cfg)]
    return objects, kubernetes.agent_config(cfg), kubernetes.job_config(cfg)


def _problems(cfg: MixinConfig, mutate: Callable[[Objects], None] | None = None) -> list[str]:
    objects, agent, job = _built(cfg)
    objects = copy.deepcopy(objects)
    if mutate:
        mutate(objects)
    return problems(objects, agent, job)


def _find(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"].get("name") == name]
    return obj


def _container(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    return _find(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]


def test_the_default_build_meets_the_policy() -> None:
    assert _problems(DEFAULT.validate()) == []


def test_the_shipped_manifests_meet_the_policy() -> None:
    assert check.kubernetes_policy_problems() == []


# ---- each rule flags what it forbids ---------------------------------------------------------
def test_flags_plaintext_kafka_in_every_component() -> None:
    found = _problems(DEFAULT.replace(kafka_security="plaintext"))
    assert found == [
        f"{where}: security.protocol is PLAINTEXT, not SASL_SSL"
        for where in (
            "agent kafka",
            "job kafka",
            "job producer",
            "exporter --kafka-config",
        )
    ]


def test_flags_another_cluster_read_without_its_own_security_settings() -> None:
    """Only the cluster the agent produces to shares the producer's settings."""

    objects, agent, job = _built(DEFAULT)
    agent = copy.deepcopy(agent)
    agent["clusters"].append({"name": "other", "bootstrap_servers": "other:9093"})
    assert problems(objects, agent, job) == [
        "agent clusters.other.kafka: security.protocol is PLAINTEXT, not SASL_SSL"
    ]


def test_flags_tls_without_sasl() -> None:
    found = _problems(DEFAULT.replace(kafka_security="ssl"))
    assert len(found) == 4 and all("security.protocol is SSL" in p for p in found)


def test_flags_an_argument_overriding_the_config_files_protocol() -> None:
    def override(objects: Objects) -> None:
        _container(objects, "Deployment", "connmon-job")["args"].append(
            "--kafka-option=security.protocol=PLAINTEXT"
        )

    assert _problems(DEFAULT, override) == [
        "job kafka: security.protocol is PLAINTEXT, not SASL_SSL"
    ]


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0"])
@pytest.mark.parametrize("setting", ["kubernetes_api_cidrs", "job_checkpoint_cidrs"])
def test_flags_an_egress_to_every_address(setting: str, cidr: str) -> None:
    found = _problems(DEFAULT.replace(**{setting: ("10.0.0.0/8", cidr)}))
    assert found and all(f"ipBlock {cidr} is every address" in p for p in found)
    assert any(p.startswith("NetworkPolicy/connmon-job: egress[") for p in found)


def test_flags_an_ingress_from_every_address() -> None:
    def open_ingress(objects: Objects) -> None:
        rule = _find(objects, "NetworkPolicy", "connmon-exporter")["spec"]["ingress"][0]
        rule["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})

    assert _problems(DEFAULT, open_ingress) == [
        "NetworkPolicy/connmon-exporter: ingress[0]: ipBlock 0.0.0.0/0 is every address"
    ]


def test_flags_a_rule_without_peers_unless_it_is_dns() -> None:
    def no_peers(objects: Objects) -> None:
        egress = _find(objects, "NetworkPolicy", "connmon-agent")["spec"]["egress"]
        egress.append({"ports": [{"port": 443, "protocol": "TCP"}]})

    assert _problems(DEFAULT, no_peers) == [
        "NetworkPolicy/connmon-agent: egress[2]: no to (every address) on ports [443]"
    ]


def test_flags_plain_http_metrics_and_unchecked_certificates() -> None:
    found = _problems(DEFAULT.replace(metrics_tls=False))
    assert found == [
        "ServiceMonitor/connmon-exporter: endpoints[0]: scheme http, not https",
        "ServiceMonitor/connmon-agent: endpoints[0]: scheme http, not https",
    ]

    def skip_verify(objects: Objects) -> None:
        sm = _find(objects, "ServiceMonitor", "connmon-agent")
        sm["spec"]["endpoints"][0]["tlsConfig"]["insecureSkipVerify"] = True

    assert _problems(DEFAULT, skip_verify) == [
        "ServiceMonitor/connmon-agent: endpoints[0]: insecureSkipVerify"
    ]


def test_flags_the_kubelet_pod_folders_while_the_api_watch_is_on() -> None:
    paths = ("/var/log/pods", "/var/lib/kubelet/pods")
    (found,) = _problems(DEFAULT.replace(agent_host_paths=paths))
    assert found.startswith(
        "DaemonSet/connmon-agent: hostPath volume host-1: /var/lib/kubelet/pods"
    )
    # Without the watch the agent names pods from them: allowed.
    assert _problems(DEFAULT.replace(agent_host_paths=paths, agent_kubernetes_api=False)) == []


@pytest.mark.parametrize(
    "path", ["/", "/var", "/var/lib/kubelet", "/var/lib/kubelet/pki", "/etc/kubernetes", "/root"]
)
def test_flags_host_folders_holding_credentials_whatever_the_api_watch(path: str) -> None:
    for api in (True, False):
        found = _problems(DEFAULT.replace(agent_host_paths=(path,), agent_kubernetes_api=api))
        assert len(found) == 1 and found[0].startswith(
            f"DaemonSet/connmon-agent: hostPath volume host-0: {path} "
        )


def test_flags_a_privileged_container() -> None:
    def privileged(objects: Objects) -> None:
        sc = _container(objects, "StatefulSet", "connmon-exporter")["securityContext"]
        sc["privileged"] = True

    assert _problems(DEFAULT, privileged) == ["StatefulSet/connmon-exporter/exporter: privileged"]


def test_flags_sys_admin_anywhere_but_the_agent() -> None:
    def sys_admin(objects: Objects) -> None:
        (pod,) = [o for o in objects if o["kind"] == "Pod"]  # the executors' template
        pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]

    assert _problems(DEFAULT, sys_admin) == [
        "Pod/template/executor: adds SYS_ADMIN; only the agent has SYS_ADMIN"
    ]
    agent = _container(_built(DEFAULT)[0], "DaemonSet", "connmon-agent")
    assert "SYS_ADMIN" in agent["securityContext"]["capabilities"]["add"]


def test_flags_a_pod_creating_role_where_privileged_pods_are_admitted() -> None:
    found = _problems(DEFAULT.replace(job_namespace=DEFAULT.kubernetes_namespace))
    assert found == [
        f"Role/connmon-job: creates pods in namespace {DEFAULT.kubernetes_namespace}, whose "
        "Pod Security level admits privileged pods (or is not among the objects)"
    ]

    def no_namespaces(objects: Objects) -> None:
        objects[:] = [o for o in objects if o["kind"] != "Namespace"]

    assert len(_problems(DEFAULT, no_namespaces)) == 1


# ---- host paths ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "api_watch", "allowed"),
    [
        ("/var/log/pods", True, True),
        ("/sys/kernel/tracing", True, True),
        ("/var/lib/kubelet/pods", False, True),
        ("/var/lib/kubelet/pods", True, False),
        ("/var/lib/kubelet/pods/abc/volumes", True, False),
        ("/var/lib/kubelet", False, False),
        ("/var/lib/kubelet/pki", False, False),
        ("/var/lib", False, False),
        ("/etc/kubernetes/admin.conf", False, False),
        ("/root/.kube", False, False),
        ("/", False, False),
        ("/var/log/pods/../../lib/kubelet", False, False),
        ("var/log/pods", False, False),
    ],
)
def test_host_path_problem(path: str, api_watch: bool, allowed: bool) -> None:
    assert (host_path_problem(path, api_watch) is None) == allowed
