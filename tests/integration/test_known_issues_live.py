"""Known bugs of client library releases (``streaming.detectors.known_issues``), end to end:
the real library at an affected release and at the release that fixed it, taken from the
package registries, runs against a real KRaft broker; the real agent identifies each process
(library, version, evidence ``loaded``) and counts its connections with its eBPF collector;
the job's replay (its two Spark steps, the live job's code) turns the events into findings.
The affected release's finding names the bug; the fixed release, in the same scenario, shows
the library's changed behaviour and no such sentence.

- kafka-clients 3.2.3 vs 3.3.0, KAFKA-13879: a plaintext client on a TLS listener. Its TCP
  connect succeeds, the broker drops the connection when the ApiVersions request fails its TLS
  handshake; 2.7.0 to 3.2.3 reset the reconnect backoff once the socket connected
  (``ClusterConnectionStates.checkingApiVersions``), so they reconnect every
  ``reconnect.backoff.ms`` (50); 3.3.0 backs off exponentially to
  ``reconnect.backoff.max.ms`` (1000), as 2.6 did.
- librdkafka 2.10.0 vs 2.10.1 (confluent-kafka wheels), librdkafka#5088: a client whose only
  need is metadata (a readiness probe) loses its learned broker's address (the forwarder in
  front of the advertised listener goes down) while the bootstrap address still answers. All
  brokers are down, so it re-bootstraps; 2.10.0 picks the new bootstrap broker, never tried,
  over the learned one, connects, gets metadata, decommissions the bootstrap broker (it is not
  in metadata), is down again and re-bootstraps: a loop of short connections it closes itself
  that goes on after the learned address is back. 2.10.1 prefers the learned broker and
  recovers (rd_kafka_connect_any, PR #5086).

Both need the eBPF collector: these connections live for milliseconds, far below a scan.
Skipped only where the agent lacks the privileges for it.

The kafka-python entries cannot be shown this way: kafka-python is pure Python, so the agent
knows it only as installed beside the interpreter (evidence ``installed``), which proves no use
and names no known bug (``known_issues.version_proven``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agent_helpers import events_in
from known_issue_helpers import (
    Client,
    Forwarder,
    clients,
    confluent_kafka,
    ebpf_agent,
    identities,
    java_client,
    java_client_argv,
    rdkafka_probe_argv,
    rdkafka_probe_env,
)

from streaming.agent import ebpf
from streaming.detectors.config import DetectorConfig
from streaming.detectors.known_issues import KNOWN_ISSUES, KnownIssue
from streaming.detectors.libraries import known_issue_sentence
from streaming.job.pipeline import replay
from streaming.schema.times import epoch
from streaming.stack.kafka import KafkaCluster
from streaming.stack.ports import free_port

# Time compressed as the scenarios do: 5-second windows (rates are still per minute).
CFG = DetectorConfig().replace(window_s=5.0, watermark_s=10.0)
# Verdicts of ``ebpf.check`` that a missing privilege explains; anything else (no bpftrace, a
# kernel without BTF) is an installation CI must provide, so the test fails on it.
_PRIVILEGES = {"not_root", "no_capability", "no_tracefs"}


def _need_ebpf() -> None:
    verdict = ebpf.check()
    if verdict.reason in _PRIVILEGES:
        pytest.skip(f"the agent's eBPF collector needs privileges this run lacks: {verdict.why}")
    assert verdict.reason is None, f"the agent's eBPF collector cannot run here: {verdict.why}"


def _entry(link: str) -> KnownIssue:
    (issue,) = (i for i in KNOWN_ISSUES if i.link == link)
    return issue


def _of(records: list[dict], app: str, kind: str | None = None) -> list[dict]:
    return [r for r in records if r["app"] == app and (kind is None or r["kind"] == kind)]


def _opens_per_window(aggregates: list[dict], app: str, start: float, end: float) -> list[float]:
    """The client side's opens per minute of ``app`` in each window that lies within
    ``start``..``end``, summed over brokers."""
    per: dict[str, float] = {}
    for a in aggregates:
        if a["app"] != app or a["side"] != "client":
            continue
        if epoch(a["window_start"]) >= start and epoch(a["window_end"]) <= end:
            per[a["window_start"]] = per.get(a["window_start"], 0.0) + a["opens"]
    return [n * 60.0 / CFG.window_s for _, n in sorted(per.items())]


def _known_issue_named(records: list[dict]) -> list[dict]:
    return [r for r in records if "Known issue" in r["recommendation"]]


def _bootstrap_opens(events: list[dict], app: str, bootstrap: str, since: float) -> int:
    """Connections ``app`` opened to ``bootstrap`` after ``since``, as the agent recorded them
    (one per ``opened`` event, ``count`` per ``short_lived`` one)."""
    return sum(
        1 if e["kind"] == "opened" else int(e.get("count") or 0)
        for e in events
        if e.get("app") == app
        and e.get("broker_endpoint") == bootstrap
        and e["kind"] in ("opened", "short_lived")
        and epoch(e["event_time"]) > since
    )


def _last_per_key(records: list[dict]) -> list[dict]:
    """The latest record of each finding (replay gives them in publication order)."""
    return list({r["key"]: r for r in records}.values())


KAFKA_13879 = "https://issues.apache.org/jira/browse/KAFKA-13879"
JAVA_AFFECTED, JAVA_FIXED = "3.2.3", "3.3.0"
JAVA_RUN_S = 20.0


def test_kafka_clients_3_2_3_storming_a_tls_listener_is_named_kafka_13879(spark, tmp_path):
    _need_ebpf()
    builds = {v: java_client(v) for v in (JAVA_AFFECTED, JAVA_FIXED)}
    apps = {v: f"ki-java-{v}" for v in builds}
    cluster = KafkaCluster(brokers=1, name="connmon-test", security="sasl_ssl")
    try:
        cluster.start()
        endpoint = cluster.nodes[0].endpoint  # its only listener for clients: SASL over TLS
        with ebpf_agent(tmp_path, [f"1@{endpoint}"], list(apps.values())) as out, clients() as run:
            for v, build in builds.items():
                argv = java_client_argv(build, apps[v], endpoint, "known-issues")
                run.append(Client(apps[v], argv, tmp_path / f"{apps[v]}.log"))
            for c in run:
                c.wait_for("ready")
            started = time.time()
            time.sleep(JAVA_RUN_S)
            stopped = time.time()
    finally:
        cluster.stop()

    events = events_in(out)
    for v, app in apps.items():
        assert identities(events, app) == {("java", v, "loaded")}, identities(events, app)

    result = replay(spark, str(out), CFG)
    sentence = known_issue_sentence(_entry(KAFKA_13879))
    affected = _of(result.findings, apps[JAVA_AFFECTED], "connection_storm")
    fixed = _of(result.findings, apps[JAVA_FIXED], "connection_storm")
    assert affected and fixed, [(f["app"], f["kind"]) for f in result.findings]
    # Every record of the affected release names the bug, whatever the record says first (a
    # window whose connections the broker dropped while a request was in flight, with no storm
    # before it, reads as a recovery); no record of the fixed release names any.
    assert all(sentence in f["recommendation"] for f in affected), affected[0]["recommendation"]
    assert not _known_issue_named(_of(result.findings, apps[JAVA_FIXED]))
    for f in _last_per_key(affected + fixed):
        # A storm whose connections the broker closed: the listener refused the protocol.
        assert f["status"] == "firing" and f["severity"] in ("warning", "critical"), f
        assert "the broker closes them within seconds" in f["recommendation"], f
        assert f["evidence"]["closes_peer"] > f["evidence"]["closes_local"], f["evidence"]
    # What the bug does: the affected release reconnects at the initial backoff, the fixed one
    # backs off to reconnect.backoff.max.ms (1 s) within 2 s of its start (50 ms doubling).
    bug = _opens_per_window(result.aggregates, apps[JAVA_AFFECTED], started + 3, stopped)
    fix = _opens_per_window(result.aggregates, apps[JAVA_FIXED], started + 3, stopped)
    assert len(bug) >= 2 and len(fix) >= 2, (bug, fix)
    assert min(bug) >= 2 * max(fix), (bug, fix)
    assert max(fix) <= 1.5 * 60, fix  # about one connect a second


LIBRDKAFKA_5088 = "https://github.com/confluentinc/librdkafka/issues/5088"
RDK_AFFECTED, RDK_FIXED = "2.10.0", "2.10.1"
HEALTHY_S, LOST_S, AFTER_S = 3.0, 4.0, 17.0


def test_librdkafka_2_10_0_rebootstrap_loop_is_named_issue_5088(spark, tmp_path: Path):
    _need_ebpf()
    packages = {v: confluent_kafka(v) for v in (RDK_AFFECTED, RDK_FIXED)}
    apps = {v: f"ki-rdkafka-{v}" for v in packages}
    port, advertised = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    # The broker advertises an address behind a forwarder; clients bootstrap from its own port.
    cluster = KafkaCluster(
        brokers=1,
        name="connmon-test",
        overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{advertised}"},
    )
    forwarder = None
    try:
        forwarder = Forwarder(advertised, port)
        cluster.start(ports=[port])
        endpoints = [f"1@{bootstrap}", f"1@127.0.0.1:{advertised}"]
        with ebpf_agent(tmp_path, endpoints, list(apps.values())) as out, clients() as run:
            for v, package in packages.items():
                argv = rdkafka_probe_argv(bootstrap, apps[v])
                log = tmp_path / f"{apps[v]}.log"
                run.append(Client(apps[v], argv, log, env=rdkafka_probe_env(package)))
            for c in run:
                c.wait_for("ready")
            time.sleep(HEALTHY_S)
            forwarder.command("down")  # the learned broker's address is gone
            time.sleep(LOST_S)
            forwarder.command("up")  # and back
            back = time.time()
            time.sleep(AFTER_S)
            stopped = time.time()
    finally:
        cluster.stop()
        if forwarder is not None:
            forwarder.stop()

    events = events_in(out)
    for v, app in apps.items():
        assert identities(events, app) == {("librdkafka", v, "loaded")}, identities(events, app)

    result = replay(spark, str(out), CFG)
    sentence = known_issue_sentence(_entry(LIBRDKAFKA_5088))
    affected = _of(result.findings, apps[RDK_AFFECTED], "connection_storm")
    assert affected, [(f["app"], f["kind"], f["status"]) for f in result.findings]
    assert all(sentence in f["recommendation"] for f in affected), affected[0]["recommendation"]
    assert not _known_issue_named(_of(result.findings, apps[RDK_FIXED]))
    # The recording shows the bug: once the broker was back, the fixed release reconnected to
    # the learned broker within a second or two and opened nothing since (the whole windows
    # from then to the end), while the affected one went on opening and closing bootstrap
    # connections until its own reconnect backoff brought it to the learned broker: from about
    # 5 s after to past the end of the recording, as librdkafka's timing falls.
    settled = back + 2.0
    fix = _opens_per_window(result.aggregates, apps[RDK_FIXED], settled, stopped)
    assert fix and max(fix) < CFG.storm_opens_per_min, fix
    looped = _bootstrap_opens(events, apps[RDK_AFFECTED], bootstrap, settled)
    assert looped >= 10, looped
    # A storm of refused connects while the address was gone, if any, has ended.
    last = _last_per_key(_of(result.findings, apps[RDK_FIXED], "connection_storm"))
    assert all(f["status"] == "resolved" for f in last), last
