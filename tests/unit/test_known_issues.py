"""Known connection bugs of client library releases (``streaming.detectors.known_issues``): one
table row per entry and finding kind, with the versions around its range written out by hand
from the entry's source (docs/client-libraries.md, "Known bugs by release")."""

from __future__ import annotations

import pytest

from streaming.detectors.known_issues import KNOWN_ISSUES, known_issues
from streaming.detectors.libraries import known_issue_advice, library_advice
from streaming.schema.clients import CLIENT_LIBRARIES
from streaming.schema.findings import KINDS

# (link, library, kind, storm cause it shows as, a version in range, a kind it does not show as,
#  the fixed release, a release before the first affected one or None when every earlier
#  release is affected)
ROWS: list[tuple[str, str, str, str | None, str, str, str, str | None]] = [
    (
        "https://issues.apache.org/jira/browse/KAFKA-6101",
        "java",
        "connection_storm",
        "refused",
        "0.11.0.2",
        "idle_churn",
        "1.0.0",
        "0.10.2.1",
    ),
    (
        "https://issues.apache.org/jira/browse/KAFKA-7890",
        "java",
        "connection_storm",
        "unanswered",
        "2.1.0",
        "close_wait_buildup",
        "2.1.1",
        "2.0.1",
    ),
    (
        "https://issues.apache.org/jira/browse/KAFKA-13879",
        "java",
        "connection_storm",
        "peer_closes",
        "3.2.3",
        "idle_zombie",
        "3.3.0",
        "2.6.3",
    ),
    (
        "https://github.com/confluentinc/librdkafka/issues/4881",
        "librdkafka",
        "connection_storm",
        "failed",
        "2.9.0",
        "duplicate_connections",
        "2.10.0",
        None,
    ),
    (
        "https://github.com/confluentinc/librdkafka/issues/5088",
        "librdkafka",
        "connection_storm",
        None,
        "2.10.0",
        "close_wait_buildup",
        "2.10.1",
        "2.9.0",
    ),
    (
        "https://github.com/IBM/sarama/pull/2204",
        "sarama",
        "close_wait_buildup",
        None,
        "v1.26.0",
        "connection_storm",
        "1.33.0",
        "1.25.0",
    ),
    (
        "https://github.com/IBM/sarama/pull/2204",
        "sarama",
        "duplicate_connections",
        None,
        "1.32.0",
        "idle_churn",
        "v1.33.0",
        "1.25.0",
    ),
    (
        "https://github.com/segmentio/kafka-go/pull/409",
        "kafka-go",
        "connection_storm",
        "client_closes",
        "v0.3.5",
        "idle_churn",
        "0.3.6",
        None,
    ),
    (
        "https://github.com/segmentio/kafka-go/pull/409",
        "kafka-go",
        "time_wait_pileup",
        None,
        "0.2.5",
        "close_wait_buildup",
        "v0.3.6",
        None,
    ),
    (
        "https://github.com/segmentio/kafka-go/issues/814",
        "kafka-go",
        "connection_storm",
        "client_closes",
        "v0.4.25",
        "duplicate_connections",
        "0.4.26",
        "0.4.23",
    ),
    (
        "https://github.com/segmentio/kafka-go/issues/814",
        "kafka-go",
        "time_wait_pileup",
        None,
        "0.4.24",
        "idle_zombie",
        "v0.4.26",
        "v0.4.23",
    ),
    (
        "https://github.com/dpkp/kafka-python/pull/696",
        "kafka-python",
        "close_wait_buildup",
        None,
        "1.1.1",
        "connection_storm",
        "1.2.0",
        "0.9.5",
    ),
    (
        "https://github.com/dpkp/kafka-python/pull/3098",
        "kafka-python",
        "connection_storm",
        "peer_closes",
        "3.0.4",
        "close_wait_buildup",
        "3.0.5",
        "2.3.2",
    ),
    (
        "https://github.com/aio-libs/aiokafka/pull/299",
        "aiokafka",
        "idle_churn",
        None,
        "0.2.1",
        "connection_storm",
        "0.4.0",
        "0.2.0",
    ),
    (
        "https://github.com/aio-libs/aiokafka/pull/299",
        "aiokafka",
        "idle_zombie",
        None,
        "0.3.1",
        "close_wait_buildup",
        "0.4.0",
        "0.2.0",
    ),
]
ARGS = "link, library, kind, cause, version, other, fixed, before"


def _ids(rows: list) -> list[str]:
    return [f"{row[1]}-{row[0].rsplit('/', 1)[1]}-{row[2]}" for row in rows]


