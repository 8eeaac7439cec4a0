"""Every scenario end to end: real clients misbehave, the real agent sees it, the real job flags
it in ``connmon.findings``, the exporter serves it to a real Prometheus and the alert fires.

All scenarios run concurrently in one session (conftest.py); each test waits up to its
scenario's ``expect_within_s`` (counted from when the clients started) and prints what the
independent observer saw the clients do, which is also the first thing to read on a failure.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path

import pytest

from streaming.scenarios import catalog
from streaming.scenarios.components import FINDING_METRIC, alert_name
from streaming.scenarios.model import ANY_APP, Expect, Scenario
from streaming.schema.findings import SEVERITIES
from streaming.stack.prometheus import PrometheusError

# Positive scenarios first; the healthy baseline last, as it needs the longest quiet run.
ORDER = [n for n in catalog.SCENARIOS if n != "healthy"] + ["healthy"]
# Startup of the job/agent lags the clients a little; findings need this much on top.
SLACK_S = 60.0
LOOKBACK = "30m"
REPO = Path(__file__).parents[2]


def _others(s: Scenario) -> frozenset[str]:
    return frozenset(a for o in catalog.SCENARIOS.values() if o.name != s.name for a in o.apps)


def _fired(session, s: Scenario, e: Expect) -> list[dict]:
    return session.findings.ever_fired(e.kind, e.app, e.side, _others(s), e.cluster)


def _selector(s: Scenario, e: Expect, extra: str = "") -> str:
    parts = [extra] if extra else []
    if e.kind is not None:
        parts.append(f'kind="{e.kind}"')
    if e.app != ANY_APP:
        parts.append(f'app="{e.app}"')
    else:
        parts.append(f'app!~"{"|".join(sorted(_others(s)))}"')
    if e.side != ANY_APP:
        parts.append(f'side="{e.side}"')
    if e.cluster is not None:
        parts.append(f'cluster="{e.cluster}"')
    return "{" + ", ".join(parts) + "}"


def _wait(session, until_elapsed_s: float, done) -> None:
    """Tick the session (timed actions) until ``done()`` or the deadline."""
    while session.elapsed() < until_elapsed_s and not done():
        session.tick()
        time.sleep(1.0)


def _fired_in_time(session, s: Scenario, e: Expect) -> list[dict]:
    """Firing records for ``e``, waited for as long as the scenario allows; fails with the
    observer's report when there are none."""
    _wait(session, s.expect_within_s + SLACK_S, lambda: bool(_fired(session, s, e)))
    fired = _fired(session, s, e)
    assert fired, _diagnostics(session, s)
    return fired


def _diagnostics(session, s: Scenario) -> str:
    lines = [session.observer_report(s), "", "active findings:"]
    lines += [f"  {f}" for f in session.findings.active()]
    comps = session.components
    if comps is not None:
        for p in comps.procs:
            lines += [f"--- {p.name} ({'alive' if p.alive() else 'EXITED'}) log tail:", p.tail(800)]
    return "\n".join(lines)


