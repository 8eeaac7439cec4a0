"""The scenarios: one per pathology in docs/kafka-connections.md, the healthy baseline, and one
per Go/Node.js library (``sarama``, ``franz-go``, ``kafkajs``: what each does with busy and idle
connections, as measured in docs/observed-client-behaviour.md).

Time is compressed about 10x through configuration only: the main cluster's brokers reap idle
connections after 60 s (default 600 s), clients that should reap first get 10 s (Java default
540 s), and the detector thresholds in ``SESSION_DETECTOR`` shrink to match. Every scenario
runs concurrently with the others in one session (the e2e tests and ``connmon demo``), so each
uses its own topics and app names, and the settings a scenario relies on are listed in its
``detector`` field and checked against the session's.

Three clusters, because a broker's ``connections.max.idle.ms`` is read-only (static, one value
per broker, checked with describe_configs on 4.3.1):
- ``main``: 3 brokers, idle expiry 60 s: every scenario except the two below;
- ``zombie``: 1 broker with idle expiry disabled (-1), which the zombie scenario needs;
- ``storm``: 1 broker that the storm scenario stops, so the others keep their cluster whole;
- ``restart``: 1 broker that the restart scenario stops and starts again, for the same reason.
"""

from __future__ import annotations

import dataclasses

from streaming.detectors.config import DEFAULT
from streaming.scenarios.model import ANY_APP, Action, ClusterProfile, Expect, Scenario, Workload

BROKER_IDLE_MS = 60_000

CLUSTERS = {
    "main": ClusterProfile(
        "main",
        3,
        {"connections.max.idle.ms": str(BROKER_IDLE_MS)},
        "3 brokers; idle connections reaped after 60 s (default 600 s)",
    ),
    "zombie": ClusterProfile(
        "zombie", 1, {"connections.max.idle.ms": "-1"}, "1 broker; idle expiry disabled"
    ),
    "storm": ClusterProfile("storm", 1, {}, "1 broker, stopped by the storm scenario"),
    "restart": ClusterProfile(
        "restart", 1, {}, "1 broker, restarted twice by the restart scenario"
    ),
}

# The detector thresholds of a session, compressed like the clusters above.
SESSION_SETTINGS: dict[str, float] = {
    "window_s": 10.0,
    "watermark_s": 20.0,
    "close_wait_grace_s": 10.0,
    "idle_churn_min_idle_s": 8.0,
    "idle_churn_min_cycles": 2,
    "idle_churn_window_s": 300.0,
    "idle_churn_timer_tolerance_s": 3.0,  # the agent scans every second here
    "duplicate_idle_s": 10.0,
    # above the gap of the duplicate scenario's second client: reaped at 25 s idle, re-opened
    # at its next send 40 s after the last, idle past duplicate_idle_s 10 s later
    "duplicate_resolve_after_s": 60.0,
    "zombie_idle_s": 90.0,  # above the main cluster's 60 s broker expiry
    "storm_opens_per_min": 60.0,
    "storm_short_lived_s": 2.0,
    "storm_host_attempt_fails_per_min": 120.0,
    "time_wait_warning_count": 100,
}
SESSION_DETECTOR = DEFAULT.replace(**SESSION_SETTINGS)


def _uses(*names: str) -> dict[str, float]:
    return {n: SESSION_SETTINGS[n] for n in names}


HEALTHY = Scenario(
    name="healthy",
    summary="Steady librdkafka producer and a two-member consumer group: no finding at all.",
    cluster="main",
    topics={"scn-healthy": 6},
    workloads=(
        Workload("rdkafka", "producer", "healthy-rdk-producer", "scn-healthy", interval_ms=100),
        Workload("rdkafka", "consumer", "healthy-rdk-consumer-1", "scn-healthy", "healthy-g"),
        Workload("rdkafka", "consumer", "healthy-rdk-consumer-2", "scn-healthy", "healthy-g"),
    ),
    expect=(
        Expect(None, "healthy-rdk-producer", present=False),
        Expect(None, "healthy-rdk-consumer-1", present=False),
        Expect(None, "healthy-rdk-consumer-2", present=False),
    ),
    detector=_uses("idle_churn_min_idle_s", "duplicate_idle_s", "zombie_idle_s"),
    duration_s=240.0,
)

