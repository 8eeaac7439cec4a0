"""The generated Alertmanager configuration and the links in alerts (no Alertmanager here: the
integration tests run amtool over the same files)."""

from __future__ import annotations

import re

import pytest
import yaml

from streaming.errors import ConfigError
from streaming.mixin import alertmanager, build
from streaming.mixin.alerts import BROKER_ALERT, alert_rules, finding_alerts
from streaming.mixin.config import DEFAULT, with_settings

CONFIG = alertmanager.config(DEFAULT)
ALERT_NAMES = {
    r["alert"] for g in alert_rules(DEFAULT)["groups"] for r in g["rules"] if "alert" in r
}


def _routes(route):
    yield route
    for child in route.get("routes", []):
        yield from _routes(child)


def _matcher_names(matchers):
    """Alert names a list of matchers selects by ``alertname`` (= or =~ of an alternation)."""
    for m in matchers:
        got = re.match(r'^alertname(=~|=)"?([^"]*)"?$', m)
        if got:
            yield from got.group(2).split("|")


def test_the_committed_file_is_what_the_config_generates():
    text = (build.ROOT / build.ALERTMANAGER_FILE).read_text()
    assert yaml.safe_load(text) == CONFIG


def test_one_leaking_app_in_one_cluster_is_one_notification():
    assert CONFIG["route"]["group_by"] == ["alertname", "cluster", "app"]
    finding = {a.name for a in finding_alerts(DEFAULT)}
    for route in _routes(CONFIG["route"]):
        named = set(_matcher_names(route.get("matchers", [])))
        assert not (named & finding and "group_by" in route), "findings keep the root grouping"


def test_every_receiver_a_route_names_exists_and_every_matcher_names_a_real_alert():
    receivers = {r["name"] for r in CONFIG["receivers"]}
    for route in _routes(CONFIG["route"]):
        assert route.get("receiver", CONFIG["route"]["receiver"]) in receivers
        assert set(_matcher_names(route.get("matchers", []))) <= ALERT_NAMES
    for rule in CONFIG["inhibit_rules"]:
        for side in ("source_matchers", "target_matchers"):
            assert set(_matcher_names(rule[side])) <= ALERT_NAMES, rule


def test_a_broker_down_holds_back_the_churn_and_storms_toward_it_and_a_stall_the_no_data():
    by_source = {}
    for rule in CONFIG["inhibit_rules"]:
        (source,) = _matcher_names(rule["source_matchers"])
        by_source.setdefault(source, []).append(rule)
    toward_broker = by_source[BROKER_ALERT][0]
    assert set(_matcher_names(toward_broker["target_matchers"])) == {
        "ConnMonIdleChurn",
        "ConnMonConnectionStorm",
    }
    assert toward_broker["equal"] == ["cluster", "broker_id"]
    (stall,) = by_source["ConnMonJobStalled"]
    assert set(_matcher_names(stall["target_matchers"])) == {
        "ConnMonDataStale",
        "ConnMonJobLagging",
    }
    assert stall["equal"] == ["job_id"]


def test_route_cases_reach_every_receiver():
    cases = alertmanager.route_cases(DEFAULT)
    assert {c.receiver for c in cases} == {r["name"] for r in CONFIG["receivers"]}


def test_the_operator_object_carries_the_same_routes_receivers_and_inhibitions():
    obj = alertmanager.config_object(DEFAULT)
    spec = obj["spec"]
    assert spec["route"]["receiver"] == CONFIG["route"]["receiver"]
    assert spec["route"]["groupBy"] == CONFIG["route"]["group_by"]
    assert len(list(_routes(spec["route"]))) == len(list(_routes(CONFIG["route"])))
    assert [r["name"] for r in spec["receivers"]] == [r["name"] for r in CONFIG["receivers"]]
    assert len(spec["inhibitRules"]) == len(CONFIG["inhibit_rules"])
    regex = [m for r in spec["inhibitRules"] for m in r["targetMatch"] if "matchType" in m]
    assert regex and all(m["matchType"] == "=~" and '"' not in m["value"] for m in regex)


def test_every_alert_links_to_an_absolute_runbook_section_and_dashboard():
    for group in alert_rules(DEFAULT)["groups"]:
        for rule in (r for r in group["rules"] if "alert" in r):
            ann = rule["annotations"]
            assert ann["runbook_url"].startswith("https://"), rule["alert"]
            assert ann["runbook_url"].endswith("#" + rule["alert"].lower())
            # A dashboard of the mixin, or the drill-down of the alert's side (client, broker).
            dashboard = r"connmon-(\w+|\{\{ \$labels\.side \}\})(\?|$)"
            assert re.match(rf"^https://[^/]+/d/{dashboard}", ann["dashboard_url"]), rule["alert"]


def test_settings_move_every_link_and_receiver():
    cfg = with_settings(
        DEFAULT,
        {
            "runbook_url_base": "https://git.example.org/connmon/runbook.md",
            "grafana_url": "https://g.example.org/",
            "alert_webhooks.critical": "https://pager.example.org/hook",
            "alert_group_by": "alertname, cluster",
        },
    )
    rules = [r for g in alert_rules(cfg)["groups"] for r in g["rules"] if "alert" in r]
    assert all(r["annotations"]["runbook_url"].startswith(cfg.runbook_url_base) for r in rules)
    assert all(
        r["annotations"]["dashboard_url"].startswith("https://g.example.org/d/") for r in rules
    )
    am = alertmanager.config(cfg)
    hooks = {r["name"]: r.get("webhook_configs") for r in am["receivers"]}
    assert hooks["connmon-critical"] == [{"url": "https://pager.example.org/hook"}]
    assert am["route"]["group_by"] == ["alertname", "cluster"]


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ({"runbook_url_base": "docs/runbook.md"}, "runbook_url_base: 'docs/runbook.md' is not an"),
        ({"grafana_url": "grafana:3000"}, "grafana_url: "),
        ({"alert_webhooks.warning": "/hook"}, "alert_webhooks.warning: "),
        ({"no_such_setting": "1"}, "set.no_such_setting: "),
        ({"finding_for": "2m", "cardinality_ratio": "lots"}, "set.cardinality_ratio: 'lots'"),
    ],
)
def test_a_setting_the_objects_cannot_use_is_refused_by_name(pairs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        with_settings(DEFAULT, pairs)


def test_build_refuses_a_relative_runbook_base(tmp_path):
    with pytest.raises(ConfigError, match="runbook_url_base"):
        build.write(tmp_path, DEFAULT.replace(runbook_url_base="docs/runbook.md"))
    assert not list(tmp_path.iterdir())
