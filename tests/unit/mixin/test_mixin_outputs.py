"""The generated mixin: up to date, conventions, catalog names, dashboard lint, config use."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from streaming.metricnames import ALL_METRICS, FORBIDDEN_LABELS, series_names
from streaming.metricnames.connmon import AGGREGATE_METRICS, FINDING_METRICS
from streaming.mixin import build, check
from streaming.mixin.alerts import alert_rules
from streaming.mixin.config import DEFAULT
from streaming.mixin.exprs import dashboard_exprs, rule_exprs
from streaming.mixin.promql import grafana_to_promql, metric_names
from streaming.mixin.rules import DERIVED_METRICS, FAILING_HOSTS, PROCESS_FD_USAGE

ROOT = build.ROOT
RULES, DASHES = check.load_outputs()
ALERTS = [r for g in RULES[0]["groups"] for r in g["rules"] if "alert" in r]
RECORDS = [r for doc in RULES for g in doc["groups"] for r in g["rules"] if "record" in r]
EXPECTED_ALERTS = {
    "ConnMonCloseWaitBuildup", "ConnMonIdleChurn", "ConnMonDuplicateConnections",
    "ConnMonIdleZombie", "ConnMonConnectionStorm", "ConnMonTimeWaitPileup", "ConnMonAgentDown",
    "ConnMonJobStalled", "ConnMonJobLagging", "ConnMonDataStale", "ConnMonDeadLetterRate",
    "ConnMonExporterCardinalityLimit", "ConnMonHostClockSkew", "ConnMonJobInputLost",
    "ConnMonJobInternalErrors", "ConnMonBrokerUnavailable", "ConnMonExporterDown",
    "ConnMonJobStateSeriesShed", "ConnMonFdExhaustionPredicted",
}  # fmt: skip


def test_committed_outputs_are_up_to_date() -> None:
    assert build.stale() == [], "run `connmon mixin build` (make mixin) and commit the result"


def test_build_is_deterministic() -> None:
    assert build.render() == build.render()


def test_every_expected_alert_exists_once() -> None:
    names = [a["alert"] for a in ALERTS]
    assert sorted(names) == sorted(EXPECTED_ALERTS)


@pytest.mark.parametrize("rule", ALERTS, ids=lambda r: r["alert"])
def test_alert_conventions(rule: dict) -> None:
    assert re.fullmatch(r"ConnMon[A-Z][A-Za-z]+", rule["alert"])
    ann = rule["annotations"]
    summary = ann["summary"]
    sentence = re.sub(r"\{\{.*?\}\}", "", summary)  # one sentence, templates aside
    assert summary.endswith(".") and sentence.count(". ") == 0
    assert "{{ $labels." in ann["description"]
    anchor = rule["alert"].lower()
    assert ann["runbook_url"].endswith(f"docs/runbook.md#{anchor}")
    finding_based = "connmon_finding_active" in rule["expr"]
    if finding_based:
        assert "severity" in rule["expr"]  # the finding's own severity label is kept
        # a notification names who and where: app, host, broker and cluster
        for label in ("app", "host", "broker_id", "cluster"):
            assert f"$labels.{label}" in summary, (rule["alert"], label)
        assert "connmon_finding_recommendation_info" in ann["description"]
    else:
        assert "{{" not in summary
        assert rule["labels"]["severity"] in ("critical", "warning", "info")


def test_runbook_has_a_section_per_alert() -> None:
    text = (ROOT / "docs" / "runbook.md").read_text()
    headings = set(re.findall(r"^## (\S+)$", text, re.M))
    assert headings >= EXPECTED_ALERTS


def test_one_setting_moves_every_runbook_link() -> None:
    base = "https://git.example.com/ops/connmon/blob/main/docs/runbook.md"
    rules = alert_rules(DEFAULT.replace(runbook_url_base=base))
    urls = [
        r["annotations"]["runbook_url"] for g in rules["groups"] for r in g["rules"] if "alert" in r
    ]
    assert len(urls) == len(EXPECTED_ALERTS)
    assert all(u.startswith(base + "#connmon") for u in urls)


def test_every_alert_has_a_firing_and_a_quiet_promtool_case() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in (ROOT / "deploy/prometheus/tests").glob("*.yaml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case["exp_alerts"] else quiet).add(case["alertname"])
                for alert in case["exp_alerts"]:
                    assert set(alert["exp_annotations"]) == {
                        "summary", "description", "runbook_url", "dashboard_url",
                    }  # fmt: skip
    assert fires == EXPECTED_ALERTS
    assert quiet == EXPECTED_ALERTS


def test_recording_rules_are_level_metric_operation() -> None:
    assert RECORDS
    for rule in RECORDS:
        level, metric, op = rule["record"].split(":")
        assert level and op in ("sum", "count", "max")
        assert metric in series_names() or metric in DERIVED_METRICS, metric


def _all_exprs() -> list[tuple[str, str]]:
    exprs = [e for doc in RULES for e in rule_exprs(doc)]
    return exprs + [e for d in DASHES for e in dashboard_exprs(d)]


def test_every_queried_metric_is_in_the_catalog() -> None:
    assert check.unknown_metrics(_all_exprs(), RULES) == []


def test_unknown_metric_is_caught() -> None:
    bogus = [("x", 'sum(rate(connmon_made_up_total{job="a"}[5m])) / connmon_sockets')]
    assert check.unknown_metrics(bogus, RULES) == [("x", "connmon_made_up_total")]


FLEET = next(d for d in DASHES if check.is_fleet_dashboard(d))
# Read by the fleet dashboard without a roll-up: a few series per exporter, not per series.
FIRED = "connmon_findings_fired_total"


def _reads(dash: dict) -> set[str]:
    return {n for _, e in dashboard_exprs(dash) for n in metric_names(e)}


def test_every_recording_rule_is_read_by_the_fleet_dashboard_or_an_alert() -> None:
    used = _reads(FLEET) | {n for a in ALERTS for n in metric_names(a["expr"])}
    assert check.recorded_names(RULES) <= used


def test_rates_are_rolled_up_per_app_and_per_broker() -> None:
    recorded = check.recorded_names(RULES)
    for metric in (
        "connmon_connection_opens_per_second", "connmon_idle_closes_per_second",
        "connmon_idle_reconnects_per_second", "connmon_broker_dropped_connections_per_second",
        "connmon_connect_failures_per_second",
    ):  # fmt: skip
        assert f"cluster_side_app:{metric}:sum" in recorded, metric
        assert f"cluster_side_broker:{metric}:sum" in recorded, metric


def test_the_fleet_dashboard_reads_only_roll_ups() -> None:
    """Per-series data can be 100k+ series: the fleet view must not scan it, not even for its
    variables."""
    reads = _reads(FLEET)
    per_series = {m.name for m in AGGREGATE_METRICS + FINDING_METRICS} - {FIRED}
    assert reads and not reads & per_series
    assert check.per_series_reads(FLEET) == []
    assert reads - check.recorded_names(RULES) == {FIRED}
    variables = [e for where, e in dashboard_exprs(FLEET) if "/$" in where]
    assert len(variables) == 3
    assert all(metric_names(e) <= check.recorded_names(RULES) for e in variables)


def test_a_per_series_query_on_the_fleet_dashboard_fails_lint() -> None:
    bad = copy.deepcopy(FLEET)
    panel = next(p for p in bad["panels"] if p["type"] == "timeseries")
    panel["targets"][0]["expr"] = 'topk(10, connmon_sockets{state="CLOSE_WAIT"})'
    var = next(v for v in bad["templating"]["list"] if v["name"] == "app")
    var["query"] = "label_values(connmon_client_library_info, app)"
    problems = "\n".join(check.lint_dashboard(bad))
    assert f"{panel['title']}/A: reads the per-series connmon_sockets" in problems
    assert "$app: reads the per-series connmon_client_library_info" in problems
    # The drill-downs read per-series metrics, filtered to one host, app or broker.
    (client,) = [d for d in DASHES if d["uid"].endswith("client")]
    assert check.per_series_reads(client) and check.lint_dashboard(client) == []


def test_stat_panels_show_zero_when_nothing_is_counted() -> None:
    """Counts and rates are absent when zero: a stat's sum over nothing is 0, not "No data"."""
    stats = [(d["uid"], p) for d in DASHES for p in d["panels"] if p["type"] == "stat"]
    assert stats
    for uid, p in stats:
        for t in p["targets"]:
            assert t["expr"].startswith("sum(") and t["expr"].endswith(" or vector(0)"), uid


