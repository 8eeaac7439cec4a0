"""Which exporter shard serves a series: a stable hash of its series key, modulo the shards.

Every shard reads the whole aggregates and findings topics and keeps only the messages of its
own series, routed by the Kafka key before anything is parsed. A series and its findings share
the series key, so they land on the same shard, and the split does not depend on topic
partitions, arrival order or which shards are up: a restarted shard serves the same set again.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from streaming.errors import ConfigError
from streaming.schema.findings import series_of_finding_key

# A number, or a name ending in -<number> (a StatefulSet pod's ordinal); ASCII digits only.
_INDEX = re.compile(r"^(?:[A-Za-z0-9.]+(?:-[A-Za-z0-9.]+)*-)?([0-9]+)$")


def series_of(role: str, key: bytes | None) -> str | None:
    """The series key a message of ``role`` is about, from its Kafka key (None if unknown)."""
    if key is None:
        return None
    text = key.decode("utf-8", "replace")
    if role == "aggregates":
        return text
    if role == "findings":
        return series_of_finding_key(text)
    return None


def shard_of(series: str, shards: int) -> int:
    """0 .. shards-1; CRC-32 is the same in every process and release."""
    return zlib.crc32(series.encode()) % shards


@dataclass(frozen=True)
class Shard:
    index: int = 0
    count: int = 1

    def owns(self, role: str, key: bytes | None) -> bool:
        """Whether this shard serves the message; job status is served by every shard, and a
        message whose series is unknown (no key) by shard 0 alone."""
        if self.count == 1 or role not in ("aggregates", "findings"):
            return True
        series = series_of(role, key)
        return (shard_of(series, self.count) if series is not None else 0) == self.index


def parse_shard(index: str | int, count: int) -> Shard:
    """``--shard-index`` (a number, or a StatefulSet pod name ending in ``-<n>``) and
    ``--shards``; raises ConfigError naming the wrong one."""
    if count < 1:
        raise ConfigError(f"shards: {count} must be at least 1")
    match = _INDEX.match(str(index).strip())
    if match is None:
        raise ConfigError(
            f"shard-index: {index!r} is neither a number nor a pod name ending in -<number>"
        )
    value = int(match.group(1))
    if value >= count:
        raise ConfigError(f"shard-index: {value} must be below shards ({count})")
    return Shard(value, count)
