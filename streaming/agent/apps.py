"""Application names for processes: configured rules first, then defaults.

A rule is a regex matched against the cmdline (args joined by spaces), the executable path, the
comm, the Kubernetes pod ("<namespace>/<pod name>", empty outside pods) or one of the pod's
labels (``label:<key>``: the label's value; a process whose pod lacks the label, or that is in
no pod, does not match; labels come from the API server only, ``kubeapi``); the first match wins
and its name may use the match's groups (``\\1``). Defaults: in a pod, ``<namespace>/<workload>``
(the pod name without the suffix its controller generated, so every replica and every rollout
of a Deployment is one app); else a Java main class (``kafka.Kafka`` is ``kafka-broker``) or
``-jar name.jar``, a Python script or ``-m`` module, else the process name. connmon's own
processes are ``connmon-<subcommand>`` (``connmon-agent``, ``connmon-job``, ...), and so is the
Spark JVM a ``connmon job`` driver starts and that JVM's Python workers, named after the
driver. Names are sanitized and bounded: they become label values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streaming.agent.pods import PodRef, workload_name
from streaming.agent.procs import ProcInfo
from streaming.schema.aggregates import CONNMON_COMMANDS

MAX_NAME = 64
UNKNOWN = "unknown"
FIELDS = ("cmdline", "exe", "comm", "pod")
LABEL_PREFIX = "label:"  # "label:<key>": a pod label's value

# Java main classes with a well-known meaning.
KNOWN_MAIN_CLASSES = {
    "kafka.Kafka": "kafka-broker",
    "org.apache.kafka.connect.cli.ConnectDistributed": "kafka-connect",
    "org.apache.kafka.connect.cli.ConnectStandalone": "kafka-connect",
    "io.confluent.kafka.schemaregistry.rest.SchemaRegistryMain": "schema-registry",
    "org.apache.spark.deploy.SparkSubmit": "spark-submit",
}
# Java options that take a separate argument.
_JAVA_ARG_OPTS = {"-cp", "-classpath", "--class-path", "--module-path", "-p", "--add-opens",
                  "--add-exports", "--add-modules", "--add-reads", "--patch-module"}  # fmt: skip
_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_JAR_VERSION = re.compile(r"[-_]v?\d+(\.\d+)*([.-][A-Za-z0-9]+)*$")


@dataclass(frozen=True)
class AppRule:
    """``pattern`` searched in ``field`` (cmdline|exe|comm|pod|label:<key>); ``name`` may
    reference groups."""

    pattern: re.Pattern[str]
    name: str
    field: str = "cmdline"

    @property
    def label_key(self) -> str | None:
        """The pod label this rule reads, None for the other fields."""
        prefix, _, key = self.field.partition(":")
        return key if prefix + ":" == LABEL_PREFIX else None


def label_keys(rules: Iterable[AppRule]) -> frozenset[str]:
    """The pod labels the rules read (the only ones the agent keeps)."""
    return frozenset(k for k in (r.label_key for r in rules) if k is not None)


def sanitize(name: str) -> str:
    """Label-safe, bounded name: [A-Za-z0-9._-], at most 64 characters, never empty."""
    clean = _BAD.sub("-", name).strip("-.")[:MAX_NAME]
    return clean or UNKNOWN


def _java_name(args: tuple[str, ...]) -> str | None:
    i = 1
    while i < len(args):
        a = args[i]
        if a == "-jar" and i + 1 < len(args):
            stem = os.path.basename(args[i + 1])
            stem = stem[:-4] if stem.endswith(".jar") else stem
            return _JAR_VERSION.sub("", stem) or stem
        if a in _JAVA_ARG_OPTS:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        if a in KNOWN_MAIN_CLASSES:
            return KNOWN_MAIN_CLASSES[a]
        return a.rsplit(".", 1)[-1]
    return None


def connmon_name(args: tuple[str, ...]) -> str | None:
    """``connmon-<subcommand>`` for connmon's own command line (the ``connmon`` script, run
    directly or by its Python interpreter, or ``python -m streaming``); None otherwise."""
    if not args:
        return None
    if os.path.basename(args[0]) == "connmon":
        rest = args[1:]
    elif os.path.basename(args[0]).startswith("python") and len(args) > 1:
        if os.path.basename(args[1]) == "connmon":
            rest = args[2:]
        elif args[1:3] == ("-m", "streaming"):
            rest = args[3:]
        else:
            return None
    else:
        return None
    # "--log-level X" is the only option connmon takes before the subcommand.
    words = [x for x in rest if not x.startswith("-")]
    for cmd in words[:2]:
        if cmd in CONNMON_COMMANDS:
            return f"connmon-{cmd}"
    return None


def _python_name(args: tuple[str, ...]) -> str | None:
    i = 1
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            return args[i + 1].split(".")[0] if args[i + 1] != "pytest" else "pytest"
        if a == "-c":
            return None
        if a in ("-W", "-X"):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        base = os.path.basename(a)
        return base[:-3] if base.endswith(".py") else base
    return None


def default_name(info: ProcInfo) -> str:
    """The app name with no rule matching."""
    own = connmon_name(info.cmdline)
    if own is not None:
        return own
    if info.pod is not None:
        return f"{sanitize(info.pod.namespace)}/{sanitize(workload_name(info.pod.name))}"
    args = info.cmdline
    prog = os.path.basename(args[0]) if args else ""
    name: str | None = None
    if prog == "java" or info.comm == "java":
        name = _java_name(args)
    elif prog.startswith("python") or info.comm.startswith("python"):
        name = _python_name(args)
    return sanitize(name or info.comm or prog)


SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"
# The modules a Spark JVM runs its Python workers with (``python -m pyspark.daemon``).
PYSPARK_MODULES = ("pyspark.daemon", "pyspark.worker")


class AppNamer:
    """Name processes with ``rules`` then the defaults; results cached per pid. ``parent_of``
    looks up a process by pid, to name the Spark JVM of a ``connmon job`` driver."""

    def __init__(
        self,
        rules: Iterable[AppRule] = (),
        parent_of: Callable[[int], ProcInfo | None] | None = None,
    ) -> None:
        self.rules = tuple(rules)
        self.parent_of = parent_of
        self._cache: dict[tuple[int, tuple[str, ...], PodRef | None], str] = {}

    def name(self, info: ProcInfo | None) -> str:
        if info is None:
            return UNKNOWN
        key = (info.pid, info.cmdline, info.pod)  # a pod's labels may arrive or change later
        cached = self._cache.get(key)
        if cached is None:
            if len(self._cache) > 10000:
                self._cache.clear()
            cached = self._cache[key] = self._name(info)
        return cached

    def _name(self, info: ProcInfo) -> str:
        pod = f"{info.pod.namespace}/{info.pod.name}" if info.pod else ""
        texts = {"cmdline": " ".join(info.cmdline), "exe": info.exe or "", "comm": info.comm,
                 "pod": pod}  # fmt: skip
        for rule in self.rules:
            key = rule.label_key
            text = texts[rule.field] if key is None else info.pod.label(key) if info.pod else None
            if text is None:
                continue
            m = rule.pattern.search(text)
            if m:
                return sanitize(m.expand(rule.name))
        if self._in_connmon_job(info):
            return "connmon-job"
        return default_name(info)

    def _in_connmon_job(self, info: ProcInfo) -> bool:
        """A ``connmon job`` driver's Spark JVM, or one of that JVM's Python workers (pyspark's
        daemon and the workers it forks): their connections are the job's."""
        cur = info
        for _ in range(3):  # worker -> daemon -> JVM -> driver
            spark = SPARK_SUBMIT in cur.cmdline or any(m in cur.cmdline for m in PYSPARK_MODULES)
            if not spark or not cur.ppid or self.parent_of is None:
                return False
            parent = self.parent_of(cur.ppid)
            if parent is None:
                return False
            if connmon_name(parent.cmdline) == "connmon-job":
                return True
            cur = parent
        return False
