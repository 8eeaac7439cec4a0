"""The Kafka edge of the topics: describe, create and alter with confluent-kafka's AdminClient,
and the start check the agent, the job and the exporter run."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from streaming.errors import ConfigError
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


def admin_client(conf: Mapping[str, str], setting: str = "kafka") -> Any:
    """An AdminClient from librdkafka settings (``bootstrap.servers`` included); a bad setting
    raises ConfigError naming it (``setting``: where the settings came from)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not str(conf.get("bootstrap.servers", "")).strip():
        raise ConfigError("bootstrap-servers: empty")
    try:
        return AdminClient({**dict(conf), "logger": _Debug()})
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"{setting}: {exc}") from None


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
    """A component's start check: each topic (name -> role) exists and has the cleanup policy
    its role needs, from one DescribeConfigs request.

    A missing topic or a wrong policy raises ConfigError with one line per problem. A cluster
    that does not answer, or a topic the client may not describe, is logged as a warning and
    the component starts anyway: it waits for Kafka as it did without the check.
    """
    admin = admin_client(client_conf, setting)
    names = list(required)
    try:
        configs, failed = describe_configs(admin, names, timeout_s)
    except ClusterUnreachable as exc:
        log.warning(
            "%s: could not check the topics %s at start (%s); starting anyway",
            component,
            ", ".join(names),
            exc,
        )
        return
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
    log.info("%s: topics %s checked", component, ", ".join(names))
