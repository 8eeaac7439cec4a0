"""The security policy of the generated Kubernetes objects (deploy/kubernetes/README.md says
why each rule): no privileged container, SYS_ADMIN for the agent alone, no host folder holding
credentials, no NetworkPolicy open to every address, Kafka over SASL_SSL everywhere, /metrics
scraped over https, and no pod-creating Role where privileged pods are admitted.

``problems`` is pure: the objects and the parsed component configs in, one line per breach out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

# Host folders no pod may mount, nor a parent of them: the kubelet's state (its client
# certificate, every pod's volumes), the control plane's configuration and keys, root's home.
SENSITIVE_HOST_PATHS = ("/var/lib/kubelet", "/etc/kubernetes", "/root")
# Every pod's volumes, Secrets included: the agent may read it only without the API watch.
KUBELET_PODS = "/var/lib/kubelet/pods"
OPEN_CIDRS = frozenset({"0.0.0.0/0", "::/0"})
KAFKA_PROTOCOL = "SASL_SSL"
# The one container that may hold CAP_SYS_ADMIN: (kind, name, container).
AGENT_CONTAINER = ("DaemonSet", "connmon-agent", "agent")
WORKLOADS = ("DaemonSet", "Deployment", "StatefulSet", "Pod")


def host_path_problem(path: str, api_watch: bool) -> str | None:
    """Why the agent must not mount this host folder, or None. ``api_watch``: the agent names
    pods from the API server, so the kubelet's pod folders are not needed."""
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts:
        return f"{path!r} is not an absolute path without '..'"
    pods = PurePosixPath(KUBELET_PODS)
    if p.is_relative_to(pods):
        if api_watch:
            return (
                f"{path} holds every pod's volumes, Secrets included; with the API watch on "
                "(agent_kubernetes_api) the agent names pods without it"
            )
        return None
    for sensitive in map(PurePosixPath, SENSITIVE_HOST_PATHS):
        if sensitive.is_relative_to(p):
            return f"{path} is or contains {sensitive}"
        if p.is_relative_to(sensitive):
            return f"{path} is inside {sensitive}"
    return None


def problems(
    objects: Iterable[Mapping[str, Any]],
    agent_config: Mapping[str, Any],
    job_config: Mapping[str, Any],
) -> list[str]:
    """One line per breach of the policy in ``objects`` (the manifests, the ServiceMonitors and
    the executor pod template) and the agent's and the job's config files."""
    objs = list(objects)
    api_watch = str((agent_config.get("kubernetes") or {}).get("api", "auto")) != "off"
    return [
        *_container_problems(objs, api_watch),
        *_network_problems(objs),
        *_kafka_problems(objs, agent_config, job_config),
        *_metrics_problems(objs),
        *_role_problems(objs),
    ]


def _name(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj.get('metadata', {}).get('name', 'template')}"


def _pod_specs(objs: list[Mapping[str, Any]]) -> Iterator[tuple[Mapping[str, Any], dict]]:
    for obj in objs:
        if obj.get("kind") == "Pod":
            yield obj, obj["spec"]
        elif obj.get("kind") in WORKLOADS:
            yield obj, obj["spec"]["template"]["spec"]


def _containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def _container_problems(objs: list[Mapping[str, Any]], api_watch: bool) -> Iterator[str]:
    for obj, spec in _pod_specs(objs):
        for c in _containers(spec):
            where = f"{_name(obj)}/{c['name']}"
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                yield f"{where}: privileged"
            added = set((sc.get("capabilities") or {}).get("add", []))
            is_agent = (obj["kind"], obj.get("metadata", {}).get("name"), c["name"])
            if added & {"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL"} and is_agent != AGENT_CONTAINER:
                yield f"{where}: adds {', '.join(sorted(added))}; only the agent has SYS_ADMIN"
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                problem = host_path_problem(volume["hostPath"]["path"], api_watch)
                if problem:
                    yield f"{_name(obj)}: hostPath volume {volume['name']}: {problem}"


