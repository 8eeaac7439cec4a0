"""inode -> process map over a fixture /proc tree, cgroup parsing, and app naming."""

from __future__ import annotations

import os
import re
from pathlib import Path

from streaming.agent.apps import AppNamer, AppRule, default_name, label_keys, sanitize
from streaming.agent.pods import PodDirectory, PodRef
from streaming.agent.procs import ProcessTable, ProcInfo


def make_proc(
    root: Path, pid: int, cmdline: list[str], inodes: list[int], cgroup: str = ""
) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True, exist_ok=True)
    (d / "comm").write_text(os.path.basename(cmdline[0])[:15] + "\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    (d / "cgroup").write_text(cgroup or "0::/user.slice\n")
    for i, inode in enumerate(inodes, 3):
        link = d / "fd" / str(i)
        if link.is_symlink():
            link.unlink()
        os.symlink(f"socket:[{inode}]", link)
    os.symlink("/dev/null", d / "fd" / "0") if not (d / "fd" / "0").is_symlink() else None


def test_lookup_is_incremental(tmp_path: Path) -> None:
    make_proc(tmp_path, 10, ["java", "-cp", "x.jar", "com.acme.Orders"], [1001, 1002])
    make_proc(tmp_path, 20, ["/usr/bin/python3", "/opt/app/billing.py"], [2001])
    table = ProcessTable(tmp_path)
    got = table.lookup({1001, 2001, 0})
    assert {i: p.pid for i, p in got.items()} == {1001: 10, 2001: 20}
    assert table.pid_scans == 2
    # Nothing new: no fd directory is read again.
    table.lookup({1001, 2001})
    assert table.pid_scans == 2
    # A new socket in a known process: known pids are reread (the owner of wanted sockets first).
    make_proc(tmp_path, 10, ["java", "-cp", "x.jar", "com.acme.Orders"], [1001, 1002, 1003])
    got = table.lookup({1001, 1003})
    assert got[1003].pid == 10
    assert table.pid_scans == 3
    # A new process: only it is read.
    make_proc(tmp_path, 30, ["kafka-console"], [3001])
    assert table.lookup({3001})[3001].pid == 30
    assert table.pid_scans == 4
    # An inode nobody owns (another namespace): one full reread, then not again.
    table.lookup({9999})
    n = table.pid_scans
    table.lookup({9999})
    assert table.pid_scans == n


def test_gone_process_is_forgotten(tmp_path: Path) -> None:
    make_proc(tmp_path, 10, ["java", "kafka.Kafka"], [1001])
    table = ProcessTable(tmp_path)
    assert table.lookup({1001})[1001].pid == 10
    for f in (tmp_path / "10" / "fd").iterdir():
        f.unlink()
    (tmp_path / "10" / "fd").rmdir()
    for f in (tmp_path / "10").iterdir():
        f.unlink()
    (tmp_path / "10").rmdir()
    assert table.lookup({1001}) == {}


def info(*cmdline: str, comm: str | None = None, exe: str | None = None) -> ProcInfo:
    return ProcInfo(1, comm or os.path.basename(cmdline[0])[:15], tuple(cmdline), exe, None)


def test_default_names() -> None:
    java = "/usr/lib/jvm/bin/java"
    assert default_name(info(java, "-Xmx1g", "-cp", "/opt/k/*", "kafka.Kafka", "s.prop")) == (
        "kafka-broker"
    )
    assert default_name(info(java, "-Dx=y", "-jar", "/srv/orders-svc-1.4.2.jar")) == "orders-svc"
    assert default_name(info(java, "--add-opens", "a/b=c", "com.acme.BillingMain")) == (
        "BillingMain"
    )
    assert default_name(info("/usr/bin/python3.11", "-u", "/opt/feeder.py", "--x")) == "feeder"
    assert default_name(info("python3", "-m", "myapp.worker")) == "myapp"
    assert default_name(info("/usr/local/bin/kcat", comm="kcat")) == "kcat"


def test_rules_first_match_wins_and_names_are_bounded() -> None:
    namer = AppNamer(
        [
            AppRule(re.compile(r"--group[= ](\S+)"), r"consumer-\1"),
            AppRule(re.compile(r"/opt/legacy/"), "legacy", "exe"),
            AppRule(re.compile(r".*"), "catch-all"),
        ]
    )
    assert namer.name(info("java", "Main", "--group=orders")) == "consumer-orders"
    assert namer.name(info("x", exe="/opt/legacy/bin/x")) == "legacy"
    assert namer.name(info("other")) == "catch-all"
    assert namer.name(None) == "unknown"
    assert sanitize("a b/c:d" + "x" * 100) == ("a-b-c-d" + "x" * 100)[:64]
    assert sanitize("///") == "unknown"


NODE = Path(__file__).resolve().parents[2] / "fixtures" / "agent" / "pods" / "node"


def test_a_process_in_a_pod_is_named_after_its_workload(tmp_path: Path) -> None:
    uid = "89487173_d074_4031_8a9e_d6ad26cbcacf"  # payments/payments-api-7d9c8b6f5d-x7k2p
    cid = "ab" * 32
    make_proc(
        tmp_path, 30, ["java", "-cp", "app.jar", "com.acme.Main"], [3001],
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
        f"cri-containerd-{cid}.scope\n",
    )  # fmt: skip
    make_proc(tmp_path, 31, ["python3", "/opt/feeder.py"], [3101])  # not in a pod
    pods = PodDirectory(NODE / "var" / "log" / "pods", NODE / "var" / "lib" / "kubelet")
    got = ProcessTable(tmp_path, pods).lookup({3001, 3101})
    p = got[3001]
    assert (p.pod.namespace, p.pod.name) == ("payments", "payments-api-7d9c8b6f5d-x7k2p")
    assert p.container == f"{uid.replace('_', '-')}/{cid[:12]}"
    assert got[3101].pod is None
    namer = AppNamer([AppRule(re.compile(r"^kafka/"), "kafka-in-k8s", "pod")])
    assert namer.name(p) == "payments/payments-api"
    assert namer.name(got[3101]) == "feeder"
    k = ProcInfo(1, "java", ("java",), None, None, PodRef("u", "kafka", "kafka-0"))
    assert namer.name(k) == "kafka-in-k8s"


def test_rules_on_pod_labels() -> None:
    namer = AppNamer(
        [
            AppRule(re.compile(r"^(.+)$"), r"\1", "label:app.kubernetes.io/name"),
            AppRule(re.compile(r".*"), "team-\\g<0>", "label:team"),
            AppRule(re.compile(r"^kafka/"), "kafka-in-k8s", "pod"),
        ]
    )
    named = PodRef("u1", "shop", "orders-7d9c8b6f5d-x7k2p", (("app.kubernetes.io/name", "orders"),))
    team = PodRef("u2", "shop", "billing-0", (("team", "payments"),))
    empty = PodRef("u3", "kafka", "kafka-0", (("app.kubernetes.io/name", ""),))
    bare = PodRef("u4", "shop", "web-0")
    assert namer.name(ProcInfo(1, "java", ("java",), None, None, named)) == "orders"
    assert namer.name(ProcInfo(2, "java", ("java",), None, None, team)) == "team-payments"
    # An empty value is a value, which `^(.+)$` does not match; the pod rule comes next.
    assert namer.name(ProcInfo(3, "java", ("java",), None, None, empty)) == "kafka-in-k8s"
    # No such label, or no pod at all: label rules do not match, even `.*`.
    assert namer.name(ProcInfo(4, "java", ("java",), None, None, bare)) == "shop/web"
    assert namer.name(info("python3", "/opt/feeder.py")) == "feeder"
    assert label_keys(namer.rules) == {"app.kubernetes.io/name", "team"}


def test_a_pods_labels_arriving_later_rename_the_process() -> None:
    namer = AppNamer([AppRule(re.compile(r"(.+)"), r"\1", "label:team")])
    before = ProcInfo(7, "java", ("java",), None, None, PodRef("u", "shop", "api-0"))
    assert namer.name(before) == "shop/api"
    after = ProcInfo(
        7, "java", ("java",), None, None, PodRef("u", "shop", "api-0", (("team", "t1"),))
    )
    assert namer.name(after) == "t1"


def test_connmon_names_its_own_processes() -> None:
    from streaming.agent.apps import connmon_name

    venv = "/opt/connmon/.venv/bin"
    assert connmon_name((f"{venv}/python3", f"{venv}/connmon", "agent", "--config", "a")) == (
        "connmon-agent"
    )
    assert connmon_name(("connmon", "--log-level", "DEBUG", "job")) == "connmon-job"
    assert connmon_name(("python3", "-m", "streaming", "exporter")) == "connmon-exporter"
    assert connmon_name(("python3", "-m", "streaming.scenarios.workloads.rawsock")) is None
    assert connmon_name(("python3", "/srv/orders.py", "connmon", "agent")) is None
    assert connmon_name(("connmon", "--help")) is None
    assert default_name(info(f"{venv}/python3", f"{venv}/connmon", "exporter")) == (
        "connmon-exporter"
    )


def test_the_spark_jvm_of_a_connmon_job_is_named_after_its_driver(tmp_path: Path) -> None:
    jvm = ["java", "-cp", "/spark/jars/*", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"]
    make_proc(tmp_path, 40, ["/venv/bin/python3", "/venv/bin/connmon", "job"], [4001])
    make_proc(tmp_path, 41, jvm, [4101])
    make_proc(tmp_path, 50, ["/usr/bin/python3", "/srv/etl.py"], [5001])
    make_proc(tmp_path, 51, jvm, [5101])
    for pid, ppid in ((40, 1), (41, 40), (50, 1), (51, 50)):
        comm = "java (x) y" if pid in (41, 51) else "python3"
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0\n")
    table = ProcessTable(tmp_path)
    got = table.lookup({4101, 5101})
    assert got[4101].ppid == 40 and got[5101].ppid == 50
    namer = AppNamer(parent_of=table.info)
    assert namer.name(got[4101]) == "connmon-job"
    assert namer.name(got[5101]) == "spark-submit"  # someone else's Spark job


def test_the_python_workers_of_a_connmon_jobs_spark_jvm_are_the_job(tmp_path: Path) -> None:
    """pyspark's daemon is the JVM's child and forks the workers: all of them are the job."""
    jvm = ["java", "-cp", "/spark/jars/*", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"]
    daemon = ["/venv/bin/python3", "-m", "pyspark.daemon"]
    make_proc(tmp_path, 40, ["/venv/bin/python3", "/venv/bin/connmon", "job"], [4001])
    make_proc(tmp_path, 41, jvm, [4101])
    make_proc(tmp_path, 42, daemon, [4201])
    make_proc(tmp_path, 43, daemon, [4301])
    make_proc(tmp_path, 50, ["/usr/bin/python3", "/srv/etl.py"], [5001])
    make_proc(tmp_path, 51, jvm, [5101])
    make_proc(tmp_path, 52, daemon, [5201])
    make_proc(tmp_path, 53, daemon, [5301])
    parents = {40: 1, 41: 40, 42: 41, 43: 42, 50: 1, 51: 50, 52: 51, 53: 52}
    for pid, ppid in parents.items():
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (python3) S {ppid} {pid} {pid} 0\n")
    table = ProcessTable(tmp_path)
    got = table.lookup({4201, 4301, 5201, 5301})
    namer = AppNamer(parent_of=table.info)
    assert namer.name(got[4201]) == "connmon-job"
    assert namer.name(got[4301]) == "connmon-job"
    assert namer.name(got[5201]) == "pyspark"  # someone else's Spark job
    assert namer.name(got[5301]) == "pyspark"
