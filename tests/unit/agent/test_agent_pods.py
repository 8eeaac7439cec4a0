"""Container/pod identity from /proc/<pid>/cgroup, pod names from the node's files, workloads."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streaming.agent.pods import (
    ContainerRef,
    PodDirectory,
    PodRef,
    parse_cgroup,
    parse_etc_hosts,
    parse_log_dir_name,
    parse_namespace_file,
    workload_name,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agent" / "pods"
CGROUPS = FIXTURES / "cgroup"
NODE = FIXTURES / "node"

# The ids written into the fixture files, spelled out here rather than read back.
C0 = "13ea3eaf8aab43ac9dfb5491c7268dea274f7c1e86be545d802a266606e3f21b"
C1 = "3e226ea205644fdc43a2bd51d221f79c7548cc0aa2ffb73d3727305c58e75886"
C2 = "7061a9d9a18af7c6bcaaea4cf89fa0ca781da13149f26dae100f71bd62f32448"
C3 = "9d55f97c72a3be0b184fadd5c9b63a4290c43afc5ad5df061ba08a5f1d00a6b4"
C4 = "151dc9a8e9cd4eaed590a7507b82b36bf86db7c24c6945432d77c91d23ba6a48"
C5 = "a58e4d35275b25244d6ac02be0c8e07e4590e22000f5126d892673de8e51b470"
C6 = "fdfd54419fa1ec04b75f8efbe75f092ba2e30da94184252adc1d892efa9b7d17"
C7 = "9f71009eca1822cfbb6fcb7ac795262066ae80bd653ead4b5422d81f7c04bdce"
U0 = "7f75dc3a-0200-4b22-8837-da11ee00f2e4"
U1 = "89487173-d074-4031-8a9e-d6ad26cbcacf"
U2 = "1e8357fc-cb2e-4d1e-aec4-9f250fdfe3cb"
U3 = "4b46abd0-fd88-4376-90bd-d68c48316c92"
U4 = "14f25e61-faf4-4aa2-99b9-dc41aa034a17"
U5 = "2d2b4d48-5b8d-4165-9907-e9233fc2673c"
STATIC = "645dd0f60f6e713bd57ea9b04f99f1d3"  # static pods: md5 of the manifest, no dashes


def ref(runtime: str | None, cid: str | None, uid: str | None) -> ContainerRef:
    return ContainerRef(runtime=runtime, container_id=cid, pod_uid=uid)


CGROUP_CASES = [
    ("v2_systemd_containerd_burstable", ref("containerd", C0, U0)),
    ("v2_systemd_containerd_guaranteed", ref("containerd", C1, U1)),
    ("v2_systemd_crio_besteffort", ref("cri-o", C2, U2)),
    ("v1_systemd_docker_hybrid", ref("docker", C3, U3)),
    ("v1_cgroupfs_containerd_burstable", ref(None, C4, U4)),
    ("v2_cgroupfs_guaranteed", ref(None, C5, U5)),
    ("v1_cgroupfs_crio_besteffort", ref("cri-o", C6, U0)),
    ("v1_containerd_systemd_cgroup_colon", ref("containerd", C7, U1)),
    ("v2_docker_systemd", ref("docker", C0, None)),
    ("v1_docker_cgroupfs_hybrid", ref("docker", C1, None)),
    ("v2_podman_rootless", ref("podman", C2, None)),
    ("v2_podman_machine_crun", ref("podman", C3, None)),
    ("v1_podman_cgroupfs", ref("podman", C4, None)),
    ("v2_pod_sandbox_pause", ref("containerd", C5, U3)),
    ("v2_pod_cgroup_only", ref(None, None, U2)),
    ("v2_crio_conmon", ref(None, None, U0)),
    ("v2_kind_nested", ref("containerd", C7, U4)),
    ("v2_cgroupns_relative", ref("containerd", C0, U5)),
    ("v2_cgroupns_same_pod", ref("containerd", C1, None)),
    ("v2_static_pod", ref("containerd", C2, STATIC)),
    ("v1_cgroupfs_static_pod", ref(None, C3, STATIC)),
]

CGROUP_NONE = [
    "none_user_session",
    "none_init_scope",
    "none_cgroupns_hidden",
    "none_containerd_service",
    "none_v1_host",
    "none_hex_in_service_name",
    "none_bare_hex_top_level",
    "none_bare_hex_under_system_slice",
    "none_kubepods_qos_slice",
    "none_short_id",
]


@pytest.mark.parametrize(("fixture", "expected"), CGROUP_CASES, ids=[c[0] for c in CGROUP_CASES])
def test_parse_cgroup_layouts(fixture: str, expected: ContainerRef) -> None:
    assert parse_cgroup((CGROUPS / fixture).read_text()) == expected


@pytest.mark.parametrize("fixture", CGROUP_NONE)
def test_parse_cgroup_not_a_container(fixture: str) -> None:
    assert parse_cgroup((CGROUPS / fixture).read_text()) is None


def test_every_cgroup_fixture_is_in_a_table() -> None:
    listed = {c[0] for c in CGROUP_CASES} | set(CGROUP_NONE)
    assert {p.name for p in CGROUPS.iterdir()} == listed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("not a cgroup file\n\n", None),
        ("0::\n", None),
        # v2 names only the pod, a v1 line names the container: the container wins.
        (
            f"0::/kubepods/pod{U0}\n4:memory:/kubepods/pod{U0}/{C0}\n",
            ref(None, C0, U0),
        ),
        # v2 names a container: it wins over a different v1 path.
        (
            f"1:name=systemd:/docker/{C1}\n0::/system.slice/docker-{C2}.scope\n",
            ref("docker", C2, None),
        ),
        # The first v1 line naming a container wins.
        (
            f"3:cpu:/docker/{C3}\n2:memory:/docker/{C4}\n",
            ref("docker", C3, None),
        ),
        # Pod uid belongs to the path above the chosen container, not to a deeper component.
        (
            f"0::/kubepods/pod{U1}/{C5}/init\n",
            ref(None, C5, U1),
        ),
        # An uppercase or truncated uid is not a kubelet pod cgroup.
        (f"0::/kubepods/pod{U2.upper()}/{C6}\n", None),
        (f"0::/kubepods/pod{U2[:-1]}/{C6}\n", None),
        # 64 hex after an unknown runtime prefix is not guessed at.
        (f"0::/system.slice/nerdctl-{C7}.scope\n", None),
        (f"0::/kubepods.slice/whatever:cri-containerd:{C7[:-1]}\n", None),
    ],
)
def test_parse_cgroup_inline(text: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize(
    ("value", "short", "label"),
    [
        (ref("containerd", C0, U0), "13ea3eaf8aab", f"{U0}/13ea3eaf8aab"),
        (ref("docker", C1, None), "3e226ea20564", "3e226ea20564"),
        (ref(None, None, U2), None, U2),
    ],
)
def test_short_id_and_label(value: ContainerRef, short: str | None, label: str | None) -> None:
    assert value.short_id == short
    assert value.label == label


def test_label_names_pod_and_container() -> None:
    cid = "3f" * 32
    docker = parse_cgroup(f"0::/system.slice/docker-{cid}.scope\n")
    assert docker is not None and docker.label == cid[:12]
    k8s = parse_cgroup(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"1a2b3c4d_0000_1111_2222_333344445555.slice/cri-containerd-{cid}.scope\n"
    )
    assert k8s is not None and k8s.label == f"1a2b3c4d-0000-1111-2222-333344445555/{cid[:12]}"
    assert parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"kafka_kafka-0_{U0}", PodRef(U0, "kafka", "kafka-0")),
        (
            f"kube-system_kube-apiserver-node1_{STATIC}",
            PodRef(STATIC, "kube-system", "kube-apiserver-node1"),
        ),
        (f"default_web.v1-x7k2p_{U1}", PodRef(U1, "default", "web.v1-x7k2p")),
        (U4, None),  # pre-1.14 layout
        (f"a_b_c_{U0}", None),
        (f"kafka_kafka-0_{U0[:-1]}", None),
        (f"Kafka_kafka-0_{U0}", None),
        (f"_kafka-0_{U0}", None),
        (f"kafka__{U0}", None),
        ("", None),
    ],
)
def test_parse_log_dir_name(name: str, expected: PodRef | None) -> None:
    assert parse_log_dir_name(name) == expected


HOSTS_FIXED = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (HOSTS_FIXED + "10.244.0.5\tkafka-client-0\n", "kafka-client-0"),
        (
            HOSTS_FIXED + "10.244.0.6\tkafka-1.kafka-headless.kafka.svc.cluster.local\tkafka-1\n",
            "kafka-1",
        ),
        (
            HOSTS_FIXED
            + "10.244.0.7\tworker-2\nfd00::7\tworker-2\n"
            + "\n# Entries added by HostAliases.\n10.0.0.1\tfoo.local\tbar.local\n",
            "worker-2",
        ),
        # No pod IP yet: only the fixed lines and aliases; the alias is not the hostname.
        (HOSTS_FIXED + "\n# Entries added by HostAliases.\n10.0.0.1\tfoo.local\n", None),
        (
            "# Kubernetes-managed hosts file (host network).\n"
            "127.0.0.1 localhost\n10.0.0.4 node1\n",
            None,
        ),
        ("127.0.0.1 localhost\n10.0.0.4 node1\n", None),
        ("", None),
    ],
)
def test_parse_etc_hosts(text: str, expected: str | None) -> None:
    assert parse_etc_hosts(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("payments", "payments"), ("kube-system\n", "kube-system"), ("", None), ("Bad_NS", None)],
)
def test_parse_namespace_file(text: str, expected: str | None) -> None:
    assert parse_namespace_file(text) == expected


def node_directory(
    root: Path,
    retry_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    max_entries: int = 4096,
) -> PodDirectory:
    return PodDirectory(
        log_root=root / "var" / "log" / "pods",
        kubelet_root=root / "var" / "lib" / "kubelet",
        retry_s=retry_s,
        clock=clock,
        max_entries=max_entries,
    )


@pytest.mark.parametrize(
    ("uid", "expected"),
    [
        (U0, PodRef(U0, "kafka", "kafka-0")),
        (U1, PodRef(U1, "payments", "payments-api-7d9c8b6f5d-x7k2p")),
        (U1.replace("-", "_"), PodRef(U1, "payments", "payments-api-7d9c8b6f5d-x7k2p")),
        (STATIC, PodRef(STATIC, "kube-system", "kube-apiserver-node1")),
        (U2, PodRef(U2, "analytics", "spark-exec-1")),  # kubelet dir: projected token volume
        (U5, PodRef(U5, "legacy", "legacy-consumer-6f9b7c8d4-qwz5x")),  # legacy secret volume
        (U3, None),  # host network: etc-hosts is the node's
        (U4, None),  # no token volume, and the old uid-only log directory
        ("00000000-0000-0000-0000-000000000000", None),
        ("../../../etc", None),
        ("", None),
    ],
)
def test_pod_directory_fixture_node(uid: str, expected: PodRef | None) -> None:
    assert node_directory(NODE).lookup(uid) == expected


def test_pod_directory_without_kubernetes(tmp_path: Path) -> None:
    pods = node_directory(tmp_path / "nothing-here")
    assert pods.lookup(U0) is None
    assert pods.lookup(STATIC) is None


def test_pod_directory_reads_through_atomic_writer_symlinks(tmp_path: Path) -> None:
    # Kubelet volumes: "namespace" -> "..data/namespace", "..data" -> a timestamped directory.
    pod = tmp_path / "var" / "lib" / "kubelet" / "pods" / U0
    vol = pod / "volumes" / "kubernetes.io~projected" / "kube-api-access-r2d7k"
    (vol / "..2024_05_01_10_00_00.123456789").mkdir(parents=True)
    (vol / "..2024_05_01_10_00_00.123456789" / "namespace").write_text("streaming")
    os.symlink("..2024_05_01_10_00_00.123456789", vol / "..data")
    os.symlink("..data/namespace", vol / "namespace")
    (pod / "etc-hosts").write_text(HOSTS_FIXED + "10.244.3.3\torders-consumer-b7wfz\n")
    assert node_directory(tmp_path).lookup(U0) == PodRef(U0, "streaming", "orders-consumer-b7wfz")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def add_log_dir(root: Path, namespace: str, name: str, uid: str) -> Path:
    d = root / "var" / "log" / "pods" / f"{namespace}_{name}_{uid}"
    (d / "app").mkdir(parents=True)
    return d


def test_pod_directory_caches_hits_and_retries_misses_after_retry_s(tmp_path: Path) -> None:
    clock = FakeClock()
    pods = node_directory(tmp_path, retry_s=30.0, clock=clock)
    (tmp_path / "var" / "log" / "pods").mkdir(parents=True)

    assert pods.lookup(U0) is None
    assert pods.listings == 1

    log_dir = add_log_dir(tmp_path, "kafka", "kafka-0", U0)
    clock.now = 10.0
    assert pods.lookup(U0) is None  # the miss is remembered
    clock.now = 29.9
    assert pods.lookup(U0) is None
    assert pods.listings == 1

    clock.now = 30.0
    assert pods.lookup(U0) == PodRef(U0, "kafka", "kafka-0")
    assert pods.listings == 2

    shutil.rmtree(log_dir)
    clock.now = 10_000.0
    assert pods.lookup(U0) == PodRef(U0, "kafka", "kafka-0")  # a resolved uid stays cached
    assert pods.listings == 2


def test_pod_directory_uses_one_listing_for_every_uid_in_it(tmp_path: Path) -> None:
    clock = FakeClock()
    pods = node_directory(tmp_path, clock=clock)
    add_log_dir(tmp_path, "a", "pod-a", U0)
    add_log_dir(tmp_path, "b", "pod-b", U1)
    assert pods.lookup(U0) == PodRef(U0, "a", "pod-a")
    assert pods.lookup(U1) == PodRef(U1, "b", "pod-b")
    assert pods.listings == 1
    # A uid the listing did not have triggers a new one (a pod started since).
    add_log_dir(tmp_path, "c", "pod-c", U2)
    assert pods.lookup(U2) == PodRef(U2, "c", "pod-c")
    assert pods.listings == 2


def test_pod_directory_cache_is_bounded(tmp_path: Path) -> None:
    clock = FakeClock()
    pods = node_directory(tmp_path, clock=clock, max_entries=2)
    dirs = [add_log_dir(tmp_path, "ns", f"pod-{i}", uid) for i, uid in enumerate((U0, U1, U2))]
    for uid in (U0, U1, U2):
        assert pods.lookup(uid) is not None
    for d in dirs:
        shutil.rmtree(d)
    assert pods.lookup(U3) is None  # an unknown uid: the (now empty) directory is listed again
    assert pods.listings == 2
    assert pods.lookup(U2) == PodRef(U2, "ns", "pod-2")  # still cached
    assert pods.lookup(U1) == PodRef(U1, "ns", "pod-1")
    assert pods.lookup(U0) is None  # the least recently used entry was dropped


# Deployment pod 63 chars long: "<deployment>-<hash>-" was cut to 58 chars before the 5 random
# ones, losing the '-' and the hash's last characters.
LONG_DEPLOYMENT = "orders-enrichment-consumer-with-a-rather-long-name"
TRUNCATED_POD = f"{LONG_DEPLOYMENT}-7d9c8b6x7k2p"


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ("payments-api-7d9c8b6f5d-x7k2p", "payments-api"),  # Deployment
        ("coredns-5dd5756b68-7xqrv", "coredns"),
        ("web-6b4f4b544-vz8wq", "web"),  # 9-char hash
        ("backup-28934567-b7wfz", "backup"),  # CronJob -> Job -> pod
        ("fluent-bit-8xk2z", "fluent-bit"),  # DaemonSet
        ("migrate-db-q9tlw", "migrate-db"),  # Job
        ("orders-v2beta-x7k2p", "orders-v2beta"),  # "v2beta" is not a pod-template-hash
        # Nor is "zqxvwt": rand letters, but a hash only ever holds 4-9 and b, c, d, f.
        ("batch-zqxvwt-x7k2p", "batch-zqxvwt"),
        ("kafka-0", "kafka"),  # StatefulSet
        ("kafka-12", "kafka"),
        ("zk-ensemble-2", "zk-ensemble"),
        (TRUNCATED_POD, f"{LONG_DEPLOYMENT}-7d9c8b6"),
        # Unchanged:
        ("payments-api", "payments-api"),
        ("kafka", "kafka"),
        ("web-007", "web-007"),  # ordinals have no leading zero
        ("kube-apiserver-node1", "kube-apiserver-node1"),  # static pod <name>-<node>
        ("my-app-v2", "my-app-v2"),
        ("api-aeiou", "api-aeiou"),  # vowels never appear in generated suffixes
        ("client-x7k2", "client-x7k2"),  # 4 chars: not a suffix
        ("client-x7k2pq", "client-x7k2pq"),  # 6 chars: not a suffix
        ("", ""),
        # Known false positive, documented: 5 vowel-free characters look generated.
        ("web-https", "web"),
    ],
)
def test_workload_name(pod: str, expected: str) -> None:
    assert workload_name(pod) == expected


def test_truncated_fixture_is_the_length_the_generator_makes() -> None:
    assert len(TRUNCATED_POD) == 63