def test_the_broker_alert_reads_a_roll_up() -> None:
    (alert,) = [a for a in ALERTS if a["alert"] == "ConnMonBrokerUnavailable"]
    assert metric_names(alert["expr"]) == {FAILING_HOSTS}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (le) (rate(a_bucket{x=~"$host"}[$__rate_interval]))', {"a_bucket"}),
        ('time() - max by (q) (b{job="x"}) > 300 or up == 0', {"b", "up"}),
        ("lvl:c:sum / on(app) group_left() d offset 5m > 1e3", {"lvl:c:sum", "d"}),
    ],
)
def test_metric_name_extraction(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_grafana_variables_are_replaced_for_prometheus() -> None:
    out = grafana_to_promql('rate(x{host=~"$host", app=~"${app}"}[$__rate_interval])')
    assert out == 'rate(x{host=~".*", app=~".*"}[5m])'


@pytest.mark.parametrize("dash", DASHES, ids=lambda d: d["uid"])
def test_dashboards_pass_lint(dash: dict) -> None:
    assert check.lint_dashboard(dash) == []


def test_dashboard_lint_catches_problems() -> None:
    bad = copy.deepcopy(DASHES[0])
    panel = next(p for p in bad["panels"] if p["type"] == "timeseries")
    panel["description"] = ""
    panel["datasource"] = "Prometheus"
    panel["targets"][0]["expr"] = "rate(connmon_exporter_messages_total[5m])"
    bad["schemaVersion"] = 12
    problems = "\n".join(check.lint_dashboard(bad))
    for expected in ("schemaVersion 12", "title and a description", "datasource is not",
                     "[$__rate_interval]"):  # fmt: skip
        assert expected in problems


def test_dashboards_are_modern_grafana_json() -> None:
    names = {p.name for p in (ROOT / "dashboards").glob("*.dashboard.py")}
    assert {"fleet.dashboard.py", "client.dashboard.py", "broker.dashboard.py",
            "pipeline.dashboard.py"} <= names  # fmt: skip
    for d in DASHES:
        assert d["schemaVersion"] == 39
        assert {"rows", "style", "sharedCrosshair", "hideControls"}.isdisjoint(d)
        fleet = d["uid"].endswith("fleet")  # no host: the fleet reads roll-ups only
        assert [v["name"] for v in d["templating"]["list"]] == [
            "datasource", "cluster", *(() if fleet else ("host",)), "app", "broker",
        ]  # fmt: skip
        assert d["refresh"] == DEFAULT.dashboard_refresh
        for p in d["panels"]:
            assert "span" not in p and "error" not in p
            for t in p.get("targets", []):
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
                assert {"query", "step", "intervalFactor"}.isdisjoint(t)


def _fd_rules(cfg=DEFAULT) -> tuple[dict, dict]:
    """The per-process roll-up and the alert that reads it, from their own group."""
    (group,) = [g for g in alert_rules(cfg)["groups"] if g["name"] == "connmon.processes"]
    record, alert = group["rules"]
    return record, alert


def test_fd_exhaustion_alert_is_per_process_and_follows_its_settings() -> None:
    record, rule = _fd_rules()
    assert rule["alert"] == "ConnMonFdExhaustionPredicted"
    assert rule["labels"] == {"severity": "critical"} and rule["for"] == "15m"
    # Per process: the broker and peer of its series aggregated away with max, never summed,
    # recorded before the alert in its group.
    assert record["record"] == PROCESS_FD_USAGE
    assert record["expr"].startswith("max by (cluster, side, host, app) (")
    assert metric_names(record["expr"]) == {"connmon_process_fd_usage_ratio"}
    assert metric_names(rule["expr"]) == {PROCESS_FD_USAGE}
    assert f"predict_linear({PROCESS_FD_USAGE}[30m], 3600) >= 1" in rule["expr"]
    assert f"min_over_time({PROCESS_FD_USAGE}[15m])" in rule["expr"]
    # The horizon is the detectors' deadline for a critical close_wait_buildup.
    detectors = DEFAULT.detectors.replace(fd_exhaustion_critical_s=7200.0)
    _, changed = _fd_rules(
        DEFAULT.replace(
            detectors=detectors, fd_exhaustion_range="1h", fd_exhaustion_for="20m",
            fd_exhaustion_rise_window="18m",
        )
    )  # fmt: skip
    assert "[1h], 7200) >= 1" in changed["expr"] and "[18m])" in changed["expr"]
    assert changed["for"] == "20m"
    assert "within 2h" in changed["annotations"]["summary"]
    assert "the last 1h reaches it within 2h" in changed["annotations"]["description"]


def test_alert_texts_follow_the_detector_config() -> None:
    cfg = DEFAULT.replace(detectors=DEFAULT.detectors.replace(close_wait_grace_s=45.0))
    rule = alert_rules(cfg)["groups"][0]["rules"][0]
    assert rule["alert"] == "ConnMonCloseWaitBuildup"
    assert "more than 45s" in rule["annotations"]["description"]
    with pytest.raises(ValueError, match="nope"):
        DEFAULT.replace(nope=1)


def test_selectors_flow_into_every_rule() -> None:
    cfg = DEFAULT.replace(exporter_selector='job="other"', agent_selector='job="ag"')
    for group in alert_rules(cfg)["groups"]:
        recorded = {r["record"]: r["expr"] for r in group["rules"] if "record" in r}
        for rule in group["rules"]:
            # An alert on a roll-up gets the selector through the rule recording it.
            reads = [rule["expr"]] + [
                recorded[n] for n in metric_names(rule["expr"]) & set(recorded)
            ]
            assert any('job="other"' in e or 'job="ag"' in e for e in reads), rule["expr"]
            assert "connmon-exporter" not in rule["expr"]


def test_kubernetes_prometheus_rule_carries_the_same_groups() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/prometheusrule.yaml").read_text()))
    assert docs[0]["kind"] == "PrometheusRule"
    amc = yaml.safe_load((ROOT / "deploy/kubernetes/alertmanagerconfig.yaml").read_text())
    groups = docs[0]["spec"]["groups"]
    # Every alert is labelled with the AlertmanagerConfig's namespace (the operator routes
    # only those to its routes); otherwise the groups are the rule files'.
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert {r["labels"]["namespace"] for r in alerts} == {amc["metadata"]["namespace"]}
    for r in alerts:
        r["labels"].pop("namespace")
        if not r["labels"]:
            del r["labels"]
    assert groups == RULES[0]["groups"] + RULES[1]["groups"]
    monitors = list(
        yaml.safe_load_all((ROOT / "deploy/kubernetes/servicemonitor.yaml").read_text())
    )
    assert {m["kind"] for m in monitors} == {"ServiceMonitor"}


def test_catalog_follows_prometheus_naming() -> None:
    names = [m.name for m in ALL_METRICS]
    assert len(names) == len(set(names))
    for m in ALL_METRICS:
        assert re.fullmatch(r"connmon_[a-z0-9_]+", m.name), m.name
        assert (m.type == "counter") == m.name.endswith("_total"), m.name
        assert not FORBIDDEN_LABELS & set(m.labels), m.name
        assert not re.search(r"_(ms|milliseconds|minutes|bytes_total_total)$", m.name)
        assert m.help.strip().endswith("."), m.name


def test_metrics_doc_lists_every_metric() -> None:
    text = Path(ROOT / "docs/metrics.md").read_text()
    for m in ALL_METRICS:
        assert f"`{m.name}`" in text