IDLE_CHURN = Scenario(
    name="idle-churn",
    summary=(
        "Producers that send every 15 s with a 10 s client idle expiry: the connection is "
        "reaped after each message and re-opened for the next."
    ),
    cluster="main",
    topics={"scn-churn-java": 1, "scn-churn-rdk": 1},
    workloads=(
        Workload(
            "java",
            "idle-producer",
            "churn-java-producer",
            "scn-churn-java",
            interval_ms=15_000,
            props={"connections.max.idle.ms": "10000"},
        ),
        Workload(
            "rdkafka",
            "producer",
            "churn-rdk-producer",
            "scn-churn-rdk",
            interval_ms=15_000,
            props={"connections.max.idle.ms": "10000"},
        ),
    ),
    expect=(
        Expect("idle_churn", "churn-java-producer", library="java", advice="540000"),
        Expect(
            "idle_churn", "churn-rdk-producer", library="librdkafka", advice="default 0 = never"
        ),
    ),
    detector=_uses("idle_churn_min_idle_s", "idle_churn_min_cycles", "idle_churn_window_s"),
    # The first test of the e2e session, so the one deadline that meets the job's start: its
    # first two micro-batches cover everything since the clients started and took 100-125 s
    # on 2 cores; these findings came 180-212 s in (SLACK_S is on top).
    expect_within_s=180.0,
)

CLOSE_WAIT = Scenario(
    name="close-wait",
    summary=(
        "A Java classic consumer that stops calling poll() and a raw client that never closes: "
        "the broker reaps their idle connections after 60 s and the sockets stay in CLOSE_WAIT."
    ),
    cluster="main",
    topics={"scn-closewait": 3},
    workloads=(
        # max.poll.interval.ms 10 s (default 300 s): the heartbeat thread leaves the group and
        # stops driving the network client, so nothing notices the broker's FIN.
        Workload(
            "java",
            "stalled-consumer",
            "closewait-java-stalled",
            "scn-closewait",
            "closewait-g",
            props={"max.poll.interval.ms": "10000"},
            options={"poll_for_s": 10},
        ),
        # Default max.poll.interval.ms: the heartbeat thread keeps polling the network client.
        Workload(
            "java",
            "stalled-consumer",
            "closewait-java-stalled-hb",
            "scn-closewait",
            "closewait-hb-g",
            options={"poll_for_s": 10},
        ),
        Workload(
            "raw",
            "close-wait-leak",
            "closewait-raw-leak",
            interval_ms=3000,
            options={"max_connections": 8},
            broker=2,
        ),
    ),
    expect=(
        Expect(
            "close_wait_buildup",
            "closewait-java-stalled",
            library="java",
            advice="max.poll.interval.ms",
        ),
        Expect("close_wait_buildup", "closewait-raw-leak"),
    ),
    detector=_uses("close_wait_grace_s"),
    expect_within_s=150.0,
)

DUPLICATE = Scenario(
    name="duplicate",
    summary=(
        "A process with two librdkafka producers toward one broker, one busy and one sending "
        "every 40 s with a 25 s idle expiry (reaped and re-opened each time): one finding that "
        "does not flap. A Java producer's bootstrap connection (unused since it opened) and "
        "consumers' coordinator connections are expected: counted, never flagged."
    ),
    cluster="main",
    topics={"scn-dup": 3, "scn-dup2": 1},
    workloads=(
        Workload("java", "producer", "dup-java-producer", "scn-dup", interval_ms=500),
        Workload("java", "consumer", "dup-java-consumer", "scn-dup", "dup-java-g"),
        Workload("rdkafka", "consumer", "dup-rdk-consumer", "scn-dup", "dup-rdk-g"),
        Workload(
            "rdkafka",
            "two-producers",
            "dup-rdk-two-clients",
            "scn-dup2",
            interval_ms=200,
            options={
                "second_interval_ms": 40_000,
                "second_props": {"connections.max.idle.ms": "25000"},
            },
        ),
    ),
    expect=(
        Expect("duplicate_connections", "dup-rdk-two-clients"),
        Expect("duplicate_connections", "dup-java-producer", present=False),
        Expect("duplicate_connections", "dup-java-consumer", present=False),
        Expect("duplicate_connections", "dup-rdk-consumer", present=False),
    ),
    detector=_uses("duplicate_idle_s", "duplicate_resolve_after_s"),
    expect_within_s=90.0,
    duration_s=210.0,
)

