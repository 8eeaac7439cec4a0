"""Advice specific to the client library the agent identified (``client_library`` and its
version), appended after a finding's generic recommendation: the library's own settings and
behaviour, then any known bug of the identified release (``known_issues``).

Every statement here is backed by the library's own documentation, source or issue tracker;
docs/client-libraries.md lists them with links. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from streaming.detectors.known_issues import KnownIssue, at_least, dotted, known_issues
from streaming.schema.clients import (
    CLIENT_LIBRARIES,
    OTHER_VERSION,
    proven,
    version_label,
    version_tuple,
)

Version = tuple[int, ...] | None
# Advice that depends on the wording of the library's name or on its version:
# (name as library_name() words it, parsed version) -> sentence(s). Otherwise a constant.
Rule = Callable[[str, Version], str] | str

# How each library is called in advice, and what its version number belongs to.
_DISPLAY = {
    "java": "the Java client",
    "librdkafka": "librdkafka",
    "sarama": "Sarama",
    "franz-go": "franz-go",
    "kafka-go": "kafka-go",
    "kafkajs": "KafkaJS",
    "kafka-python": "kafka-python",
    "aiokafka": "aiokafka",
    "kafka-rust": "kafka-rust",
}
_PACKAGE = {"java": "kafka-clients", "kafka-rust": "kafka crate"}


def library_name(library: str | None, version: str | None) -> str:
    """Human wording, e.g. 'the Java client (kafka-clients 4.3.1)', 'librdkafka 2.16.1',
    'Sarama 1.43.2'; "" when the library is not one connmon knows."""
    if library not in CLIENT_LIBRARIES:
        return ""
    label = version_label(version)
    shown = "" if label in ("", OTHER_VERSION) else label
    display = _DISPLAY[library]
    package = _PACKAGE.get(library)
    if package:
        return f"{display} ({package} {shown})" if shown else f"{display} ({package})"
    return f"{display} {shown}" if shown else display


def _cap(name: str) -> str:
    """A library name at the start of a sentence ('the Java client ...' -> 'The ...'); library
    names spelled in lower case (librdkafka, franz-go) stay so."""
    return "T" + name[1:] if name.startswith("the ") else name


# ---- close_wait_buildup ----------------------------------------------------------------------
# Sarama connection leaks and the release that fixed each (docs/client-libraries.md).
SARAMA_LEAK_FIXES: tuple[tuple[tuple[int, ...], str], ...] = (
    ((1, 33, 0), "IBM/sarama#2074"),  # RefreshBrokers left the seed brokers' connections open
    ((1, 47, 0), "IBM/sarama#3412"),  # a connection that failed with EOF or a reset stayed open
    ((1, 48, 0), "IBM/sarama#3143"),  # seed-broker sockets that hit an error were never closed
)
SARAMA_LEAKS_FIXED_IN = SARAMA_LEAK_FIXES[-1][0]
_SARAMA_NO_IDLE = (
    "Sarama has no idle timeout of its own (IBM/sarama#760): a connection the broker closes "
    "while Sarama is not using it stays in CLOSE_WAIT until Sarama's next request to that "
    "broker."
)


def _sarama_close_wait(name: str, v: Version) -> str:
    fixed = dotted(SARAMA_LEAKS_FIXED_IN)
    ok = at_least(v, SARAMA_LEAKS_FIXED_IN)
    refs = [(at, ref) for at, ref in SARAMA_LEAK_FIXES if not ok and not at_least(v, at)]
    listed = ", ".join(f"{dotted(at)} ({ref})" for at, ref in refs)
    if ok is None:
        first = f"Sarama fixed connection leaks in {listed}: upgrade to >= {fixed} if older."
    elif ok:
        done = ", ".join(ref for _at, ref in SARAMA_LEAK_FIXES)
        first = f"{_cap(name)} includes the leak fixes ({done})."
    else:
        first = f"{_cap(name)} lacks the leak fixes of {listed}: upgrade to >= {fixed}."
    return f"{first} {_SARAMA_NO_IDLE}"


_JAVA_CLOSE_WAIT = (
    "In the Java client a classic KafkaConsumer that stops calling poll() leaves its group "
    "after max.poll.interval.ms (default 300000) and then no thread reads its sockets, so "
    "connections the broker closes stay in CLOSE_WAIT: find the stuck processing (thread "
    "dump) or close() the consumer."
)

_LIBRDKAFKA_CLOSE_WAIT = (
    "librdkafka's own broker threads close a socket once the broker has closed it, even "
    "when the application does not call poll(), so lasting CLOSE_WAIT is not expected "
    "from it: check whether the process is suspended or the sockets belong to other code "
    "in it."
)

_FRANZ_GO_CLOSE_WAIT = (
    "franz-go closes any connection idle for kgo.ConnIdleTimeout (default 30s, at worst "
    "twice that) even when nothing uses the client, so CLOSE_WAIT lasting minutes is not "
    "expected from it: take a goroutine dump and report it to twmb/franz-go."
)

_KAFKA_GO_CLOSE_WAIT = (
    "kafka-go's Transport (behind Writer and Client) closes connections idle for "
    "Transport.IdleTimeout (default 30s); lasting CLOSE_WAIT points to a kafka.Conn "
    "opened with kafka.Dial or DialLeader that the application never Close()s."
)

_KAFKAJS_CLOSE_WAIT = (
    "KafkaJS ends its socket as soon as it sees the broker's close, so lasting CLOSE_WAIT "
    "points to a blocked Node.js event loop rather than to KafkaJS."
)


KAFKA_PYTHON_NEW_NETWORKING = (3, 0, 0)


def _kafka_python_close_wait(name: str, v: Version) -> str:
    if at_least(v, KAFKA_PYTHON_NEW_NETWORKING):
        return ""  # 3.0 rewrote the networking layer; the 2.x behaviour below is not verified
    return (
        "A kafka-python 2.x KafkaConsumer whose application stops calling poll() leaves its "
        "group after max_poll_interval_ms (default 300000) and its heartbeat thread stops "
        "polling the network, so connections the broker closes stay in CLOSE_WAIT: find the "
        "stuck processing or close() the consumer."
    )


_AIOKAFKA_CLOSE_WAIT = (
    "aiokafka closes a connection as soon as its reader task sees the broker's close, so "
    "lasting CLOSE_WAIT points to a blocked asyncio event loop (long synchronous work in "
    "a coroutine) rather than to aiokafka."
)

_KAFKA_RUST_CLOSE_WAIT = (
    "kafka-rust never closes idle connections itself: set_connection_idle_timeout "
    "(default 540000 ms) only replaces one at its next use, so connections the broker "
    "closed stay in CLOSE_WAIT until then (kafka-rust#118, #178: open, no fixed release); "
    "a restart releases them."
)


# ---- idle_churn ------------------------------------------------------------------------------
_JAVA_IDLE_CHURN = (
    "In the Java client connections.max.idle.ms defaults to 540000 for KafkaProducer and "
    "KafkaConsumer and 300000 for Admin (a negative value disables it): set it on the "
    "client that churns, above its request interval."
)

_LIBRDKAFKA_IDLE_CHURN = (
    "librdkafka closes idle connections only when connections.max.idle.ms is set (default "
    '0 = never, or under 4 minutes when bootstrap.servers contains "azure"); otherwise '
    "the broker's or a load balancer's timer closes them and librdkafka reconnects to the "
    "brokers it needs."
)

_SARAMA_IDLE_CHURN = (
    "Sarama has no client-side idle timeout (IBM/sarama#760) and Net.KeepAlive (TCP "
    "keep-alive) is not Kafka traffic, so the broker or a load balancer closes idle "
    "connections; the next request on one fails with EOF or broken pipe and is retried "
    "(IBM/sarama#3172)."
)

_FRANZ_GO_IDLE_CHURN = (
    "franz-go closes connections idle for kgo.ConnIdleTimeout (default 30s, at worst twice "
    "that, at most 15m): raise it above the client's request interval to keep them."
)

_KAFKA_GO_IDLE_CHURN = (
    "kafka-go closes connections idle for Transport.IdleTimeout (default 30s, also in "
    "DefaultTransport, which a Writer or Client without its own Transport uses): give it "
    "a Transport with a longer IdleTimeout to keep them."
)

_KAFKAJS_IDLE_CHURN = (
    "KafkaJS has no client-side idle timeout: the broker or a load balancer closes idle "
    "connections and KafkaJS reconnects at its next request, so only the broker's "
    "connections.max.idle.ms or the load balancer's idle timeout can be raised."
)

_KAFKA_PYTHON_IDLE_CHURN = (
    "kafka-python's connections_max_idle_ms defaults to 540000 for KafkaProducer, "
    "KafkaConsumer and KafkaAdminClient alike: set it on the client that churns, above its "
    "request interval."
)

_AIOKAFKA_IDLE_CHURN = (
    "aiokafka's connections_max_idle_ms defaults to 540000 for AIOKafkaProducer, "
    "AIOKafkaConsumer and AIOKafkaAdminClient (None disables it): set it on the client "
    "that churns, above its request interval."
)

_KAFKA_RUST_IDLE_CHURN = (
    "kafka-rust never closes idle connections itself (kafka-rust#118): the broker does, "
    "and KafkaClient::set_connection_idle_timeout (default 540000 ms) only makes the "
    "client open a new connection at its next use; keep it below the broker's "
    "connections.max.idle.ms."
)


# ---- duplicate_connections -------------------------------------------------------------------
_JAVA_DUPLICATES = (
    "The Java client keeps each bootstrap connection it used until connections.max.idle.ms "
    "(540000; Admin 300000) closes it, and every KafkaProducer, KafkaConsumer and Admin "
    "opens its own connections: share one KafkaProducer across threads (it is thread-safe)."
)


LIBRDKAFKA_CLOSES_BOOTSTRAP = (2, 10, 0)
_RDK_HANDLES = (
    "every producer, consumer and admin client (rd_kafka_t) has its own connections: share "
    "one producer (the API is thread-safe) and close clients no longer needed."
)


def _librdkafka_duplicates(name: str, v: Version) -> str:
    fixed = dotted(LIBRDKAFKA_CLOSES_BOOTSTRAP)
    ok = at_least(v, LIBRDKAFKA_CLOSES_BOOTSTRAP)
    if ok is None:
        return (
            f"Since {fixed} librdkafka closes its bootstrap connections once it knows the "
            f"brokers, and {_RDK_HANDLES}"
        )
    if ok:
        return (
            f"{_cap(name)} closes its bootstrap connections once it knows the brokers (since "
            f"{fixed}), so an extra connection that carried data belongs to another client; "
            f"{_RDK_HANDLES}"
        )
    return (
        f"{_cap(name)} can keep a bootstrap connection until an idle timer closes it (upgrade "
        f"to >= {fixed}, which drops brokers missing from metadata), and {_RDK_HANDLES}"
    )


_SARAMA_DUPLICATES = (
    "A sarama.Client keeps one connection per broker (its consumer-group coordinator "
    "shares it) plus the seed-broker connection of its first metadata request, and "
    "NewSyncProducer, NewAsyncProducer, NewConsumer and NewConsumerGroup each create their "
    "own Client: create one Client and pass it to the ...FromClient constructors."
)


FRANZ_GO_FIVE_CONNECTIONS = (1, 2, 0)


def _franz_go_duplicates(name: str, v: Version) -> str:
    if at_least(v, FRANZ_GO_FIVE_CONNECTIONS) is False:
        kinds = "up to three connections per broker (produce, fetch, everything else)"
    else:
        kinds = (
            "up to five connections per broker (produce, fetch, group join/sync, requests "
            "with a timeout, everything else)"
        )
    return (
        f"One kgo.Client opens {kinds}, each closed after kgo.ConnIdleTimeout (default 30s), "
        "so several connections from one client to a broker are normal for franz-go; several "
        "kgo.Client instances multiply them: reuse one."
    )


def connections_per_client(library: str | None, version: str | None) -> int:
    """How many connections to one broker a single client of ``library`` may hold by design
    while in use (the group coordinator's aside): 1 for most libraries; franz-go and KafkaJS
    split request types over several. An unknown version counts as the newest behaviour."""
    v = version_tuple(version)
    if library == "franz-go":
        return 3 if at_least(v, FRANZ_GO_FIVE_CONNECTIONS) is False else 5
    if library == "kafkajs":
        return 1 if at_least(v, KAFKAJS_FETCH_CONNECTION) is False else 2
    return 1


_KAFKA_GO_DUPLICATES = (
    "A kafka-go Reader opens its own connection to the leader of each partition it reads, "
    "so one Reader holds several connections to a broker; Writers and Clients share "
    "connections only through a shared Transport: share one and Close() Readers and "
    "Writers no longer needed."
)


KAFKAJS_FETCH_CONNECTION = (2, 0, 0)


def _kafkajs_duplicates(name: str, v: Version) -> str:
    since = dotted(KAFKAJS_FETCH_CONNECTION)
    ok = at_least(v, KAFKAJS_FETCH_CONNECTION)
    if ok is None:
        per_broker = (
            f"Since {since} KafkaJS opens two connections per broker per client (one for "
            "Fetch, one for everything else)"
        )
    elif ok:
        per_broker = (
            f"{_cap(name)} opens two connections per broker per client (one for Fetch, one "
            "for everything else)"
        )
    else:
        per_broker = f"{_cap(name)} opens one connection per broker per client"
    return (
        f"{per_broker}, and each producer(), consumer() and admin() has its own: reuse one "
        "producer and call disconnect() on clients the application no longer needs."
    )


_KAFKA_PYTHON_DUPLICATES = (
    "Each kafka-python KafkaProducer, KafkaConsumer and KafkaAdminClient opens its own "
    "connections: share one KafkaProducer across threads (it is thread-safe) and close() "
    "clients no longer needed."
)

_AIOKAFKA_DUPLICATES = (
    "aiokafka closes its bootstrap connection after the first metadata and talks to group "
    "and transaction coordinators over a separate connection; every AIOKafkaProducer, "
    "AIOKafkaConsumer and AIOKafkaAdminClient has its own connections: share one producer "
    "and stop() clients no longer needed."
)

_KAFKA_RUST_DUPLICATES = (
    "kafka-rust keeps one connection per broker address per KafkaClient, and every "
    "Producer or Consumer built with from_hosts creates its own KafkaClient: drop the ones "
    "the application no longer needs."
)


# ---- connection_storm ------------------------------------------------------------------------
_JAVA_STORM = (
    "In the Java client reconnect.backoff.ms defaults to 50 and reconnect.backoff.max.ms "
    "to 1000 (with 20% jitter): raise both, and create each KafkaProducer, KafkaConsumer "
    "or Admin once and reuse it."
)

_LIBRDKAFKA_STORM = (
    "librdkafka's reconnect.backoff.ms defaults to 100 and reconnect.backoff.max.ms to "
    "10000 (-25% to +50% jitter): restore them if they were lowered, and keep one producer "
    "per process instead of one per request."
)

_SARAMA_STORM = (
    "Sarama has no reconnect backoff: it paces retries with Metadata.Retry.Backoff (250ms, "
    "Metadata.Retry.Max 3), Producer.Retry.Backoff (100ms, Producer.Retry.Max 3) and "
    "Consumer.Retry.Backoff (2s); raise these (or set the BackoffFunc variants) and share "
    "one sarama.Client per process."
)

_FRANZ_GO_STORM = (
    "franz-go has no reconnect backoff setting: failed requests retry after "
    "kgo.RetryBackoffFn (default 250ms doubling to 5s, with jitter) up to "
    "kgo.RequestRetries (20); create one kgo.Client per process and reuse it."
)

_KAFKA_GO_STORM = (
    "kafka-go has no reconnect backoff setting: a Writer retries a batch up to MaxAttempts "
    "(10) waiting WriteBackoffMin to WriteBackoffMax (100ms to 1s), a Reader reconnects "
    "after ReadBackoffMin to ReadBackoffMax (100ms to 1s); raise these and reuse one "
    "Writer instead of one per message."
)

_KAFKAJS_STORM = (
    "KafkaJS retries connections with retry.initialRetryTime (300 ms) doubling up to "
    "retry.maxRetryTime (30000) for retry.retries (5) attempts, after which a consumer "
    "restarts and starts over: raise initialRetryTime and retries, and create each "
    "producer once and reuse it."
)


KAFKA_PYTHON_BACKOFF_MAX_30S = (2, 0, 4)


def _kafka_python_storm(name: str, v: Version) -> str:
    since = dotted(KAFKA_PYTHON_BACKOFF_MAX_30S)
    ok = at_least(v, KAFKA_PYTHON_BACKOFF_MAX_30S)
    reuse = "reuse one KafkaProducer instead of one per request."
    if ok is None:
        return (
            "kafka-python's reconnect_backoff_ms defaults to 50 and reconnect_backoff_max_ms "
            f"to 30000 since {since} (1000 before): raise them if lower, and {reuse}"
        )
    if ok:
        return (
            f"{_cap(name)} defaults to reconnect_backoff_ms 50 and reconnect_backoff_max_ms "
            f"30000: raise them if they were lowered, and {reuse}"
        )
    return (
        f"{_cap(name)} defaults to reconnect_backoff_ms 50 and reconnect_backoff_max_ms 1000; "
        f"{since} raised the default maximum to 30000: set it (or upgrade to >= {since}), and "
        f"{reuse}"
    )


_AIOKAFKA_STORM = (
    "aiokafka has no reconnect backoff setting: it retries after retry_backoff_ms "
    "(default 100); raise it, and start one AIOKafkaProducer per process instead of one "
    "per request."
)

_KAFKA_RUST_STORM = (
    "kafka-rust retries after KafkaClient::set_retry_backoff_time (default 100 ms) up to "
    "set_retry_max_attempts (default 1200, about two minutes): raise the backoff and reuse "
    "one client."
)


# ---- idle_zombie -----------------------------------------------------------------------------
_JAVA_ZOMBIE = (
    "In the Java client only a negative connections.max.idle.ms disables idle expiry: "
    "restore the default (540000; Admin 300000)."
)

_LIBRDKAFKA_ZOMBIE = (
    "librdkafka's connections.max.idle.ms defaults to 0 (never): set it, e.g. to 540000 "
    "like the Java client, and destroy client handles the application no longer uses "
    "(they keep their connections)."
)

_SARAMA_ZOMBIE = (
    "Sarama cannot close idle connections itself (no idle timeout, IBM/sarama#760): set the "
    "broker's connections.max.idle.ms back to a finite value."
)

_KAFKA_GO_ZOMBIE = (
    "kafka-go's Transport closes idle connections after Transport.IdleTimeout (default "
    "30s), but a kafka.Conn opened with kafka.Dial or DialLeader has no idle timeout: "
    "Close() it when done."
)

_KAFKAJS_ZOMBIE = (
    "KafkaJS has no idle timeout of its own, so only the broker's connections.max.idle.ms "
    "closes these: call disconnect() on clients no longer in use."
)

_KAFKA_PYTHON_ZOMBIE = "Set kafka-python's connections_max_idle_ms back to its default, 540000."

_AIOKAFKA_ZOMBIE = (
    "aiokafka skips idle checks when connections_max_idle_ms is None: set it back to its "
    "default, 540000."
)

_KAFKA_RUST_ZOMBIE = (
    "kafka-rust never closes idle connections itself (kafka-rust#118): only a finite "
    "connections.max.idle.ms on the broker closes them."
)


# ---- time_wait_pileup (client side: the client closes first) ---------------------------------
_FRANZ_GO_TIME_WAIT = (
    "franz-go closes connections idle for kgo.ConnIdleTimeout (default 30s) and dials "
    "again at the next request: raise it (at most 15m) above the client's request "
    "interval."
)

_KAFKA_GO_TIME_WAIT = (
    "kafka-go closes connections idle for Transport.IdleTimeout (default 30s) and dials "
    "again at the next request: share one Transport with a longer IdleTimeout and reuse "
    "one Writer."
)


RULES: dict[str, dict[str, Rule]] = {
    "close_wait_buildup": {
        "java": _JAVA_CLOSE_WAIT,
        "librdkafka": _LIBRDKAFKA_CLOSE_WAIT,
        "sarama": _sarama_close_wait,
        "franz-go": _FRANZ_GO_CLOSE_WAIT,
        "kafka-go": _KAFKA_GO_CLOSE_WAIT,
        "kafkajs": _KAFKAJS_CLOSE_WAIT,
        "kafka-python": _kafka_python_close_wait,
        "aiokafka": _AIOKAFKA_CLOSE_WAIT,
        "kafka-rust": _KAFKA_RUST_CLOSE_WAIT,
    },
    "idle_churn": {
        "java": _JAVA_IDLE_CHURN,
        "librdkafka": _LIBRDKAFKA_IDLE_CHURN,
        "sarama": _SARAMA_IDLE_CHURN,
        "franz-go": _FRANZ_GO_IDLE_CHURN,
        "kafka-go": _KAFKA_GO_IDLE_CHURN,
        "kafkajs": _KAFKAJS_IDLE_CHURN,
        "kafka-python": _KAFKA_PYTHON_IDLE_CHURN,
        "aiokafka": _AIOKAFKA_IDLE_CHURN,
        "kafka-rust": _KAFKA_RUST_IDLE_CHURN,
    },
    "duplicate_connections": {
        "java": _JAVA_DUPLICATES,
        "librdkafka": _librdkafka_duplicates,
        "sarama": _SARAMA_DUPLICATES,
        "franz-go": _franz_go_duplicates,
        "kafka-go": _KAFKA_GO_DUPLICATES,
        "kafkajs": _kafkajs_duplicates,
        "kafka-python": _KAFKA_PYTHON_DUPLICATES,
        "aiokafka": _AIOKAFKA_DUPLICATES,
        "kafka-rust": _KAFKA_RUST_DUPLICATES,
    },
    "connection_storm": {
        "java": _JAVA_STORM,
        "librdkafka": _LIBRDKAFKA_STORM,
        "sarama": _SARAMA_STORM,
        "franz-go": _FRANZ_GO_STORM,
        "kafka-go": _KAFKA_GO_STORM,
        "kafkajs": _KAFKAJS_STORM,
        "kafka-python": _kafka_python_storm,
        "aiokafka": _AIOKAFKA_STORM,
        "kafka-rust": _KAFKA_RUST_STORM,
    },
    "idle_zombie": {
        "java": _JAVA_ZOMBIE,
        "librdkafka": _LIBRDKAFKA_ZOMBIE,
        "sarama": _SARAMA_ZOMBIE,
        "kafka-go": _KAFKA_GO_ZOMBIE,
        "kafkajs": _KAFKAJS_ZOMBIE,
        "kafka-python": _KAFKA_PYTHON_ZOMBIE,
        "aiokafka": _AIOKAFKA_ZOMBIE,
        "kafka-rust": _KAFKA_RUST_ZOMBIE,
    },
    "time_wait_pileup": {
        "franz-go": _FRANZ_GO_TIME_WAIT,
        "kafka-go": _KAFKA_GO_TIME_WAIT,
    },
}


def known_issue_sentence(issue: KnownIssue) -> str:
    """'Known issue in librdkafka 2.10.0, fixed in 2.10.1: <what the bug does> (<link>).'"""
    display = _DISPLAY[issue.library]
    package = _PACKAGE.get(issue.library)
    span = issue.span()
    name = f"{display} ({package} {span})" if package else f"{display} {span}"
    return f"Known issue in {name}, fixed in {dotted(issue.fixed)}: {issue.what} ({issue.link})."


def known_issue_advice(
    kind: str,
    library: str | None,
    version: str | None,
    evidence: str | None = None,
    storm_cause: str | None = None,
) -> str:
    """A sentence per known bug of the identified release that a finding of ``kind`` may show
    (``known_issues.known_issues``); "" when there is none."""
    found = known_issues(kind, library, version, evidence, storm_cause)
    return " ".join(known_issue_sentence(issue) for issue in found)


def library_advice(
    kind: str,
    side: str,
    library: str | None,
    version: str | None,
    evidence: str | None = None,
    storm_cause: str | None = None,
    known: bool = True,
) -> str:
    """One or two sentences specific to the identified library for a finding of ``kind``
    (streaming.schema.findings.KINDS), then one per known bug of the identified release
    (``known_issue_advice``; a connection_storm finding's ``storm_cause`` narrows them); ""
    when the library is unknown, not proven in use (``evidence`` "installed": a package beside
    the process says nothing of what it runs) or has nothing specific to say. Settings named
    exactly as the library spells them, with defaults; fixed releases cited. ``known`` False:
    without the known bugs (a caller that places them itself)."""
    if side != "client" or library not in CLIENT_LIBRARIES or not proven(evidence):
        return ""
    rule = RULES.get(kind, {}).get(library)
    if rule is None:
        own = ""
    elif isinstance(rule, str):
        own = rule
    else:
        own = rule(library_name(library, version), version_tuple(version))
    bugs = known_issue_advice(kind, library, version, evidence, storm_cause) if known else ""
    return " ".join(text for text in (own, bugs) if text)
