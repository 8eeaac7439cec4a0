"""Library-specific advice: one table row per rule, the facts each sentence must carry (setting
names, defaults, fixed releases; see docs/client-libraries.md for the sources), the version
boundaries of version-aware rules, and the cases that get no advice."""

from __future__ import annotations

import pytest

from streaming.detectors.libraries import (
    RULES,
    at_least,
    known_issue_advice,
    library_advice,
    library_name,
)
from streaming.schema.clients import CLIENT_LIBRARIES
from streaming.schema.findings import KINDS

# (kind, library, version, facts the advice must state, words it must not contain)
ROWS: list[tuple[str, str, str | None, tuple[str, ...], tuple[str, ...]]] = [
    # ---- close_wait_buildup
    ("close_wait_buildup", "java", "4.3.1", ("poll()", "max.poll.interval.ms", "300000"), ()),
    ("close_wait_buildup", "librdkafka", "2.16.1", ("poll()", "not expected"), ("upgrade",)),
    ("close_wait_buildup", "franz-go", None, ("kgo.ConnIdleTimeout", "30s"), ()),
    ("close_wait_buildup", "kafka-go", None, ("Transport.IdleTimeout", "30s", "kafka.Dial"), ()),
    ("close_wait_buildup", "kafkajs", "2.2.4", ("event loop",), ("upgrade",)),
    ("close_wait_buildup", "kafka-python", "2.0.2", ("max_poll_interval_ms", "300000"), ()),
    ("close_wait_buildup", "aiokafka", "0.12.0", ("event loop",), ("upgrade",)),
    (
        "close_wait_buildup",
        "kafka-rust",
        "0.10.0",
        ("set_connection_idle_timeout", "540000", "#118", "#178", "no fixed release"),
        ("upgrade",),
    ),
    # ---- idle_churn
    (
        "idle_churn",
        "java",
        "3.9.0",
        ("connections.max.idle.ms", "540000", "300000", "Admin", "negative"),
        (),
    ),
    (
        "idle_churn",
        "librdkafka",
        "2.16.1",
        ("connections.max.idle.ms", "default 0", "azure"),
        ("540000",),
    ),
    ("idle_churn", "sarama", "1.43.2", ("#760", "Net.KeepAlive", "EOF"), ("connections_max",)),
    ("idle_churn", "franz-go", "1.18.0", ("kgo.ConnIdleTimeout", "30s", "15m"), ()),
    ("idle_churn", "kafka-go", "0.4.47", ("Transport.IdleTimeout", "30s", "DefaultTransport"), ()),
    ("idle_churn", "kafkajs", "2.2.4", ("no client-side idle timeout",), ()),
    (
        "idle_churn",
        "kafka-python",
        "2.0.2",
        ("connections_max_idle_ms", "540000", "KafkaAdminClient"),
        ("300000",),
    ),
    ("idle_churn", "aiokafka", "0.12.0", ("connections_max_idle_ms", "540000", "None"), ()),
    ("idle_churn", "kafka-rust", "0.10.0", ("set_connection_idle_timeout", "540000", "#118"), ()),
    # ---- duplicate_connections
    (
        "duplicate_connections",
        "java",
        "4.3.1",
        ("bootstrap", "connections.max.idle.ms", "540000", "thread-safe"),
        (),
    ),
    (
        "duplicate_connections",
        "sarama",
        "1.43.2",
        ("one connection per broker", "seed-broker", "FromClient"),
        (),
    ),
    (
        "duplicate_connections",
        "franz-go",
        "1.18.0",
        ("five connections per broker", "produce", "fetch", "normal"),
        (),
    ),
    (
        "duplicate_connections",
        "kafka-go",
        "0.4.47",
        ("Reader", "each partition", "Transport"),
        (),
    ),
    (
        "duplicate_connections",
        "kafka-python",
        "2.0.2",
        ("KafkaProducer", "KafkaAdminClient", "thread-safe"),
        (),
    ),
    (
        "duplicate_connections",
        "aiokafka",
        "0.12.0",
        ("bootstrap connection", "coordinator", "stop()"),
        (),
    ),
    ("duplicate_connections", "kafka-rust", "0.10.0", ("KafkaClient", "from_hosts"), ()),
    # ---- connection_storm
    (
        "connection_storm",
        "java",
        "4.3.1",
        ("reconnect.backoff.ms", "50", "reconnect.backoff.max.ms", "1000", "reuse"),
        (),
    ),
    (
        "connection_storm",
        "librdkafka",
        "2.16.1",
        ("reconnect.backoff.ms", "100", "reconnect.backoff.max.ms", "10000"),
        (),
    ),
    (
        "connection_storm",
        "sarama",
        "1.43.2",
        ("Metadata.Retry.Backoff", "250ms", "Producer.Retry.Backoff", "100ms", "sarama.Client"),
        ("reconnect.backoff.ms",),
    ),
    (
        "connection_storm",
        "franz-go",
        "1.18.0",
        ("kgo.RetryBackoffFn", "250ms", "5s", "kgo.RequestRetries", "20"),
        ("reconnect.backoff.ms",),
    ),
    (
        "connection_storm",
        "kafka-go",
        "0.4.47",
        ("MaxAttempts", "10", "WriteBackoffMin", "ReadBackoffMax", "100ms", "1s"),
        (),
    ),
    (
        "connection_storm",
        "kafkajs",
        "2.2.4",
        ("initialRetryTime", "300", "maxRetryTime", "30000", "retries", "(5)"),
        (),
    ),
    ("connection_storm", "aiokafka", "0.12.0", ("retry_backoff_ms", "100"), ("reconnect_",)),
    (
        "connection_storm",
        "kafka-rust",
        "0.10.0",
        ("set_retry_backoff_time", "100 ms", "set_retry_max_attempts", "1200"),
        (),
    ),
    # ---- idle_zombie
    ("idle_zombie", "java", "4.3.1", ("negative", "connections.max.idle.ms", "540000"), ()),
    ("idle_zombie", "librdkafka", "2.16.1", ("connections.max.idle.ms", "defaults to 0"), ()),
    ("idle_zombie", "sarama", "1.43.2", ("#760", "broker's connections.max.idle.ms"), ()),
    ("idle_zombie", "kafka-go", "0.4.47", ("kafka.Conn", "Close()"), ()),
    ("idle_zombie", "kafkajs", "2.2.4", ("disconnect()",), ()),
    ("idle_zombie", "kafka-python", "2.0.2", ("connections_max_idle_ms", "540000"), ()),
    ("idle_zombie", "aiokafka", "0.12.0", ("connections_max_idle_ms", "None", "540000"), ()),
    ("idle_zombie", "kafka-rust", "0.10.0", ("#118",), ()),
    # ---- time_wait_pileup (client side: the client closes first)
    ("time_wait_pileup", "franz-go", "1.18.0", ("kgo.ConnIdleTimeout", "30s", "15m"), ()),
    ("time_wait_pileup", "kafka-go", "0.4.47", ("Transport.IdleTimeout", "30s"), ()),
]