@pytest.mark.parametrize("name", ORDER)
def test_scenario(scenario_session, name: str) -> None:
    session, s = scenario_session, catalog.SCENARIOS[name]
    prom = session.components.prometheus
    positives = [e for e in s.expect if e.present]
    negatives = [e for e in s.expect if not e.present]

    # 1. The finding in connmon.findings.
    deadline = s.expect_within_s + SLACK_S
    _wait(session, deadline, lambda: all(_fired(session, s, e) for e in positives))
    if negatives:  # a negative needs the whole quiet period
        _wait(session, max(s.duration_s, s.expect_within_s), lambda: False)
    print(f"\n== {s.name} after {session.elapsed():.0f}s\n{session.observer_report(s)}")
    missing = [e for e in positives if not _fired(session, s, e)]
    assert not missing, f"no firing finding for {missing}\n{_diagnostics(session, s)}"
    unwanted = {e: _fired(session, s, e) for e in negatives}
    unwanted = {e: f for e, f in unwanted.items() if f}
    assert not unwanted, f"false positives: {unwanted}\n{_diagnostics(session, s)}"
    # The client library the finding names, and its own advice in the recommendation.
    for e in positives:
        if e.library is None:
            continue
        named = [f for f in _fired(session, s, e) if f.get("client_library") == e.library]
        assert named, f"no {e.kind} finding for {e.app} names {e.library}: {_fired(session, s, e)}"
        advised = [f for f in named if e.advice in (f.get("recommendation") or "")]
        assert advised, f"{e.advice!r} not in {named[-1].get('recommendation')!r}"

    # 2. The metric in Prometheus (max_over_time: a finding that has resolved since counts).
    for e in positives:
        q = f"max_over_time({FINDING_METRIC}{_selector(s, e)}[{LOOKBACK}]) > 0"
        assert prom.wait_for(q, timeout_s=60), q
    for e in negatives:
        q = f"max_over_time({FINDING_METRIC}{_selector(s, e)}[{LOOKBACK}]) > 0"
        assert prom.query(q) == [], f"{q} returned data"

    # 3. The alert state in Prometheus.
    for e in positives:
        alert = alert_name(e.kind) if e.kind else None
        sel = _selector(s, e, extra=f'alertname="{alert}", alertstate="firing"')
        q = f"max_over_time(ALERTS{sel}[{LOOKBACK}])"
        assert prom.wait_for(q, timeout_s=60), q
    for e in negatives:
        sel = _selector(s, e, extra='alertstate="firing"')
        q = f"max_over_time(ALERTS{sel}[{LOOKBACK}])"
        assert prom.query(q) == [], f"{q} returned data: an alert fired for a healthy client"


def test_a_rarely_used_second_client_is_one_finding_that_does_not_flap(scenario_session) -> None:
    """The rare producer's connection is reaped by its idle expiry and re-opened every 40 s:
    one duplicate_connections finding names the idle extra socket and stays firing through
    the cycles, instead of firing and resolving each time."""
    session = scenario_session
    e = Expect("duplicate_connections", "dup-rdk-two-clients")
    s = catalog.SCENARIOS["duplicate"]
    fired = _fired_in_time(session, s, e)
    evidence = fired[0].get("evidence") or {}
    assert evidence["dup_used_max_idle_s"] >= session.detector.duplicate_idle_s, evidence
    assert evidence["dup_used_active_idle_s"] < session.detector.duplicate_idle_s, evidence
    assert "more than one Kafka client" in fired[0]["summary"], fired[0]
    # Through the scenario's run: cycles of the rare client every 40 s (reaped at 25 s idle,
    # re-opened at its next send). The other tests have usually used up this time already.
    _wait(session, s.duration_s + SLACK_S, lambda: False)
    # One finding per broker it concerns, not one per cycle: a key may resolve for good (an
    # extra connection used once and never again), but never fires again after resolving.
    starts = {f["key"]: session.findings.firing_starts(f["key"]) for f in _fired(session, s, e)}
    assert set(starts.values()) == {1}, starts


def test_a_java_bootstrap_leftover_is_counted_not_flagged(scenario_session) -> None:
    """The Java producer's bootstrap connection is unused since it opened: the exporter
    shows it as an unused extra connection, and no finding names it (test_scenario)."""
    session = scenario_session
    s = catalog.SCENARIOS["duplicate"]
    sel = '{app="dup-java-producer"}'
    q = f"max_over_time(connmon_unused_extra_connections{sel}[{LOOKBACK}]) > 0"
    assert session.components.prometheus.wait_for(q, timeout_s=s.expect_within_s), (
        q + "\n" + _diagnostics(session, s)
    )