ZOMBIE = Scenario(
    name="zombie",
    summary=(
        "Idle expiry disabled on the broker and the clients: connections idle for good "
        "(librdkafka's default 0, Java with connections.max.idle.ms=-1)."
    ),
    cluster="zombie",
    topics={"scn-zombie": 1},
    workloads=(
        Workload("rdkafka", "producer", "zombie-rdk-producer", "scn-zombie", interval_ms=3_600_000),
        Workload(
            "java",
            "idle-producer",
            "zombie-java-producer",
            "scn-zombie",
            interval_ms=3_600_000,
            props={"connections.max.idle.ms": "-1"},
        ),
    ),
    expect=(
        Expect("idle_zombie", "zombie-rdk-producer"),
        Expect("idle_zombie", "zombie-java-producer"),
    ),
    detector=_uses("zombie_idle_s"),
    expect_within_s=180.0,
)

STORM = Scenario(
    name="storm",
    summary=(
        "Producers with 1-10 ms reconnect backoff against a broker that is stopped after 20 s "
        "(refused connects: visible only in the host's AttemptFails), and a librdkafka producer "
        "speaking TLS to a plaintext listener (handshake fails, short-lived sockets)."
    ),
    cluster="storm",
    topics={"scn-storm": 1},
    workloads=(
        Workload(
            "rdkafka",
            "producer",
            "storm-rdk-producer",
            "scn-storm",
            interval_ms=200,
            props={"reconnect.backoff.ms": "1", "reconnect.backoff.max.ms": "10"},
        ),
        Workload(
            "java",
            "producer",
            "storm-java-producer",
            "scn-storm",
            interval_ms=200,
            props={"reconnect.backoff.ms": "1", "reconnect.backoff.max.ms": "10"},
        ),
        Workload(
            "rdkafka",
            "producer",
            "storm-rdk-tls",
            "scn-storm-tls",
            interval_ms=1000,
            props={
                "security.protocol": "SSL",
                "reconnect.backoff.ms": "20",
                "reconnect.backoff.max.ms": "50",
            },
            cluster="main",
            broker=3,
        ),
    ),
    actions=(Action(20.0, "stop_node", 1),),
    # Refused connects leave no socket (docs/observed-client-behaviour.md): the storm shows in
    # the host's AttemptFails and on the broker side, so any app outside other scenarios counts.
    expect=(Expect("connection_storm", ANY_APP, side=ANY_APP),),
    detector=_uses(
        "storm_opens_per_min", "storm_short_lived_s", "storm_host_attempt_fails_per_min"
    ),
    expect_within_s=120.0,
)

TIME_WAIT = Scenario(
    name="time-wait",
    summary=(
        "A client that opens a connection every 100 ms, uses it and closes it 1.5 s later: it "
        "closes first, so ~600 sockets sit in TIME_WAIT (60 s each) toward one broker, and its "
        "connect rate is a storm of the kind a new client per request makes."
    ),
    cluster="main",
    workloads=(
        Workload(
            "raw",
            "churn",
            "timewait-raw-churn",
            interval_ms=100,
            options={"hold_ms": 1500},
            broker=1,
        ),
    ),
    # Every connection succeeds and the client closes it itself: a storm whose advice is to
    # reuse one client, not to back off.
    expect=(
        Expect("time_wait_pileup", "timewait-raw-churn"),
        Expect("connection_storm", "timewait-raw-churn"),
    ),
    detector=_uses("time_wait_warning_count", "storm_opens_per_min", "storm_short_lived_s"),
    expect_within_s=120.0,
)

TWO_CLUSTERS = Scenario(
    name="two-clusters",
    summary=(
        "One raw client talks to broker 1 of two clusters: it leaks its connections to the main "
        "cluster's broker 1 (reaped, then CLOSE_WAIT) and keeps a busy, healthy connection to "
        "the zombie cluster's broker 1. Broker ids repeat across clusters: exactly one finding, "
        "for the main cluster."
    ),
    cluster="main",
    workloads=(
        Workload(
            "raw",
            "close-wait-leak",
            "xcluster-raw-leak",
            interval_ms=3000,
            options={"max_connections": 4},
            broker=1,
            also=("zombie", 1),
        ),
    ),
    expect=(
        Expect("close_wait_buildup", "xcluster-raw-leak", cluster="main"),
        Expect(None, "xcluster-raw-leak", present=False, cluster="zombie"),
    ),
    detector=_uses("close_wait_grace_s"),
    expect_within_s=150.0,
)