IDS = _ids(ROWS)
# Ranges with a first affected release, and bugs that show as a storm of given causes.
BOUNDED = [row for row in ROWS if row[7] is not None]
BY_CAUSE = [row for row in ROWS if row[3] is not None]


def _named(link, kind, library, version, evidence=None, cause=None) -> bool:
    return link in known_issue_advice(kind, library, version, evidence, cause)


def test_every_entry_and_kind_has_a_row() -> None:
    entries = {(i.link, i.library, kind) for i in KNOWN_ISSUES for kind in i.kinds}
    assert entries == {(link, library, kind) for link, library, kind, *_ in ROWS}


@pytest.mark.parametrize(ARGS, ROWS, ids=IDS)
def test_in_range_and_matching_is_named(
    link, library, kind, cause, version, other, fixed, before
) -> None:
    assert _named(link, kind, library, version, cause=cause)
    text = library_advice(kind, "client", library, version, "loaded", cause)
    assert link in text and f"fixed in {fixed.removeprefix('v')}: " in text


@pytest.mark.parametrize(ARGS, ROWS, ids=IDS)
def test_another_kind_is_not_named(
    link, library, kind, cause, version, other, fixed, before
) -> None:
    assert not _named(link, other, library, version, cause=cause)


@pytest.mark.parametrize(ARGS, ROWS, ids=IDS)
def test_the_fixed_release_is_not_named(
    link, library, kind, cause, version, other, fixed, before
) -> None:
    assert not _named(link, kind, library, fixed, cause=cause)


@pytest.mark.parametrize(ARGS, BOUNDED, ids=_ids(BOUNDED))
def test_a_release_before_the_first_affected_is_not_named(
    link, library, kind, cause, version, other, fixed, before
) -> None:
    assert not _named(link, kind, library, before, cause=cause)


@pytest.mark.parametrize("evidence", ["installed", "declared"])
@pytest.mark.parametrize(ARGS, ROWS, ids=IDS)
def test_installed_or_declared_only_is_not_named(
    evidence, link, library, kind, cause, version, other, fixed, before
) -> None:
    assert not _named(link, kind, library, version, evidence, cause)
    assert link not in library_advice(kind, "client", library, version, evidence, cause)


@pytest.mark.parametrize("evidence", [None, "loaded", "classpath", "runtime"])
def test_evidence_that_proves_the_version_names_it(evidence) -> None:
    assert _named(
        "https://github.com/dpkp/kafka-python/pull/696",
        "close_wait_buildup",
        "kafka-python",
        "1.0.0",
        evidence,
    )


@pytest.mark.parametrize(ARGS, BY_CAUSE, ids=_ids(BY_CAUSE))
def test_a_storm_of_another_cause_is_not_named(
    link, library, kind, cause, version, other, fixed, before
) -> None:
    another = "client_closes" if cause != "client_closes" else "refused"
    assert not _named(link, kind, library, version, cause=another)
    assert not _named(link, kind, library, version, cause=None)


def test_a_storm_of_any_cause_names_an_entry_without_one() -> None:
    link = "https://github.com/confluentinc/librdkafka/issues/5088"
    for cause in (None, "refused", "client_closes", "unknown"):
        assert _named(link, "connection_storm", "librdkafka", "2.10.0", cause=cause)


# ---- versions compare as versions --------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "before_2_10", "in_2_10_0"),
    [
        ("2.9.0", True, False),  # a string comparison puts 2.9.0 after 2.10.0
        ("2.9.10", True, False),
        ("1.9.2", True, False),
        ("2.10", False, True),  # missing parts count as 0
        ("v2.10.0", False, True),
        ("2.10.0-RC1", False, True),
        ("2.10.1-RC1", False, False),
        ("2.11.0", False, False),
        ("2.100.0", False, False),
    ],
)
def test_versions_compare_numerically(version, before_2_10, in_2_10_0) -> None:
    issues = known_issues("connection_storm", "librdkafka", version, None, "failed")
    found = {i.link for i in issues}
    assert ("https://github.com/confluentinc/librdkafka/issues/4881" in found) is before_2_10
    assert ("https://github.com/confluentinc/librdkafka/issues/5088" in found) is in_2_10_0


@pytest.mark.parametrize("version", [None, "", "nightly", "other"])
def test_an_unknown_version_names_nothing(version) -> None:
    for kind in KINDS:
        for library in CLIENT_LIBRARIES:
            assert known_issues(kind, library, version, None, "refused") == ()
            assert known_issue_advice(kind, library, version) == ""