def test_a_client_that_opens_a_connection_per_request_is_told_to_reuse_it(scenario_session):
    """Its connections all succeed and it closes them itself: the storm's advice is about
    reusing one client, not about reconnect backoff."""
    session = scenario_session
    e = Expect("connection_storm", "timewait-raw-churn")
    s = catalog.SCENARIOS["time-wait"]
    unanswered = catalog.SESSION_DETECTOR.storm_syn_sent_count

    def answered() -> list[dict]:
        # Windows in which the broker answered the connects: on this loaded machine it stalls
        # now and then, connects pile up in SYN_SENT and that window is rightly told to back off.
        return [
            f
            for f in _fired(session, s, e)
            if f["evidence"]["syn_sent_count"] < unanswered
            and not f["evidence"]["connects_failed_per_min"]
        ]

    _fired_in_time(session, s, e)
    _wait(session, s.duration_s + SLACK_S, lambda: bool(answered()))
    records = answered()
    assert records, [f["evidence"] for f in _fired(session, s, e)]
    for f in records:
        assert "reuse" in f["recommendation"] and "backoff" not in f["recommendation"], f
        assert f["evidence"]["closes_local"] > f["evidence"]["closes_peer"], f["evidence"]


def test_a_constant_storm_is_a_steady_finding(scenario_session) -> None:
    """The churn client opens connections at a constant rate through the scenario's run: its
    storm finding fires once and never flaps, its severity only rises (at most once, while the
    rate over the last window fills in at the start), and besides heartbeats and changes of
    its cause it is written at most three times, the last with the settled rate
    (docs/findings.md, "Rates"). On this loaded machine the broker is sometimes slow to answer
    for a moment (connects pile up in SYN_SENT): that window names the cause, and the storm
    goes on after it instead of turning into a recovery."""
    session = scenario_session
    e = Expect("connection_storm", "timewait-raw-churn")
    s = catalog.SCENARIOS["time-wait"]
    _fired_in_time(session, s, e)
    _wait(session, s.duration_s + SLACK_S, lambda: False)
    by_key: dict[str, list[dict]] = {}
    for f in _fired(session, s, e):
        by_key.setdefault(f["key"], []).append(f)
    for key, records in by_key.items():
        said = [(r["change"], r["severity"], r["evidence"]["opens_per_min"]) for r in records]
        assert session.findings.firing_starts(key) == 1, said
        severities = [r["severity"] for r in records]
        assert severities == sorted(severities, key=SEVERITIES.index), said
        assert len([r for r in records if r["change"] not in ("heartbeat", "advice")]) <= 3, said
        # The client opens one connection per 100 ms at most: 600/min, less its handshakes.
        assert 250 <= records[-1]["evidence"]["opens_per_min"] <= 650, said
        print(f"{key}: {said}")


def test_connmon_itself_is_named_and_left_out_of_findings(scenario_session) -> None:
    """The session's own agent, job (and its Spark JVM) and exporter talk to the clusters they
    watch: they are named connmon-* and get no finding, while their sockets are still counted."""
    from streaming.schema.aggregates import CONNMON_APPS

    session = scenario_session
    prom = session.components.prometheus
    q = 'count by (app) (connmon_sockets{side="client", app=~"connmon-.*"})'
    both = (
        'count(count by (app) (connmon_sockets{side="client", app=~"connmon-agent|connmon-job"}))'
        " == 2"
    )
    with contextlib.suppress(PrometheusError):  # the assertion below names what was seen
        prom.wait_for(both, timeout_s=120)
    named = {r["metric"]["app"] for r in prom.query(q)}
    assert {"connmon-agent", "connmon-job"} <= named, named
    own = [f for a in sorted(CONNMON_APPS) for f in session.findings.ever_fired(None, a, "*")]
    assert own == [], own


def _library_labels(prom, app: str, timeout_s: float) -> set[tuple[str, str]]:
    q = f'max_over_time(connmon_client_library_info{{app="{app}"}}[{LOOKBACK}])'
    prom.wait_for(q, timeout_s=timeout_s)
    return {(r["metric"]["client_library"], r["metric"]["client_version"]) for r in prom.query(q)}


def _go_requires() -> dict[str, str]:
    """Module -> version (without the ``v``) that the scenario Go clients' go.mod requires."""
    text = (REPO / "deploy" / "local" / "go-clients" / "go.mod").read_text()
    return {m: v for m, v in re.findall(r"^\s*(\S+) v(\S+)\s*$", text, re.M)}