RESTART = Scenario(
    name="restart",
    summary=(
        "The broker restarts twice, 120 s apart, under a busy producer and one that sends "
        "every 120 s: the quiet producer's connection is closed after ~60 s idle both times "
        "and re-opened, yet a restart is not idle-timeout churn: no idle_churn finding."
    ),
    cluster="restart",
    topics={"scn-restart-busy": 1, "scn-restart-rare": 1},
    workloads=(
        Workload("rdkafka", "producer", "restart-rdk-busy", "scn-restart-busy", interval_ms=200),
        Workload(
            "rdkafka", "producer", "restart-rdk-rare", "scn-restart-rare", interval_ms=120_000
        ),
    ),
    actions=(
        Action(60.0, "stop_node", 1),
        Action(70.0, "start_node", 1),
        Action(180.0, "stop_node", 1),
        Action(190.0, "start_node", 1),
    ),
    expect=(
        Expect("idle_churn", "restart-rdk-rare", present=False),
        Expect("idle_churn", "restart-rdk-busy", present=False),
    ),
    detector=_uses("idle_churn_min_idle_s", "idle_churn_min_cycles", "idle_churn_window_s"),
    duration_s=270.0,
)


# The Go and Node.js libraries (streaming/scenarios/workloads/programs.py). What each one did on
# the wire, measured with the observer: docs/observed-client-behaviour.md.
_LIBRARY_SETTINGS = _uses(
    "idle_churn_min_idle_s",
    "idle_churn_min_cycles",
    "idle_churn_window_s",
    "close_wait_grace_s",
    "duplicate_idle_s",
    "zombie_idle_s",
)
# Sends every 75 s: the broker reaps the connection after 60 s idle and the next send re-opens
# it, so the second cycle completes ~150 s after the client started.
LIBRARY_IDLE_MS = 75_000
# The library clients start this long into a session: after connmon's job has read its first
# batch. That batch covers everything since the clients started and took 65-105 s on 2 cores;
# ten more clients in it made it 15-30 s longer, and the idle-churn deadline and the Java
# bootstrap leftover (visible only in the windows of its first minute) were missed.
LIBRARY_START_S = 90.0
# From the library clients' start: the second idle cycle (~150-160 s) plus the job's lag.
LIBRARY_EXPECT_S = LIBRARY_START_S + 180.0
# Healthy clients must stay quiet through 210 s of running: the broker's 60 s expiry of their
# unused connections, and two or more idle cycles of the rarely sending producers.
LIBRARY_DURATION_S = LIBRARY_START_S + 210.0


def _started_late(*workloads: Workload) -> tuple[Workload, ...]:
    return tuple(dataclasses.replace(w, start_after_s=LIBRARY_START_S) for w in workloads)


def _quiet(app: str, *kinds: str) -> tuple[Expect, ...]:
    """No finding of these kinds (none at all when no kind is named) for ``app``."""
    if not kinds:
        return (Expect(None, app, present=False),)
    return tuple(Expect(k, app, present=False) for k in kinds)


SARAMA = Scenario(
    name="sarama",
    summary=(
        "Sarama (Go) never reads an idle connection, so a connection the broker reaps sits in "
        "CLOSE_WAIT until Sarama next writes to it. Its seed (bootstrap) connection is never "
        "used after the first metadata: the producer's (Go's default 15 s keep-alive) sits "
        "~75 s in CLOSE_WAIT and then leaves the TCP tables while Sarama still holds it; the "
        "consumer's (keep-alive off, as Go had it before 2019) stays in CLOSE_WAIT. A producer "
        "sending every 75 s: reaped, CLOSE_WAIT until the next send fails on it, re-opened."
    ),
    cluster="main",
    topics={"scn-sarama": 6, "scn-sarama-idle": 1},
    workloads=_started_late(
        Workload("sarama", "producer", "sarama-producer", "scn-sarama", interval_ms=500),
        Workload(
            "sarama",
            "consumer",
            "sarama-consumer",
            "scn-sarama",
            "sarama-g",
            props={"net.keepalive": "-1"},
        ),
        Workload(
            "sarama",
            "idle-producer",
            "sarama-idle-producer",
            "scn-sarama-idle",
            interval_ms=LIBRARY_IDLE_MS,
        ),
    ),
    # The producer's and the idle producer's CLOSE_WAIT sockets last 15-75 s: their findings
    # fire and resolve, often within one batch of a job catching up after its start, so they
    # are not expected here (docs/observed-client-behaviour.md has them).
    expect=(
        Expect("close_wait_buildup", "sarama-consumer", library="sarama", advice="IBM/sarama#760"),
        Expect("idle_churn", "sarama-idle-producer", library="sarama", advice="IBM/sarama#3172"),
        *_quiet("sarama-producer", "idle_churn", "duplicate_connections", "idle_zombie"),
        *_quiet("sarama-consumer", "idle_churn", "duplicate_connections", "idle_zombie"),
    ),
    detector=_LIBRARY_SETTINGS,
    expect_within_s=LIBRARY_EXPECT_S,
    duration_s=LIBRARY_DURATION_S,
)

