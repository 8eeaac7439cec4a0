"""Container and Kubernetes pod identity of a process, from files on the node.

``parse_cgroup`` reads a ``/proc/<pid>/cgroup`` text and names the container (runtime, 64-hex id)
and the pod uid it belongs to. ``PodDirectory`` turns a pod uid into namespace and name: from a
``PodSource`` first when one is given (the API server's watch, ``kubeapi.PodWatcher``, which
also knows labels), else from the kubelet's files (``/var/log/pods``, ``/var/lib/kubelet/pods``).
``workload_name`` drops the generated suffix of a pod name.

Cgroup layouts recognised, by path component (deepest container component wins):

- kubelet, systemd driver: ``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/``
  (no qos slice for Guaranteed pods; the uid's dashes become ``_``), then
  ``cri-containerd-<id>.scope``, ``crio-<id>.scope`` or ``docker-<id>.scope``; with
  ``--cgroup-root`` the slices get a prefix (kind: ``kubelet-kubepods-...``).
- kubelet, cgroupfs driver: ``/kubepods[/<qos>]/pod<uid>/<id>`` (containerd, docker) or
  ``.../pod<uid>/crio-<id>`` (CRI-O).
- containerd's old ``systemd_cgroup`` option on cgroup v1:
  ``/system.slice/containerd.service/kubepods-<qos>-pod<uid>.slice:cri-containerd:<id>``.
- docker: ``/docker/<id>``, ``/system.slice/docker-<id>.scope``; podman: ``libpod-<id>.scope``
  (``machine.slice``, rootless ``user.slice``), ``/libpod_parent/libpod-<id>``.
- a process in a pod's cgroup but in no container cgroup (directly in the pod slice, or CRI-O's
  ``crio-conmon-<id>.scope`` monitor) gives a pod-only reference.

Static pods have a 32-hex uid (an md5 of the manifest), kept as is.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

_HEX64 = r"[0-9a-f]{64}"
_UID_DASHED = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UID_SYSTEMD = r"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_UID_STATIC = r"[0-9a-f]{32}"

# Container components, tried in order; group 1 is the id.
_CONTAINER_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"cri-containerd-({_HEX64})\.scope"), "containerd"),
    (re.compile(rf"crio-({_HEX64})(?:\.scope)?"), "cri-o"),
    (re.compile(rf"docker-({_HEX64})\.scope"), "docker"),
    (re.compile(rf"libpod-({_HEX64})(?:\.scope)?"), "podman"),
)
# "<pod slice>:cri-containerd:<id>": the pod slice and the container share one component.
_COLON_CONTAINERD = ":cri-containerd:"
_COLON_POD = re.compile(rf"(?:.+-)?pod({_UID_SYSTEMD}|{_UID_STATIC})(?:\.slice)?")
_BARE_ID = re.compile(_HEX64)
_POD_CGROUPFS = re.compile(rf"pod({_UID_DASHED}|{_UID_STATIC})")
_POD_SYSTEMD = re.compile(rf"(?:.+-)?pod({_UID_SYSTEMD}|{_UID_STATIC})\.slice")

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_POD_UID = re.compile(rf"{_UID_DASHED}|{_UID_STATIC}")


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """Where a process runs: container runtime and id, and the Kubernetes pod uid if any."""

    runtime: str | None  # "containerd", "cri-o", "docker", "podman"; None when not known
    container_id: str | None  # 64 hex
    pod_uid: str | None  # dashed form, or 32 hex for static pods

    @property
    def short_id(self) -> str | None:
        """The 12-hex id that ``docker ps`` / ``crictl ps`` show."""
        return self.container_id[:12] if self.container_id else None

    @property
    def label(self) -> str | None:
        """The events' ``container`` field: "<pod-uid>/<short-id>", the short id alone outside
        pods, or the pod uid alone for a process in no container."""
        if self.pod_uid and self.short_id:
            return f"{self.pod_uid}/{self.short_id}"
        return self.short_id or self.pod_uid


def _pod_uid(component: str) -> str | None:
    m = _POD_CGROUPFS.fullmatch(component) or _POD_SYSTEMD.fullmatch(component)
    return m.group(1).replace("_", "-") if m else None


def _container(parts: list[str], i: int) -> tuple[str | None, str, str | None] | None:
    """(runtime, id, pod uid found in the same component) if ``parts[i]`` names a container."""
    part = parts[i]
    for pattern, runtime in _CONTAINER_PATTERNS:
        m = pattern.fullmatch(part)
        if m:
            return runtime, m.group(1), None
    if _COLON_CONTAINERD in part:
        prefix, _, cid = part.rpartition(_COLON_CONTAINERD)
        if not _BARE_ID.fullmatch(cid):
            return None
        m = _COLON_POD.fullmatch(prefix)
        return "containerd", cid, m.group(1).replace("_", "-") if m else None
    if _BARE_ID.fullmatch(part) and i > 0:
        # A bare id is a container only where a runtime puts one: under /docker/ or a pod cgroup.
        parent = parts[i - 1]
        if parent == "docker":
            return "docker", part, None
        if _pod_uid(parent):
            return None, part, None
    return None


def parse_cgroup_path(path: str) -> ContainerRef | None:
    """Container and pod named by one cgroup path; None when it names neither."""
    # A reader in its own cgroup namespace sees paths outside it as "/../../<rest>".
    parts = [p for p in path.strip().split("/") if p and p not in (".", "..")]
    runtime: str | None = None
    cid: str | None = None
    uid: str | None = None
    end = len(parts)
    for i in range(len(parts) - 1, -1, -1):
        found = _container(parts, i)
        if found:
            runtime, cid, uid = found
            end = i
            break
    if uid is None:
        for j in range(end - 1, -1, -1):
            uid = _pod_uid(parts[j])
            if uid:
                break
    if cid is None and uid is None:
        return None
    return ContainerRef(runtime=runtime, container_id=cid, pod_uid=uid)


def parse_cgroup(text: str) -> ContainerRef | None:
    """Container and pod of a process from its ``/proc/<pid>/cgroup`` text.

    The cgroup v2 line (``0::<path>``) is preferred when it names a container, else the first v1
    line (``N:controllers:<path>``) that does; a path that only names a pod comes after those.
    None outside containers and pods, and when a cgroup namespace hides the path (``0::/``).
    """
    v2: ContainerRef | None = None
    v1: list[ContainerRef] = []
    for line in text.splitlines():
        fields = line.split(":", 2)  # the path itself may hold ':' (":cri-containerd:")
        if len(fields) != 3:
            continue
        ref = parse_cgroup_path(fields[2])
        if ref is None:
            continue
        if fields[0] == "0" and fields[1] == "":
            v2 = ref
        else:
            v1.append(ref)
    candidates = [r for r in (v2, *v1) if r is not None]
    for ref in candidates:
        if ref.container_id:
            return ref
    return candidates[0] if candidates else None


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str
    # (key, value) sorted by key: only from the API server, only the keys app rules name.
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, key: str) -> str | None:
        """The value of label ``key``; None when the pod has no such label (or it is unknown)."""
        for k, v in self.labels:
            if k == key:
                return v
        return None


class PodSource(Protocol):
    """Where pods are looked up before the node's files (``kubeapi.PodWatcher``)."""

    def lookup(self, uid: str) -> PodRef | None: ...


