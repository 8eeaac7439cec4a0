"""Advice that more than one detector gives, worded once."""

from __future__ import annotations

# A client that reconnects in a loop backs off too little (docs/kafka-connections.md,
# "Reconnect backoff"). Completes a sentence: "... and <RAISE_BACKOFF>".
RAISE_BACKOFF = (
    "raise reconnect.backoff.ms and reconnect.backoff.max.ms "
    "(Java 50/1000 ms, librdkafka 100/10000 ms by default)"
)