# franz-go reaps its idle connections itself (conn.idle.timeout, default 30 s, checked every
# 30 s: closed at 30-60 s idle). Against the main cluster's 60 s that is a race the broker
# sometimes wins; 20 s keeps the client first (20-40 s), as it is against the 600 s default.
# No workload churns by that reaper: whether it closes a connection after 20 or 40 s idle
# depends on milliseconds of timer jitter, so its cycles do not fall in one timer band
# (docs/observed-client-behaviour.md).
FRANZ_IDLE = {"conn.idle.timeout": "20s"}

FRANZ_GO = Scenario(
    name="franz-go",
    summary=(
        "franz-go (Go): a busy producer and a consumer group member (up to three connections "
        "per broker: seed, metadata/group, produce or fetch; its own idle reaper closes the "
        "unused ones): no finding. A producer with conn.idle.timeout=5m sending every 75 s: "
        "the broker reaps first, franz-go leaves the socket in CLOSE_WAIT until the next send "
        "fails on it and re-opens: idle churn driven by the broker."
    ),
    cluster="main",
    topics={"scn-franz": 6, "scn-franz-idle": 1},
    workloads=_started_late(
        Workload(
            "franz-go", "producer", "franz-producer", "scn-franz", interval_ms=500, props=FRANZ_IDLE
        ),
        Workload(
            "franz-go", "consumer", "franz-consumer", "scn-franz", "franz-g", props=FRANZ_IDLE
        ),
        Workload(
            "franz-go",
            "idle-producer",
            "franz-idle-broker",
            "scn-franz-idle",
            interval_ms=LIBRARY_IDLE_MS,
            props={"conn.idle.timeout": "5m"},
        ),
    ),
    # franz-idle-broker's CLOSE_WAIT sockets last 15-75 s: not expected, as for Sarama.
    expect=(
        *_quiet("franz-producer"),
        *_quiet("franz-consumer"),
        Expect("idle_churn", "franz-idle-broker", library="franz-go", advice="kgo.ConnIdleTimeout"),
    ),
    detector=_LIBRARY_SETTINGS,
    expect_within_s=LIBRARY_EXPECT_S,
    duration_s=LIBRARY_DURATION_S,
)

KAFKAJS = Scenario(
    name="kafkajs",
    summary=(
        "kafkajs (Node.js): a busy producer (one connection per broker, the bootstrap one "
        "reused) and a consumer group member (two per broker: fetch and everything else): no "
        "finding. A producer sending every 75 s: the broker reaps its connection at 60 s idle, "
        "kafkajs closes its side at once (no CLOSE_WAIT) and re-opens at the next send."
    ),
    cluster="main",
    topics={"scn-kafkajs": 6, "scn-kafkajs-idle": 1},
    workloads=_started_late(
        Workload("kafkajs", "producer", "kafkajs-producer", "scn-kafkajs", interval_ms=500),
        Workload("kafkajs", "consumer", "kafkajs-consumer", "scn-kafkajs", "kafkajs-g"),
        Workload(
            "kafkajs",
            "idle-producer",
            "kafkajs-idle-producer",
            "scn-kafkajs-idle",
            interval_ms=LIBRARY_IDLE_MS,
        ),
    ),
    expect=(
        *_quiet("kafkajs-producer"),
        *_quiet("kafkajs-consumer"),
        Expect(
            "idle_churn",
            "kafkajs-idle-producer",
            library="kafkajs",
            advice="KafkaJS has no client-side idle timeout",
        ),
        *_quiet("kafkajs-idle-producer", "close_wait_buildup"),
    ),
    detector=_LIBRARY_SETTINGS,
    expect_within_s=LIBRARY_EXPECT_S,
    duration_s=LIBRARY_DURATION_S,
)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        HEALTHY,
        IDLE_CHURN,
        CLOSE_WAIT,
        DUPLICATE,
        ZOMBIE,
        STORM,
        TIME_WAIT,
        TWO_CLUSTERS,
        RESTART,
        SARAMA,
        FRANZ_GO,
        KAFKAJS,
    )
}


def get(names: list[str] | None = None) -> list[Scenario]:
    """Scenarios by name (all when ``names`` is empty); an unknown name fails with it."""
    if not names:
        return list(SCENARIOS.values())
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise KeyError(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    return [SCENARIOS[n] for n in names]