@pytest.mark.parametrize(("kind", "library", "version", "facts", "absent"), ROWS)
def test_rule_states_its_facts(kind, library, version, facts, absent):
    text = library_advice(kind, "client", library, version)
    for fact in facts:
        assert fact in text, f"{kind}/{library}: {fact!r} missing from {text!r}"
    for word in absent:
        assert word not in text, f"{kind}/{library}: {word!r} in {text!r}"


# ---- version boundaries: before, at and after the release that changed the behaviour ----------
# Sarama leak fixes: IBM/sarama#2074 in 1.33.0, #3412 in 1.47.0, #3143 in 1.48.0.
@pytest.mark.parametrize(
    ("version", "missing", "fixed"),
    [
        ("1.32.0", ("#2074", "#3412", "#3143"), False),
        ("1.33.0", ("#3412", "#3143"), False),
        ("v1.46.3", ("#3412", "#3143"), False),
        ("1.47.0", ("#3143",), False),
        ("1.47.9", ("#3143",), False),
        ("1.48.0", (), True),
        ("1.48", (), True),
        ("1.60.1", (), True),
    ],
)
def test_sarama_close_wait_cites_missing_fixes(version, missing, fixed):
    text = library_advice("close_wait_buildup", "client", "sarama", version)
    assert "#760" in text  # no idle timeout of its own, whatever the version
    if fixed:
        assert "upgrade" not in text
        assert "includes the leak fixes" in text
        for ref in ("#2074", "#3412", "#3143"):
            assert ref in text
    else:
        assert "upgrade to >= 1.48.0" in text
        for ref in missing:
            assert ref in text
        for ref in {"#2074", "#3412", "#3143"} - set(missing):
            assert ref not in text, f"{version} already has the fix for {ref}"


