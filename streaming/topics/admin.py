"""The Kafka edge of the topics: describe, create and alter with confluent-kafka's AdminClient,
the ACLs each principal holds, and the start check the agent, the job and the exporter run."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from streaming.errors import ConfigError
from streaming.topics import acls
from streaming.topics.plan import Described, start_problems
from streaming.topics.spec import TopicSpec

log = logging.getLogger(__name__)

# librdkafka's own errors while a broker is down would repeat many times a second; the outcome
# is reported once by the caller.
_QUIET = logging.getLogger("streaming.topics.librdkafka")
SKIP_HINT = "check_topics: false or --no-check-topics skips this check"


class ClusterUnreachable(Exception):
    """The cluster did not answer (down, wrong address, TLS/SASL failing): nothing is known."""


class _Debug:
    """librdkafka's log at DEBUG level (``logger`` calls ``log(level, fmt, *args)``)."""

    def log(self, _level: int, msg: str, *args: object) -> None:
        _QUIET.debug(msg, *args)


def admin_client(
    conf: Mapping[str, str], setting: str = "kafka", refusals: list[str] | None = None
) -> Any:
    """An AdminClient from librdkafka settings (``bootstrap.servers`` included); a bad setting
    raises ConfigError naming it (``setting``: where the settings came from). The brokers'
    refusals of the client's credentials or TLS go to ``refusals`` (read after ``poll``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not str(conf.get("bootstrap.servers", "")).strip():
        raise ConfigError("bootstrap-servers: empty")
    extra: dict[str, Any] = {"logger": _Debug()}
    if refusals is not None:

        def on_error(err: Any) -> None:
            if err.name() in _REFUSED:
                refusals.append(err.str())

        extra["error_cb"] = on_error
    try:
        return AdminClient({**dict(conf), **extra})
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"{setting}: {exc}") from None


# The cluster answered but refused the client: wrong credentials, mechanism or certificates.
_REFUSED = ("_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED")


def _error(exc: BaseException) -> tuple[str, str]:
    """(error name, text) of a KafkaException."""
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return (str(name()) if callable(name) else type(exc).__name__), str(getattr(err, "str", str)())


def _unreachable(name: str) -> bool:
    return name in ("_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_AUTHENTICATION")


def describe_configs(
    admin: Any, names: Sequence[str], timeout_s: float
) -> tuple[dict[str, dict[str, str] | None], dict[str, str]]:
    """One DescribeConfigs call for the topics: ({name: configs or None if missing},
    {name: why it could not be described}). Raises ClusterUnreachable if nothing answered."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    if not names:
        return {}, {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    futures = admin.describe_configs(resources, request_timeout=timeout_s)
    found: dict[str, dict[str, str] | None] = {}
    failed: dict[str, str] = {}
    down: list[str] = []
    for res, fut in futures.items():
        try:
            entries = fut.result(timeout=timeout_s + 5)
        except Exception as exc:  # KafkaException (or a future timeout)
            err, text = _error(exc)
            if err == "UNKNOWN_TOPIC_OR_PART":
                found[res.name] = None
            elif _unreachable(err) or isinstance(exc, TimeoutError):
                down.append(f"{err}: {text}")
            else:
                failed[res.name] = f"{err}: {text}"
            continue
        found[res.name] = {k: e.value for k, e in entries.items() if e.value is not None}
    if down and not found and not failed:
        raise ClusterUnreachable(down[0])
    for name in names:
        if name not in found and name not in failed:
            failed[name] = down[0] if down else "no answer"
    return found, failed


def describe(
    admin: Any, names: Sequence[str], timeout_s: float
) -> tuple[int, dict[str, Described | None]]:
    """(number of brokers, {name: Described or None}) from one metadata request and one
    DescribeConfigs of the topics that exist."""
    from confluent_kafka import KafkaException

    try:
        meta = admin.list_topics(timeout=timeout_s)  # every topic: never auto-creates one
    except KafkaException as exc:
        raise ClusterUnreachable("{}: {}".format(*_error(exc))) from None
    out: dict[str, Described | None] = {}
    existing = []
    for name in names:
        t = meta.topics.get(name)
        if t is None or t.error is not None or not t.partitions:
            out[name] = None
        else:
            existing.append(name)
    configs, failed = describe_configs(admin, existing, timeout_s)
    if failed:
        name, why = next(iter(failed.items()))
        raise ClusterUnreachable(f"describing {name}: {why}")
    for name in existing:
        t = meta.topics[name]
        have = configs.get(name)
        if have is None:  # deleted between the two requests
            out[name] = None
            continue
        out[name] = Described(
            partitions=len(t.partitions),
            replication_factor=min(len(p.replicas) for p in t.partitions.values()),
            configs=have,
        )
    return len(meta.brokers), out


def missing_acls(admin: Any, wanted: Sequence[acls.Grant], timeout_s: float) -> list[acls.Grant]:
    """The grants the client's principal lacks, from the operations the brokers say it may do
    on each topic and group (one DescribeTopics and one DescribeGroups request). A resource it
    may not even describe lacks the grants that would show it; a topic that does not exist is
    left to the topic check. Raises ClusterUnreachable if nothing answered. Brokers too old to
    report operations (before Kafka 2.3) lack nothing."""
    from confluent_kafka import TopicCollection

    topics = list(dict.fromkeys(g.name for g in wanted if g.resource == "topic"))
    # A group id under each prefix: the brokers answer for it whether or not it exists.
    probes = {g.name + "start-check": g.name for g in wanted if g.resource == "group"}
    futures: dict[tuple[str, str], Any] = {}
    if topics:
        described = admin.describe_topics(
            TopicCollection(topics), include_authorized_operations=True, request_timeout=timeout_s
        )
        futures |= {("topic", name): f for name, f in described.items()}
    if probes:
        described = admin.describe_consumer_groups(
            list(probes), include_authorized_operations=True, request_timeout=timeout_s
        )
        futures |= {("group", probes[group]): f for group, f in described.items()}
    allowed: dict[tuple[str, str], list[str]] = {}  # resources that report their operations
    hidden: set[tuple[str, str]] = set()  # resources the principal may not even describe
    for key, fut in futures.items():
        try:
            ops = fut.result(timeout=timeout_s + 5).authorized_operations
        except Exception as exc:
            err, text = _error(exc)
            if err in ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"):
                hidden.add(key)
            elif _unreachable(err) or isinstance(exc, TimeoutError):
                raise ClusterUnreachable(f"{err}: {text}") from None
            continue  # the topic check names a missing topic
        if ops is not None:
            allowed[key] = [op.name for op in ops]
    showing = ("DESCRIBE", *acls.IMPLIED_BY["DESCRIBE"])
    return [
        g
        for g in wanted
        if ((g.resource, g.name) in hidden and g.operation in showing)
        or (
            (g.resource, g.name) in allowed
            and not acls.allowed(g.operation, allowed[g.resource, g.name])
        )
    ]


def acl_fields(principal: str, g: acls.Grant) -> tuple[Any, ...]:
    """The fields of the ACL binding (or binding filter) that allows ``g`` to ``principal``
    from any host."""
    from confluent_kafka.admin import (
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    topic = g.resource == "topic"
    return (
        ResourceType.TOPIC if topic else ResourceType.GROUP,
        g.name,
        ResourcePatternType.LITERAL if topic else ResourcePatternType.PREFIXED,
        principal,
        "*",
        AclOperation[g.operation],
        AclPermissionType.ALLOW,
    )


def create_acls(
    admin: Any, bindings: Sequence[tuple[str, acls.Grant]], timeout_s: float
) -> dict[tuple[str, acls.Grant], str]:
    """Allow each (principal, grant) from any host: {(principal, grant): error} of those that
    failed (an ACL that exists already is no failure)."""
    from confluent_kafka.admin import AclBinding

    by_binding = {AclBinding(*acl_fields(p, g)): (p, g) for p, g in bindings}
    if not by_binding:
        return {}
    failed: dict[tuple[str, acls.Grant], str] = {}
    for binding, fut in admin.create_acls(list(by_binding), request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s + 5)
        except Exception as exc:
            failed[by_binding[binding]] = "{}: {}".format(*_error(exc))
    return failed


def create(admin: Any, specs: Sequence[TopicSpec], timeout_s: float) -> dict[str, str | None]:
    """Create the topics: {name: None if created, else the broker's error}. A topic created
    meanwhile by someone else counts as an error (``TOPIC_ALREADY_EXISTS``)."""
    from confluent_kafka.admin import NewTopic

    if not specs:
        return {}
    new = [
        NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.configs)) for s in specs
    ]
    out: dict[str, str | None] = {}
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s + 5)
            out[name] = None
        except Exception as exc:
            out[name] = "{}: {}".format(*_error(exc))
    return out