def _npm_locked(package: str) -> str:
    """The version of ``package`` the scenario Node clients' package-lock.json pins."""
    lock = json.loads(
        (REPO / "deploy" / "local" / "node-clients" / "package-lock.json").read_text()
    )
    return lock["packages"][f"node_modules/{package}"]["version"]


def test_each_clients_library_and_version_are_identified(scenario_session) -> None:
    """The agent names each client's library and version as the client's own build pins
    them, and the name reaches Prometheus and the findings."""
    import confluent_kafka

    from streaming.stack import artifacts

    session = scenario_session
    prom = session.components.prometheus
    java = ("java", artifacts.pom_property("kafka", "kafka.version"))
    rdkafka = ("librdkafka", confluent_kafka.libversion()[0])
    go = _go_requires()
    expected = {
        "dup-java-producer": java,
        "dup-rdk-consumer": rdkafka,
        "sarama-producer": ("sarama", go["github.com/IBM/sarama"]),
        "franz-producer": ("franz-go", go["github.com/twmb/franz-go"]),
        "kafkajs-producer": ("kafkajs", _npm_locked("kafkajs")),
    }
    for app, want in expected.items():
        assert _library_labels(prom, app, timeout_s=180) == {want}, app
    s = catalog.SCENARIOS["idle-churn"]
    for app, want in (("churn-java-producer", java), ("churn-rdk-producer", rdkafka)):
        f = _fired_in_time(session, s, Expect("idle_churn", app))[-1]
        assert (f["client_library"], f["client_version"]) == want, f


def test_a_real_close_wait_leak_reaches_a_person_as_one_notification(scenario_session) -> None:
    """The raw client's CLOSE_WAIT leak, through the agent, the job, the exporter, Prometheus
    and the session's Alertmanager (connmon's generated configuration) to the webhook receiver:
    one notification for the app and its cluster, with the finding's summary, its advice and
    links that open, nothing sent twice for a group that did not change, and a resolved one
    once the client is gone."""
    session = scenario_session
    s = catalog.SCENARIOS["close-wait"]
    hook = session.components.webhook
    group = {
        "alertname": "ConnMonCloseWaitBuildup",
        "cluster": s.cluster,
        "app": "closewait-raw-leak",
    }

    def sent() -> list[dict]:
        return [n for n in hook.notifications() if n["groupLabels"] == group]

    _wait(session, s.expect_within_s + SLACK_S + 60, lambda: bool(sent()))
    notes = sent()
    assert notes, f"no notification for {group}: {hook.notifications()}\n{_diagnostics(session, s)}"
    first = notes[0]
    assert first["status"] == "firing"
    assert first["receiver"] in ("connmon-warning", "connmon-critical")
    alert = first["alerts"][0]
    assert alert["labels"]["kind"] == "close_wait_buildup" and alert["labels"]["side"] == "client"
    assert "closewait-raw-leak on " in alert["annotations"]["description"]
    assert " What to do: " in alert["annotations"]["description"]  # the finding's own advice
    assert alert["annotations"]["runbook_url"].startswith("https://")
    assert alert["annotations"]["runbook_url"].endswith("#connmonclosewaitbuildup")
    # Alertmanager re-sends a group only when its alerts change (or after repeat_interval):
    # each receiver's notifications differ from the one before. The same alert may fire again
    # after it resolved, e.g. warning -> critical while the count rises -> warning once it
    # stops rising.
    last: dict[str, tuple] = {}
    for n in notes:
        state = (n["status"], tuple(sorted((a["fingerprint"], a["status"]) for a in n["alerts"])))
        assert last.get(n["receiver"]) != state, notes
        last[n["receiver"]] = state

    # The client gone (here: stopped): its sockets go and its series has no window any more,
    # so the finding resolves once the series has been quiet for ``finding_stale_s``, and a
    # resolved notification follows for the same group (within Alertmanager's group interval).
    from streaming.scenarios.launcher import stop_all

    # Only what is sent after the stop counts: an alert of the group may already have
    # resolved while the leak went from warning to critical and back.
    before = len(sent())
    stop_all([session.workloads["closewait-raw-leak"]], timeout_s=10)
    stopped = time.monotonic()

    def resolved() -> list[dict]:
        return [n for n in sent()[before:] if n["status"] == "resolved"]

    deadline_s = catalog.SESSION_DETECTOR.finding_stale_s + 180
    while time.monotonic() - stopped < deadline_s and not resolved():
        session.tick()
        time.sleep(1.0)
    assert resolved(), f"no resolved notification for {group} after the stop: {sent()}"
    assert {a["status"] for a in resolved()[-1]["alerts"]} == {"resolved"}
    print(f"resolved notification {time.monotonic() - stopped:.0f} s after the client stopped")