def parse_log_dir_name(name: str) -> PodRef | None:
    """PodRef from a kubelet pod log directory name, ``<namespace>_<name>_<uid>``.

    Neither part can hold ``_`` (namespaces are DNS labels, pod names DNS subdomains), so the
    split is unambiguous. The pre-1.14 layout (the uid alone) gives None.
    """
    fields = name.split("_")
    if len(fields) != 3:
        return None
    namespace, pod, uid = fields
    if not (
        _DNS_LABEL.fullmatch(namespace)
        and _DNS_SUBDOMAIN.fullmatch(pod)
        and _POD_UID.fullmatch(uid)
    ):
        return None
    return PodRef(uid=uid, namespace=namespace, name=pod)


_HOSTS_HEADER = "# Kubernetes-managed hosts file."
_HOSTS_ALIASES = "# Entries added by HostAliases."
_HOSTS_FIXED = {"localhost", "ip6-localhost", "ip6-loopback", "ip6-localnet", "ip6-mcastprefix"}
_HOSTS_FIXED |= {"ip6-allnodes", "ip6-allrouters"}


def parse_etc_hosts(text: str) -> str | None:
    """The pod's hostname from the kubelet-written ``etc-hosts`` of a pod.

    The kubelet writes its header, the fixed localhost/ip6 lines, one ``<ip>\\t<hostname>`` line per
    pod IP (``<ip>\\t<hostname>.<subdomain>...\\t<hostname>`` with a subdomain), then any
    hostAliases under their own comment. Host-network pods get the node's hosts file under a
    different header: None for those, as for anything else not written this way.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != _HOSTS_HEADER:
        return None
    for line in lines[1:]:
        line = line.strip()
        if line == _HOSTS_ALIASES:
            break
        if not line or line.startswith("#"):
            continue
        names = line.split()[1:]
        if names and not _HOSTS_FIXED.intersection(names):
            return names[-1]
    return None


def parse_namespace_file(text: str) -> str | None:
    """The namespace in a service-account volume's ``namespace`` file (no newline is written)."""
    value = text.strip()
    return value if _DNS_LABEL.fullmatch(value) else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(65536)
    except OSError:
        return None


