"""Kafka client libraries connmon tells apart: the names carried as ``client_library``.

A name is the library that manages the connections, not the language binding around it:
confluent-kafka (Python, Go, .NET), node-rdkafka and rust-rdkafka are all ``librdkafka``,
and their connection settings are librdkafka's.
"""

from __future__ import annotations

import re

CLIENT_LIBRARIES = (
    "java",  # org.apache.kafka:kafka-clients, and everything built on it
    "librdkafka",
    "sarama",  # github.com/IBM/sarama (formerly Shopify/sarama)
    "franz-go",  # github.com/twmb/franz-go
    "kafka-go",  # github.com/segmentio/kafka-go
    "kafkajs",
    "kafka-python",
    "aiokafka",
    "kafka-rust",  # the kafka crate
)
UNKNOWN_LIBRARY = "unknown"  # the agent found no evidence
# How the agent knows the library, strongest first (``client_library_evidence``): its code is
# in the process (a mapped shared object, a jar the JVM holds open, linked into the executable);
# it is on the JVM's class path; the application's own manifest declares it (a Node script's
# package.json beside the node_modules it loads from); the process is a JVM (every JVM client is
# kafka-clients); or only that it is installed where the process runs (a package beside its
# interpreter or script: pure Python and JavaScript leave no trace of being loaded). All but the
# last prove use.
LIBRARY_EVIDENCE = ("loaded", "classpath", "declared", "runtime", "installed")
PROVEN_EVIDENCE = frozenset(LIBRARY_EVIDENCE[:4])
# The agent's identification sources (``ClientLibrary.source``) by evidence level.
_EVIDENCE_OF_SOURCE = {
    "maps": "loaded",
    "fd": "loaded",
    "buildinfo": "loaded",
    "rodata": "loaded",
    "symbols": "loaded",
    "jar": "classpath",
    "cmdline": "classpath",
    "manifest": "declared",
    "jvm": "runtime",
    "package": "installed",
}


def evidence_of(source: str) -> str | None:
    """The evidence level of an identification source; None for none (an unknown library)."""
    return _EVIDENCE_OF_SOURCE.get(source)


def proven(evidence: str | None) -> bool:
    """Whether library-specific advice may be given: the library is known to be in use. A
    record from an agent that does not say (null) counts as proof, as it always did."""
    return evidence is None or evidence in PROVEN_EVIDENCE


# Kafka's own processes, whose several clients per process are by design: a broker (its
# replica fetchers and inter-broker channels), a KRaft controller, a Kafka Connect worker (its
# group, config, offset and status clients, and a producer or consumer per task), MirrorMaker
# (a consumer and a producer per flow), a Kafka Streams application (a consumer, a producer,
# a restore consumer and an admin client per thread). Null: an application.
PROCESS_ROLES = ("broker", "controller", "connect", "mirrormaker", "streams")

# A client's library identity: which library, its version, how the agent knows it, and the
# process's role among Kafka's own (the agent identifies all four of a process at once, and
# names a summary's by one vote over the four). Always taken as one value, never field by
# field: two processes of a series would otherwise make a pair neither is.
IDENTITY_FIELDS = ("client_library", "client_version", "client_library_evidence", "process_role")

OTHER_LIBRARY = "other"  # a name this version does not know (a newer agent's)
OTHER_VERSION = "other"

_VERSION = re.compile(r"v?(\d{1,4}(?:\.\d{1,6}){1,2})(?:[-+.][0-9A-Za-z.-]{1,40})?")


def library_label(name: str | None) -> str:
    """A bounded label value: a known name, ``unknown``, or ``other``."""
    if not name or name == UNKNOWN_LIBRARY:
        return UNKNOWN_LIBRARY
    return name if name in CLIENT_LIBRARIES else OTHER_LIBRARY


def version_label(version: str | None) -> str:
    """``major.minor[.patch]`` of a version (``v1.43.2-rc1`` -> ``1.43.2``), ``""`` when there
    is none, ``other`` for anything else: a bounded label value."""
    if not version:
        return ""
    m = _VERSION.fullmatch(version.strip())
    return m.group(1) if m else OTHER_VERSION


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """``(1, 43, 2)`` for ``v1.43.2``; None when the version is missing or not numeric."""
    label = version_label(version)
    if label in ("", OTHER_VERSION):
        return None
    return tuple(int(x) for x in label.split("."))
