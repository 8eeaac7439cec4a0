"""Kafka's own processes among JVMs: brokers and KRaft controllers, Kafka Connect workers,
MirrorMaker and Kafka Streams applications. Each runs several Kafka clients by design, which
connmon must not read as an application's duplicate clients.

Evidence, from what the kernel shows without attaching: the main class (``kafka.Kafka``, Connect's
and MirrorMaker's entry points); for a broker its ``process.roles`` (an ``--override`` or its
properties file); for Streams a ``kafka-streams`` jar the JVM holds open, names on its class
path, or carries inside its ``-jar`` fat jar. Kafka's own tools are started with every jar of
the distribution on the class path, Streams' included, so their main classes (``kafka.*``,
``org.apache.kafka.*`` outside Streams) are never read as Streams.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from streaming.agent.libraries.jars import JavaCommand, properties_value
from streaming.schema.clients import PROCESS_ROLES

BROKER, CONTROLLER, CONNECT, MIRRORMAKER, STREAMS = PROCESS_ROLES

MAIN_CLASS_ROLES = {
    "kafka.Kafka": BROKER,
    "io.confluent.support.metrics.SupportedKafka": BROKER,
    "org.apache.kafka.connect.cli.ConnectDistributed": CONNECT,
    "org.apache.kafka.connect.cli.ConnectStandalone": CONNECT,
    "org.apache.kafka.connect.mirror.MirrorMaker": MIRRORMAKER,
    "kafka.tools.MirrorMaker": MIRRORMAKER,
}
_STREAMS_JAR = re.compile(r"(?:^|/)kafka-streams-\d[\w.+-]*\.jar$")
# Inside a fat jar: a nested kafka-streams jar (Spring Boot's BOOT-INF/lib) or its main class,
# shaded or not.
_STREAMS_IN_JAR = re.compile(
    rb"/kafka-streams-\d[\w.+-]*\.jar|org/apache/kafka/streams/KafkaStreams\.class"
)
_KAFKA_PACKAGES = ("kafka.", "org.apache.kafka.")
_STREAMS_PACKAGE = "org.apache.kafka.streams."
_ROLES_SETTING = "process.roles"


def server_role(properties: str | None, args: Iterable[str]) -> str:
    """``controller`` for a KRaft node whose ``process.roles`` is ``controller`` alone (an
    ``--override`` wins over the file), else ``broker``."""
    roles = properties_value(properties, _ROLES_SETTING) if properties else None
    items = list(args)
    for i, a in enumerate(items):
        if a == "--override" and i + 1 < len(items):
            a = items[i + 1]
        key, sep, value = a.partition("=")
        if sep and key.strip() == _ROLES_SETTING:
            roles = value
    named = {r.strip() for r in (roles or "").split(",") if r.strip()}
    return CONTROLLER if named == {CONTROLLER} else BROKER


def may_be_streams(main_class: str | None) -> bool:
    """Whether a kafka-streams jar at hand can mean Streams: not for Kafka's own tools."""
    if main_class is None:
        return True
    return main_class.startswith(_STREAMS_PACKAGE) or not main_class.startswith(_KAFKA_PACKAGES)


def streams_jar_named(paths: Iterable[str | None]) -> bool:
    return any(p and _STREAMS_JAR.search(p) for p in paths)


def streams_in_jar(directory: bytes) -> bool:
    """A fat jar's zip central directory holds Kafka Streams."""
    return _STREAMS_IN_JAR.search(directory) is not None


def role_of(
    cmd: JavaCommand, open_jars: Iterable[str], read: Callable[[str], str | None]
) -> str | None:
    """The role a JVM's command line and open jars show (``read`` returns a file as the
    process sees it, or None); None for an application, or Streams found only inside a fat
    jar (``streams_in_jar``)."""
    role = MAIN_CLASS_ROLES.get(cmd.main_class or "")
    if role == BROKER:
        props = cmd.args[0] if cmd.args and not cmd.args[0].startswith("-") else None
        return server_role(read(props) if props else None, cmd.args)
    if role is not None:
        return role
    if may_be_streams(cmd.main_class) and streams_jar_named([*open_jars, *cmd.classpath, cmd.jar]):
        return STREAMS
    return None