class PodDirectory:
    """Pod uid -> PodRef from ``api`` when it knows the pod, else from the node's files, cached.

    ``api`` is asked first on every lookup (it is kept current by its own watch). File sources,
    in order: the pod log directory names under ``log_root`` (listed again when a uid is
    not in the last listing), then the pod's directory under ``<kubelet_root>/pods/<uid>``
    (hostname from ``etc-hosts``, namespace from the service-account volume). A resolved uid
    stays cached (least recently used dropped past ``max_entries``); a miss is retried at most
    every ``retry_s`` seconds of ``clock``.
    """

    def __init__(
        self,
        log_root: str | os.PathLike[str] = "/var/log/pods",
        kubelet_root: str | os.PathLike[str] = "/var/lib/kubelet",
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_entries: int = 4096,
        api: PodSource | None = None,
    ) -> None:
        self.api = api
        self.log_root = os.fspath(log_root)
        self.kubelet_root = os.fspath(kubelet_root)
        self.retry_s = retry_s
        self.clock = clock
        self.max_entries = max_entries
        self._found: OrderedDict[str, PodRef] = OrderedDict()
        self._missed: OrderedDict[str, float] = OrderedDict()
        self._index: dict[str, PodRef] = {}
        self.listings = 0  # log_root listings, for tests

    def lookup(self, uid: str) -> PodRef | None:
        """Namespace and name of the pod with this uid (dashed or systemd-escaped); None if
        neither the API nor the node's files say."""
        uid = uid.strip().lower().replace("_", "-")
        if self.api is not None:
            ref = self.api.lookup(uid)
            if ref is not None:
                return ref
        ref = self._found.get(uid)
        if ref is not None:
            self._found.move_to_end(uid)
            return ref
        now = self.clock()
        missed_at = self._missed.get(uid)
        if missed_at is not None and now - missed_at < self.retry_s:
            return None
        ref = self._index.get(uid)
        if ref is None:
            self._refresh_index()
            ref = self._index.get(uid) or self._from_kubelet_dir(uid)
        if ref is None:
            self._missed[uid] = now
            self._missed.move_to_end(uid)
            while len(self._missed) > self.max_entries:
                self._missed.popitem(last=False)
            return None
        self._missed.pop(uid, None)
        self._found[uid] = ref
        while len(self._found) > self.max_entries:
            self._found.popitem(last=False)
        return ref

    def _refresh_index(self) -> None:
        self.listings += 1
        try:
            names = os.listdir(self.log_root)
        except OSError:  # not a Kubernetes node, or the directory is not mounted
            names = []
        index: dict[str, PodRef] = {}
        for name in names:
            ref = parse_log_dir_name(name)
            if ref is not None:
                index[ref.uid] = ref
        self._index = index

    def _from_kubelet_dir(self, uid: str) -> PodRef | None:
        if not _POD_UID.fullmatch(uid):
            return None  # never build paths from anything but a uid
        pod_dir = os.path.join(self.kubelet_root, "pods", uid)
        hosts = _read(os.path.join(pod_dir, "etc-hosts"))
        name = parse_etc_hosts(hosts) if hosts is not None else None
        if name is None:
            return None
        volumes = os.path.join(pod_dir, "volumes")
        patterns = (
            "kubernetes.io~projected/kube-api-access-*/namespace",
            "kubernetes.io~secret/*-token-*/namespace",  # before bound tokens (Kubernetes < 1.22)
        )
        for pattern in patterns:
            for path in sorted(glob.glob(os.path.join(glob.escape(volumes), pattern))):
                text = _read(path)
                namespace = parse_namespace_file(text) if text is not None else None
                if namespace:
                    return PodRef(uid=uid, namespace=namespace, name=name)
        return None


