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