def alter(
    admin: Any, changes: Mapping[str, Mapping[str, str]], timeout_s: float
) -> dict[str, str | None]:
    """Set topic configs (incrementally: other configs are left alone): {name: error or None}."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    if not changes:
        return {}
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()
            ],
        )
        for name, configs in changes.items()
    ]
    out: dict[str, str | None] = {}
    for res, fut in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s + 5)
            out[res.name] = None
        except Exception as exc:
            out[res.name] = "{}: {}".format(*_error(exc))
    return out


def check_at_start(
    component: str,
    client_conf: Mapping[str, str],
    required: Mapping[str, str],
    timeout_s: float = 10.0,
    skip_hint: str = SKIP_HINT,
    setting: str = "kafka",
) -> None:
    """A component's start check: its principal holds the ACLs it needs on each topic
    (``acls.grants``), and each topic (name -> role) exists with the cleanup policy its role
    needs. One DescribeTopics and one DescribeConfigs request.

    A missing ACL, a missing topic or a wrong policy raises ConfigError with one line per
    problem, and so do credentials or certificates the brokers refuse. A cluster that does not
    answer is logged as a warning and the component starts anyway: it waits for Kafka as it
    did without the check.
    """
    refusals: list[str] = []
    admin = admin_client(client_conf, setting, refusals)
    names = list(required)
    try:
        lacking = missing_acls(admin, acls.grants(component, required), timeout_s)
        configs, failed = describe_configs(admin, names, timeout_s)
    except ClusterUnreachable as exc:
        admin.poll(1)  # serves the client's error callbacks
        if refusals:
            raise ConfigError(
                f"{setting}: the Kafka brokers refused {component}'s client (check "
                f"security.protocol, sasl.username, sasl.password and ssl.ca.location): "
                f"{refusals[-1]}"
            ) from None
        log.warning(
            "%s: could not check the topics %s at start (%s); starting anyway",
            component,
            ", ".join(names),
            exc,
        )
        return
    if lacking:
        who = client_conf.get("sasl.username") or "its principal"
        text = "\n  ".join(str(g) for g in lacking)
        raise ConfigError(
            f"{component}: Kafka user {who} lacks ACLs it needs ({skip_hint}; `connmon topics "
            f"acls` prints the commands that grant every component's):\n  {text}"
        )
    for name, why in failed.items():
        log.warning(
            "%s: could not check topic %s at start (%s; the client needs DescribeConfigs on "
            "it, or %s); starting anyway",
            component,
            name,
            why,
            skip_hint,
        )
    problems = start_problems(required, configs)
    if problems:
        text = "\n  ".join(str(p) for p in problems)
        raise ConfigError(
            f"topics not as {component} needs them ({skip_hint}; "
            f"connmon topics check lists every difference):\n  {text}"
        )
    log.info("%s: topics %s and their ACLs checked", component, ", ".join(names))