# k8s.io/apimachinery/pkg/util/rand: rand.String draws from this alphabet (no vowels).
_RAND = "bcdfghjklmnpqrstvwxz2456789"
# A ReplicaSet's pod-template-hash is rand.SafeEncodeString of the decimal FNV-32a hash: each
# digit '0'..'9' (48..57) maps to _RAND[ord % 27], which only ever yields these ten characters.
_HASH = "456789bcdf"
_DEPLOYMENT_POD = re.compile(rf"(.+)-[{_HASH}]{{6,10}}-[{_RAND}]{{5}}")
_CRONJOB_POD = re.compile(rf"(.+)-[1-9][0-9]{{7,}}-[{_RAND}]{{5}}")
_GENERATED_POD = re.compile(rf"(.+)-[{_RAND}]{{5}}")
_STATEFULSET_POD = re.compile(r"(.+)-(?:0|[1-9][0-9]*)")
_MAX_NAME = 63  # names.SimpleNameGenerator: the prefix is cut to 58 chars, then 5 random ones
_MAX_PREFIX = 58


def workload_name(pod_name: str) -> str:
    """Name of the workload that owns a pod, guessed from the pod's name alone.

    Rules, first match wins:

    1. Deployment ``<name>-<pod-template-hash>-<5 random>`` -> ``<name>``. The hash is 6 to 10
       characters of ``456789bcdf`` (the only output of ``SafeEncodeString`` on decimal digits);
       the random part is 5 characters of ``bcdfghjklmnpqrstvwxz2456789``.
    2. CronJob ``<name>-<scheduled minute, 8+ digits>-<5 random>`` -> ``<name>``, so that every
       run of a CronJob counts as one workload.
    3. ``generateName`` pods (DaemonSet, bare ReplicaSet, Job) ``<name>-<5 random>`` -> ``<name>``.
    4. StatefulSet ``<name>-<ordinal>`` (a number without leading zeros) -> ``<name>``:
       ``kafka-0`` is pod 0 of ``kafka``.
    5. A 63-character name whose generated prefix was cut at 58 characters (the ``-`` before the
       random part lost): the random tail and any trailing ``-`` are dropped.

    Anything else is returned unchanged (``payments-api``, static pods ``<name>-<node>``). Names
    are only names: a last segment that happens to look generated (``web-https``, 5 consonants)
    or numeric (``redis-6379``) is cut too.
    """
    for pattern in (_DEPLOYMENT_POD, _CRONJOB_POD, _GENERATED_POD, _STATEFULSET_POD):
        m = pattern.fullmatch(pod_name)
        if m:
            return m.group(1)
    if len(pod_name) == _MAX_NAME and all(c in _RAND for c in pod_name[_MAX_PREFIX:]):
        return pod_name[:_MAX_PREFIX].rstrip("-.") or pod_name
    return pod_name