def test_sarama_close_wait_unknown_version_lists_every_fix():
    text = library_advice("close_wait_buildup", "client", "sarama", None)
    for fixed_in, ref in (("1.33.0", "#2074"), ("1.47.0", "#3412"), ("1.48.0", "#3143")):
        assert f"{fixed_in} (IBM/sarama{ref})" in text
    assert "upgrade to >= 1.48.0 if older" in text


# librdkafka closes its bootstrap connections since 2.10.0.
@pytest.mark.parametrize(
    ("version", "upgrade"),
    [("2.9.9", True), ("2.10.0", False), ("2.10.1", False), ("2.16.1", False)],
)
def test_librdkafka_bootstrap_boundary(version, upgrade):
    text = library_advice("duplicate_connections", "client", "librdkafka", version)
    assert "rd_kafka_t" in text and "thread-safe" in text
    assert ("upgrade to >= 2.10.0" in text) is upgrade
    if not upgrade:
        assert "since 2.10.0" in text and "closes its bootstrap connections" in text


def test_librdkafka_bootstrap_unknown_version():
    text = library_advice("duplicate_connections", "client", "librdkafka", None)
    assert text.startswith("Since 2.10.0") and "upgrade" not in text


# KafkaJS opens a second connection per broker (for Fetch) since 2.0.0.
@pytest.mark.parametrize(
    ("version", "per_broker"),
    [("1.16.0", "one connection"), ("2.0.0", "two connections"), ("2.2.4", "two connections")],
)
def test_kafkajs_connections_per_broker(version, per_broker):
    text = library_advice("duplicate_connections", "client", "kafkajs", version)
    assert per_broker in text and "disconnect()" in text


def test_kafkajs_unknown_version_names_the_release():
    text = library_advice("duplicate_connections", "client", "kafkajs", None)
    assert "Since 2.0.0" in text and "two connections" in text


# kafka-python raised the default reconnect_backoff_max_ms from 1000 to 30000 in 2.0.4.
@pytest.mark.parametrize(
    ("version", "cap", "upgrade"),
    [("2.0.3", "1000", True), ("2.0.4", "30000", False), ("3.0.11", "30000", False)],
)
def test_kafka_python_backoff_boundary(version, cap, upgrade):
    text = library_advice("connection_storm", "client", "kafka-python", version)
    assert "reconnect_backoff_ms 50" in text
    assert f"reconnect_backoff_max_ms {cap}" in text
    assert ("upgrade to >= 2.0.4" in text) is upgrade


def test_kafka_python_backoff_unknown_version():
    text = library_advice("connection_storm", "client", "kafka-python", None)
    assert "30000 since 2.0.4" in text and "1000 before" in text


# The stalled-consumer CLOSE_WAIT is verified for kafka-python 2.x only (3.0 new networking).
@pytest.mark.parametrize(("version", "advice"), [("2.2.15", True), ("3.0.0", False)])
def test_kafka_python_stalled_consumer_boundary(version, advice):
    text = library_advice("close_wait_buildup", "client", "kafka-python", version)
    assert bool(text) is advice


# franz-go added the group and slow connections in 1.2.0.
@pytest.mark.parametrize(
    ("version", "count"), [("1.1.4", "three"), ("1.2.0", "five"), ("1.21.5", "five")]
)
def test_franz_go_connection_types(version, count):
    text = library_advice("duplicate_connections", "client", "franz-go", version)
    assert f"up to {count} connections per broker" in text


