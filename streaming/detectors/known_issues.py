"""Client library releases with a known connection bug, and the findings the bug shows up as.

Every entry comes from the library's own changelog, release notes or issue tracker (its link);
docs/client-libraries.md lists them. ``streaming.detectors.libraries`` words the sentence.
Pure data and functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from streaming.detectors.connection_storm import (
    CLIENT_CLOSES,
    FAILED,
    PEER_CLOSES,
    REFUSED,
    UNANSWERED,
)
from streaming.schema.clients import proven, version_tuple

Version = tuple[int, ...]
# connection_storm causes in which the client's connects fail.
_FAILING = frozenset({REFUSED, FAILED, UNANSWERED})


@dataclass(frozen=True)
class KnownIssue:
    """Releases ``first``..``last`` of ``library`` (a ``CLIENT_LIBRARIES`` name) have a bug that
    shows up as findings of ``kinds``; ``fixed`` is the release that fixed it."""

    library: str
    first: Version | None  # None: every release before the fix
    last: Version | None  # None: every release below ``fixed``
    fixed: Version
    kinds: frozenset[str]  # streaming.schema.findings.KINDS
    what: str  # what the bug does to connections, a clause that completes the sentence
    link: str
    # For a connection_storm finding, the causes (connection_storm.cause) the bug produces;
    # empty: any.
    storm_causes: frozenset[str] = frozenset()

    def span(self) -> str:
        """The affected releases in words: '2.10.0', '0.2.1 to 0.3.1', 'before 2.10.0',
        'up to 1.4.1', 'since 2.7.0'."""
        if self.first is None:
            return f"up to {dotted(self.last)}" if self.last else f"before {dotted(self.fixed)}"
        if self.last is None:
            return f"since {dotted(self.first)}"
        if self.first == self.last:
            return dotted(self.first)
        return f"{dotted(self.first)} to {dotted(self.last)}"


KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        "java",
        (0, 11, 0),
        (0, 11, 0),
        (1, 0, 0),
        frozenset({"connection_storm"}),
        "reconnect.backoff.max.ms had no effect and every reconnect to a broker that did not "
        "answer waited only reconnect.backoff.ms, 50 by default",
        "https://issues.apache.org/jira/browse/KAFKA-6101",
        _FAILING,
    ),
    KnownIssue(
        "java",
        (2, 1, 0),
        (2, 1, 0),
        (2, 1, 1),
        frozenset({"connection_storm"}),
        "after a broker's host name changed, the client kept connecting to the old host name's "
        "addresses",
        "https://issues.apache.org/jira/browse/KAFKA-7890",
        _FAILING,
    ),
    KnownIssue(
        "java",
        (2, 7, 0),
        (3, 2, 3),
        (3, 3, 0),
        frozenset({"connection_storm"}),
        "a connection the broker closed right after it was set up, as a TLS listener does with "
        "a plaintext client, reset the reconnect backoff, so the client reconnected every "
        "reconnect.backoff.ms",
        "https://issues.apache.org/jira/browse/KAFKA-13879",
        frozenset({PEER_CLOSES}),
    ),
    KnownIssue(
        "librdkafka",
        None,
        None,
        (2, 10, 0),
        frozenset({"connection_storm"}),
        "brokers missing from metadata were kept and chosen for new connections, so the client "
        "kept connecting to removed or replaced brokers until it was restarted",
        "https://github.com/confluentinc/librdkafka/issues/4881",
        _FAILING,
    ),
    KnownIssue(
        "librdkafka",
        (2, 10, 0),
        (2, 10, 0),
        (2, 10, 1),
        frozenset({"connection_storm"}),
        "once all brokers were down it re-bootstrapped in a loop, connecting to the bootstrap "
        "servers instead of the brokers it had learned, until a broker restart broke the loop",
        "https://github.com/confluentinc/librdkafka/issues/5088",
    ),
    KnownIssue(
        "sarama",
        (1, 26, 0),
        (1, 32, 0),
        (1, 33, 0),
        frozenset({"close_wait_buildup", "duplicate_connections"}),
        "RefreshController, which the cluster admin calls on NOT_CONTROLLER errors, replaced "
        "the controller's connection without closing the old one",
        "https://github.com/IBM/sarama/pull/2204",
    ),
    KnownIssue(
        "kafka-go",
        None,
        None,
        (0, 3, 6),
        frozenset({"connection_storm", "time_wait_pileup"}),
        "a Reader closed its connection after every fetched batch and dialled the partition "
        "leader again",
        "https://github.com/segmentio/kafka-go/pull/409",
        frozenset({CLIENT_CLOSES}),
    ),
    KnownIssue(
        "kafka-go",
        (0, 4, 24),
        (0, 4, 25),
        (0, 4, 26),
        frozenset({"connection_storm", "time_wait_pileup"}),
        "a Reader of a partition with no new messages read an unexpected EOF, closed its "
        "connection and dialled the partition leader again",
        "https://github.com/segmentio/kafka-go/issues/814",
        frozenset({CLIENT_CLOSES}),
    ),
    KnownIssue(
        "kafka-python",
        (1, 0, 0),
        (1, 1, 1),
        (1, 2, 0),
        frozenset({"close_wait_buildup"}),
        "the bootstrap connection was never closed once metadata arrived, so every client the "
        "process created left a socket behind",
        "https://github.com/dpkp/kafka-python/pull/696",
    ),
    KnownIssue(
        "kafka-python",
        (3, 0, 0),
        (3, 0, 4),
        (3, 0, 5),
        frozenset({"connection_storm"}),
        "when a broker accepted the connection and dropped it during the version handshake, "
        "bootstrap retried without any backoff",
        "https://github.com/dpkp/kafka-python/pull/3098",
        frozenset({PEER_CLOSES}),
    ),
    KnownIssue(
        "aiokafka",
        (0, 2, 1),
        (0, 3, 1),
        (0, 4, 0),
        frozenset({"idle_churn", "idle_zombie"}),
        "connections_max_idle_ms applied to the bootstrap connection only, so aiokafka never "
        "closed idle broker connections itself",
        "https://github.com/aio-libs/aiokafka/pull/299",
    ),
)


def dotted(v: Version) -> str:
    """``(2, 10, 1)`` -> ``2.10.1``."""
    return ".".join(str(x) for x in v)


def at_least(version: Version | None, fixed: Version) -> bool | None:
    """True when ``version`` >= ``fixed`` (missing parts count as 0: 1.48 == 1.48.0), False
    when older, None when the version is unknown."""
    if version is None:
        return None
    width = max(len(version), len(fixed))
    return version + (0,) * (width - len(version)) >= fixed + (0,) * (width - len(fixed))


def affects(issue: KnownIssue, version: Version) -> bool:
    """Whether release ``version`` has the bug."""
    if issue.first is not None and not at_least(version, issue.first):
        return False
    if issue.last is not None:
        return bool(at_least(issue.last, version))
    return not at_least(version, issue.fixed)


def version_proven(evidence: str | None) -> bool:
    """Whether the identified version may be held against a release: the library is proven in
    use (``proven``) and its version was not read from a package on disk next to a manifest
    (``declared``), which says what the application depends on, not what the process loaded
    (node-rdkafka's package.json carries node-rdkafka's own version, not librdkafka's)."""
    return proven(evidence) and evidence != "declared"


def known_issues(
    kind: str,
    library: str | None,
    version: str | None,
    evidence: str | None = None,
    storm_cause: str | None = None,
) -> tuple[KnownIssue, ...]:
    """The entries whose bug a finding of ``kind`` about a client of ``library`` at ``version``
    may show; ``storm_cause`` is a connection_storm finding's cause (connection_storm.cause),
    needed by entries that name one. Nothing for an unknown version or an unproven one
    (``version_proven``)."""
    v = version_tuple(version)
    if v is None or not version_proven(evidence):
        return ()
    return tuple(
        issue
        for issue in KNOWN_ISSUES
        if issue.library == library
        and kind in issue.kinds
        and affects(issue, v)
        and (
            kind != "connection_storm"
            or not issue.storm_causes
            or storm_cause in issue.storm_causes
        )
    )