def test_broker_side_and_unknown_libraries_name_nothing() -> None:
    assert library_advice("close_wait_buildup", "broker", "kafka-python", "1.1.1") == ""
    assert known_issues("close_wait_buildup", "pulsar-client", "1.1.1") == ()
    assert known_issues("close_wait_buildup", None, "1.1.1") == ()


# ---- the table itself --------------------------------------------------------------------------
# Where each library's own tracker and changelog live.
SOURCES = {
    "java": "https://issues.apache.org/jira/browse/KAFKA-",
    "librdkafka": "https://github.com/confluentinc/librdkafka/",
    "sarama": "https://github.com/IBM/sarama/",
    "franz-go": "https://github.com/twmb/franz-go/",
    "kafka-go": "https://github.com/segmentio/kafka-go/",
    "kafkajs": "https://github.com/tulios/kafkajs/",
    "kafka-python": "https://github.com/dpkp/kafka-python/",
    "aiokafka": "https://github.com/aio-libs/aiokafka/",
    "kafka-rust": "https://github.com/kafka-rust/kafka-rust/",
}
STORM_CAUSES = {"refused", "failed", "unanswered", "client_closes", "peer_closes", "unknown"}


@pytest.mark.parametrize("issue", KNOWN_ISSUES, ids=lambda i: i.link.rsplit("/", 1)[1])
def test_entry_is_well_formed(issue) -> None:
    assert issue.library in CLIENT_LIBRARIES
    assert issue.link.startswith(SOURCES[issue.library]), issue.link
    assert issue.kinds and issue.kinds <= set(KINDS)
    assert issue.storm_causes <= STORM_CAUSES
    assert not issue.storm_causes or "connection_storm" in issue.kinds
    if issue.first is not None:
        assert issue.first < issue.fixed
    if issue.last is not None:
        assert issue.first is not None and issue.first <= issue.last < issue.fixed
    assert issue.what and not issue.what.endswith(".")


def test_the_table_spans_several_libraries() -> None:
    assert len(KNOWN_ISSUES) >= 10
    assert len({i.library for i in KNOWN_ISSUES}) >= 5


# ---- wording -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "library", "version", "cause", "sentence"),
    [
        (
            "connection_storm",
            "librdkafka",
            "2.10.0",
            None,
            "Known issue in librdkafka 2.10.0, fixed in 2.10.1: once all brokers were down it "
            "re-bootstrapped in a loop",
        ),
        (
            "connection_storm",
            "java",
            "2.8.1",
            "peer_closes",
            "Known issue in the Java client (kafka-clients 2.7.0 to 3.2.3), fixed in 3.3.0: ",
        ),
        (
            "time_wait_pileup",
            "kafka-go",
            "0.3.1",
            None,
            "Known issue in kafka-go before 0.3.6, fixed in 0.3.6: a Reader closed its "
            "connection after every fetched batch",
        ),
        (
            "idle_churn",
            "aiokafka",
            "0.3.0",
            None,
            "Known issue in aiokafka 0.2.1 to 0.3.1, fixed in 0.4.0: connections_max_idle_ms "
            "applied to the bootstrap connection only",
        ),
    ],
)
def test_sentence_names_library_range_fix_and_source(kind, library, version, cause, sentence):
    text = known_issue_advice(kind, library, version, None, cause)
    assert text.startswith(sentence), text
    assert text.endswith(").") and "(https://" in text


@pytest.mark.parametrize("issue", KNOWN_ISSUES, ids=lambda i: i.link.rsplit("/", 1)[1])
def test_each_sentence_is_one_sentence(issue) -> None:
    version = ".".join(str(x) for x in (issue.last or issue.first or (0, 0, 1)))
    kind = sorted(issue.kinds)[0]
    cause = min(issue.storm_causes, default=None)
    text = known_issue_advice(kind, issue.library, version, None, cause)
    assert text.count(". ") == 0 and text.endswith(f"({issue.link}).")
    assert len(text) <= 320, text


def test_library_advice_keeps_the_librarys_own_sentence_first() -> None:
    own = library_advice("close_wait_buildup", "client", "sarama", "1.30.0", "declared")
    text = library_advice("close_wait_buildup", "client", "sarama", "1.30.0", "loaded")
    assert own and "Known issue" not in own
    assert text.startswith(own + " Known issue in Sarama 1.26.0 to 1.32.0, fixed in 1.33.0: ")