# ---- no advice ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("library", CLIENT_LIBRARIES)
def test_broker_side_gets_no_library_advice(kind, library):
    assert library_advice(kind, "broker", library, "1.0.0") == ""


@pytest.mark.parametrize("library", [None, "", "unknown", "other", "pulsar-client"])
@pytest.mark.parametrize("kind", KINDS)
def test_unknown_library_gets_no_advice(kind, library):
    assert library_advice(kind, "client", library, "1.2.3") == ""


@pytest.mark.parametrize(
    ("kind", "library"),
    [
        ("time_wait_pileup", "java"),
        ("time_wait_pileup", "librdkafka"),
        ("time_wait_pileup", "sarama"),
        ("idle_zombie", "franz-go"),
        ("not_a_kind", "java"),
    ],
)
def test_nothing_specific_to_say(kind, library):
    assert library_advice(kind, "client", library, "1.0.0") == ""


def test_every_library_has_advice_for_the_main_kinds():
    for kind in ("close_wait_buildup", "idle_churn", "duplicate_connections", "connection_storm"):
        for library in CLIENT_LIBRARIES:
            assert library_advice(kind, "client", library, None), (kind, library)


def test_rules_only_for_known_kinds_and_libraries():
    assert set(RULES) <= set(KINDS)
    for rules in RULES.values():
        assert set(rules) <= set(CLIENT_LIBRARIES)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("library", CLIENT_LIBRARIES)
@pytest.mark.parametrize("version", [None, "0.0.1", "1.2", "99.0.0", "garbage"])
def test_advice_is_short_and_well_formed(kind, library, version):
    """The library's own advice; a known bug of the release adds a sentence of its own
    (tests/unit/test_known_issues.py)."""
    text = library_advice(kind, "client", library, version)
    known = known_issue_advice(kind, library, version)
    assert text.endswith(known)
    text = text.removesuffix(known).rstrip()
    if not text:
        return
    assert text.endswith(".") and "  " not in text
    assert len(text) <= 400, text
    assert text.count(". ") <= 1, f"more than two sentences: {text!r}"


# ---- wording and helpers ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("library", "version", "expected"),
    [
        ("java", "4.3.1", "the Java client (kafka-clients 4.3.1)"),
        ("java", None, "the Java client (kafka-clients)"),
        ("librdkafka", "2.16.1", "librdkafka 2.16.1"),
        ("sarama", "v1.43.2", "Sarama 1.43.2"),
        ("sarama", "1.43.2-rc1", "Sarama 1.43.2"),
        ("franz-go", "v1.18.0", "franz-go 1.18.0"),
        ("kafka-go", "0.4.47", "kafka-go 0.4.47"),
        ("kafkajs", "2.2.4", "KafkaJS 2.2.4"),
        ("kafka-python", "2.0.2", "kafka-python 2.0.2"),
        ("aiokafka", "0.12.0", "aiokafka 0.12.0"),
        ("kafka-rust", "0.10.0", "kafka-rust (kafka crate 0.10.0)"),
        ("kafkajs", "nightly", "KafkaJS"),
        ("kafkajs", "", "KafkaJS"),
        ("unknown", "1.0.0", ""),
        ("other", "1.0.0", ""),
        (None, None, ""),
    ],
)
def test_library_name(library, version, expected):
    assert library_name(library, version) == expected


def test_advice_names_the_identified_version():
    assert "Sarama 1.43.2 lacks" in library_advice(
        "close_wait_buildup", "client", "sarama", "1.43.2"
    )
    assert library_advice("duplicate_connections", "client", "librdkafka", "2.16.1").startswith(
        "librdkafka 2.16.1 "
    )


@pytest.mark.parametrize(
    ("version", "fixed", "expected"),
    [
        (None, (1, 48, 0), None),
        ((1, 47, 9), (1, 48, 0), False),
        ((1, 48), (1, 48, 0), True),
        ((1, 48, 0), (1, 48, 0), True),
        ((1, 48, 1), (1, 48, 0), True),
        ((2, 0), (1, 48, 0), True),
        ((1, 9, 0), (1, 10, 0), False),
    ],
)
def test_at_least(version, fixed, expected):
    assert at_least(version, fixed) is expected
