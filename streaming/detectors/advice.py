"""Advice that more than one detector gives, worded once."""

from __future__ import annotations

from streaming.schema.aggregates import Aggregate

# A client that reconnects in a loop backs off too little (docs/kafka-connections.md,
# "Reconnect backoff"). Completes a sentence: "... and <RAISE_BACKOFF>".
RAISE_BACKOFF = (
    "raise reconnect.backoff.ms and reconnect.backoff.max.ms "
    "(Java 50/1000 ms, librdkafka 100/10000 ms by default)"
)

# How a process is paused (events.PAUSES), completing "... is paused: <it>".
_PAUSED_BY = {
    "stopped": "stopped by a signal (SIGSTOP, or job control; SIGCONT resumes it)",
    "traced": "held stopped by its tracer (a debugger, or a tool attached with ptrace)",
    "frozen": "frozen by its cgroup (a paused container, docker or podman pause, a checkpoint)",
}


def paused(agg: Aggregate) -> str:
    """Why a series' connections sit unclosed and idle when the agent saw its process paused in
    the window: the pause, not the client library. Empty when it saw none paused."""
    n = agg.paused_processes
    if not n:
        return ""
    how = _PAUSED_BY.get(agg.paused_how or "", "stopped or frozen")
    side = "client" if agg.side == "client" else "broker"
    who = f"The {side} process was" if n == 1 else f"{n} of the {side}'s processes were"
    return (
        f"{who} paused in this window: {how}. A paused process runs none of its threads, so it "
        "closes no connection its peer closed and sends nothing on the others; the Kafka code "
        "is not at fault. Resume it, or find what paused it; its sockets are closed when it "
        "runs again."
    )


def paused_note(agg: Aggregate) -> str:
    """The sentence a finding's summary ends with when its process was paused, else empty."""
    if not agg.paused_processes:
        return ""
    word = {"traced": "stopped by a tracer"}.get(agg.paused_how or "", agg.paused_how or "paused")
    return f" Its process was {word} in this window."