def _network_problems(objs: list[Mapping[str, Any]]) -> Iterator[str]:
    for obj in objs:
        if obj.get("kind") != "NetworkPolicy":
            continue
        for direction, peers_key in (("ingress", "from"), ("egress", "to")):
            for i, rule in enumerate(obj["spec"].get(direction, [])):
                where = f"{_name(obj)}: {direction}[{i}]"
                peers = rule.get(peers_key) or []
                ports = {p.get("port") for p in rule.get("ports") or []}
                # Without peers a rule admits every address: only DNS may (a node-local
                # cache listens on a link-local address).
                if not peers and (not ports or ports != {53}):
                    yield f"{where}: no {peers_key} (every address) on ports {sorted(ports)}"
                for peer in peers:
                    cidr = (peer.get("ipBlock") or {}).get("cidr")
                    if cidr in OPEN_CIDRS:
                        yield f"{where}: ipBlock {cidr} is every address"


def _flag_pairs(args: Iterable[str], flag: str) -> dict[str, str]:
    """``--flag=KEY=VALUE`` and ``--flag KEY=VALUE`` items of a container's arguments."""
    out: dict[str, str] = {}
    items = list(args)
    for i, arg in enumerate(items):
        if arg.startswith(f"{flag}="):
            pair = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(items):
            pair = items[i + 1]
        else:
            continue
        key, _, value = pair.partition("=")
        out[key] = value
    return out


def _args_of(objs: list[Mapping[str, Any]], kind: str, name: str) -> list[str]:
    for obj, spec in _pod_specs(objs):
        if obj["kind"] == kind and obj.get("metadata", {}).get("name") == name:
            return [a for c in spec["containers"] for a in c.get("args", [])]
    return []


def _servers(value: Any) -> set[str]:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    return {str(v).strip() for v in items if str(v).strip()}


def _kafka_problems(
    objs: list[Mapping[str, Any]], agent: Mapping[str, Any], job: Mapping[str, Any]
) -> Iterator[str]:
    driver_args = _args_of(objs, "Deployment", "connmon-job")
    settings: dict[str, Mapping[str, Any]] = {
        "agent kafka": agent.get("kafka") or {},
        "job kafka": {**(job.get("kafka") or {}), **_flag_pairs(driver_args, "--kafka-option")},
        "job producer": {
            **(job.get("producer") or {}),
            **_flag_pairs(driver_args, "--producer-option"),
        },
        "exporter --kafka-config": _flag_pairs(
            _args_of(objs, "StatefulSet", "connmon-exporter"), "--kafka-config"
        ),
    }
    home = _servers((agent.get("kafka") or {}).get("bootstrap.servers"))
    for cluster in agent.get("clusters") or []:
        # Without its own settings, the producer's cluster is read with the producer's.
        own = cluster.get("kafka") or {}
        if not own and _servers(cluster.get("bootstrap_servers")) == home:
            continue
        settings[f"agent clusters.{cluster.get('name')}.kafka"] = own
    for where, conf in settings.items():
        protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
        if protocol != KAFKA_PROTOCOL:
            yield f"{where}: security.protocol is {protocol}, not {KAFKA_PROTOCOL}"


def _metrics_problems(objs: list[Mapping[str, Any]]) -> Iterator[str]:
    for obj in objs:
        if obj.get("kind") != "ServiceMonitor":
            continue
        for i, endpoint in enumerate(obj["spec"].get("endpoints", [])):
            where = f"{_name(obj)}: endpoints[{i}]"
            if str(endpoint.get("scheme", "http")).lower() != "https":
                yield f"{where}: scheme {endpoint.get('scheme', 'http')}, not https"
            if (endpoint.get("tlsConfig") or {}).get("insecureSkipVerify"):
                yield f"{where}: insecureSkipVerify"


def _role_problems(objs: list[Mapping[str, Any]]) -> Iterator[str]:
    strict: dict[str, bool] = {}  # namespace -> admits no privileged pod
    for o in objs:
        if o.get("kind") == "Namespace":
            level = o["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
            name = o["metadata"]["name"]
            strict[name] = strict.get(name, True) and level in ("baseline", "restricted")
    for obj in objs:
        if obj.get("kind") != "Role":
            continue
        creates_pods = any(
            {"pods", "*"} & set(rule.get("resources", []))
            and {"create", "*"} & set(rule.get("verbs", []))
            for rule in obj.get("rules", [])
        )
        ns = obj["metadata"].get("namespace")
        if creates_pods and not strict.get(ns, False):
            yield (
                f"{_name(obj)}: creates pods in namespace {ns}, whose Pod Security level "
                "admits privileged pods (or is not among the objects)"
            )
