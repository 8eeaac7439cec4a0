"""Pure comparison of the wanted topics with what the cluster describes: which to create, and
one ``Problem`` per setting an existing topic has wrong. No I/O here (``admin`` does that)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from streaming.topics.spec import MIN_MESSAGE_BYTES, POLICY, TopicSpec, for_cluster, policy_set

CREATE_HINT = "run connmon topics create"


@dataclass(frozen=True)
class Described:
    """An existing topic as the cluster describes it (``None`` stands for a missing one)."""

    partitions: int
    replication_factor: int  # the smallest replica count of its partitions
    configs: Mapping[str, str]


@dataclass(frozen=True)
class Problem:
    """One wrong setting of one topic. ``setting`` is ``exists``, ``partitions``,
    ``replication_factor`` or a topic config name; ``fixable``: ``--alter`` can set it."""

    topic: str
    setting: str
    have: str | None
    want: str
    fixable: bool = False

    def __str__(self) -> str:
        if self.setting == "exists":
            return f"{self.topic}: does not exist ({CREATE_HINT})"
        if self.setting in ("partitions", "replication_factor"):
            return f"{self.topic}: {self.setting} is {self.have}, must be at least {self.want}"
        if self.have is None:
            return f"{self.topic}: {self.setting} is not set, must be {self.want}"
        return f"{self.topic}: {self.setting} is {self.have}, must be {self.want}"


@dataclass(frozen=True)
class Plan:
    create: tuple[TopicSpec, ...]  # missing topics, capped to the cluster
    problems: tuple[Problem, ...]  # of the topics that exist

    def alter(self) -> dict[str, dict[str, str]]:
        """Topic -> the configs ``--alter`` would set."""
        out: dict[str, dict[str, str]] = {}
        for p in self.problems:
            if p.fixable:
                out.setdefault(p.topic, {})[p.setting] = p.want
        return out

    def missing(self) -> tuple[Problem, ...]:
        return tuple(Problem(s.name, "exists", None, "yes") for s in self.create)


def same_value(key: str, want: str, have: str | None) -> bool:
    """Whether a described config value is the wanted one (``compact,delete`` is
    ``delete,compact``; ``0.10`` is ``0.1``)."""
    if have is None:
        return False
    if key == "cleanup.policy":
        return policy_set(want) == policy_set(have)
    if want == have:
        return True
    try:
        return float(want) == float(have)
    except ValueError:
        return False


def topic_problems(spec: TopicSpec, have: Described) -> list[Problem]:
    """Every setting of an existing topic that differs from ``spec`` (already capped)."""
    out: list[Problem] = []
    if have.partitions < spec.partitions:
        out.append(Problem(spec.name, "partitions", str(have.partitions), str(spec.partitions)))
    if have.replication_factor < spec.replication_factor:
        out.append(
            Problem(
                spec.name,
                "replication_factor",
                str(have.replication_factor),
                str(spec.replication_factor),
            )
        )
    for key, want in spec.configs.items():
        got = have.configs.get(key)
        if not same_value(key, want, got):
            out.append(Problem(spec.name, key, got, want, fixable=True))
    return out


def plan(
    specs: Sequence[TopicSpec], described: Mapping[str, Described | None], brokers: int
) -> Plan:
    """What to create and what is wrong, for a cluster of ``brokers`` brokers."""
    create: list[TopicSpec] = []
    problems: list[Problem] = []
    for spec in specs:
        want = for_cluster(spec, brokers)
        have = described.get(spec.name)
        if have is None:
            create.append(want)
        else:
            problems.extend(topic_problems(want, have))
    return Plan(tuple(create), tuple(problems))


def start_problems(
    required: Mapping[str, str], configs: Mapping[str, Mapping[str, str] | None]
) -> list[Problem]:
    """The start check of a component: each topic (name -> role) must exist, have the
    cleanup policy its role needs and take records as large as its writers write. ``configs``:
    name -> described configs, ``None`` if the topic does not exist; a name absent from
    ``configs`` could not be checked and is skipped."""
    out: list[Problem] = []
    for name, role in required.items():
        if name not in configs:
            continue
        have = configs[name]
        if have is None:
            out.append(Problem(name, "exists", None, "yes"))
            continue
        policy = have.get("cleanup.policy")
        policies = policy_set(policy or "")
        wanted = POLICY[role]
        ok = "compact" in policies if wanted == "compact" else policies == {"delete"}
        if not ok:
            out.append(Problem(name, "cleanup.policy", policy, wanted))
        size = have.get("max.message.bytes")
        least = MIN_MESSAGE_BYTES[role]
        if size is not None and size.isdigit() and int(size) < least:
            out.append(Problem(name, "max.message.bytes", size, f"at least {least}"))
    return out


def lines(problems: Iterable[Problem]) -> list[str]:
    return [str(p) for p in problems]