def test_a_stopped_broker_is_notified_and_holds_back_the_storm_it_causes(scenario_session) -> None:
    """The storm scenario stops its cluster's only broker while producers retry it: the
    broker's alert reaches the receiver, and the storms its clients raise (toward that broker,
    or host-level) reach Alertmanager but are held back by the shipped configuration's
    inhibition: no notification for them."""
    session = scenario_session
    s = catalog.SCENARIOS["storm"]
    hook, am = session.components.webhook, session.components.alertmanager

    def broker() -> list[dict]:
        return [
            n for n in hook.notifications()
            if n["groupLabels"] == {"alertname": "ConnMonBrokerUnavailable", "cluster": s.cluster}
        ]  # fmt: skip

    def caused(labels: dict) -> bool:
        return labels.get("alertname") == "ConnMonConnectionStorm" and (
            labels.get("cluster") == s.cluster or labels.get("broker_id") == "*"
        )

    def storms_held_back() -> list[dict]:
        held = [a for a in am.alerts() if caused(a["labels"])]
        return held if held and all(a["status"]["inhibitedBy"] for a in held) else []

    deadline = s.expect_within_s + SLACK_S
    _wait(session, deadline, lambda: bool(broker()) and bool(storms_held_back()))
    ebpf = 'max_over_time(connmon_agent_collector_info{collector="ebpf"}[30m]) > 0'
    if not broker() and not session.components.prometheus.query(ebpf):
        pytest.skip("the agent ran without eBPF here: a refused connect names no broker")
    assert broker(), f"no broker notification: {hook.notifications()}\n{_diagnostics(session, s)}"
    held = storms_held_back()
    assert held, f"storms in Alertmanager: {[a for a in am.alerts() if caused(a['labels'])]}"
    time.sleep(15)  # past the group wait: a storm notification, were it not held back, is out
    sent = [a for n in hook.notifications() for a in n["alerts"] if caused(a["labels"])]
    assert sent == [], sent


# How long the brokers are watched before their own processes are judged: the longest horizon
# of any detector in the session's compressed timings (idle churn's 300 s: five of the main
# cluster's 60 s idle-expiry cycles) plus six windows. At the session's compression that is
# about an hour of production timings.
_HORIZONS = ("idle_churn_window_s", "zombie_idle_s", "duplicate_resolve_after_s")
BROKERS_WATCHED_S = (
    max(catalog.SESSION_SETTINGS[h] for h in _HORIZONS) + 6 * (catalog.SESSION_SETTINGS["window_s"])
)


def test_kafkas_own_brokers_get_no_finding(scenario_session) -> None:
    """The session's brokers (three of them in one cluster, replicating to each other) are Kafka
    clients of each other: their processes are named kafka-broker, their sockets are counted,
    and over every detector's horizon (``BROKERS_WATCHED_S``) they raise no finding."""
    session = scenario_session
    _wait(session, BROKERS_WATCHED_S, lambda: False)
    prom = session.components.prometheus
    q = 'count(connmon_sockets{side="client", app="kafka-broker"})'
    assert prom.wait_for(q, timeout_s=60), f"{q}: the brokers' own connections were not seen"
    own = session.findings.ever_fired(None, "kafka-broker", "client")
    assert own == [], own
