"""The Alertmanager configuration for connmon's alerts: routes by severity, grouping so that one
leaking application is one notification, and inhibition derived from what the alerts mean.

- Each severity has its receiver: ``critical`` pages, ``warning`` tickets, ``info`` (e.g.
  duplicate connections) goes to a low-urgency channel and repeats daily.
- Findings are grouped by ``alert_group_by`` (alert, cluster, app): every series of one app in
  one cluster with the same fault is one notification, whatever the hosts and brokers.
- Pipeline alerts are grouped by job and query (or exporter instance): each names its own
  component.
- ``ConnMonBrokerUnavailable`` (clients on several hosts see one broker drop connections or
  refuse connects) inhibits the ``ConnMonIdleChurn`` and ``ConnMonConnectionStorm`` alerts
  toward that broker (same cluster and broker id), and the host-level storms (broker ``*``),
  which a dead broker causes on every client that retries it.
- ``ConnMonJobStalled`` inhibits what only means "no new data" from the same job
  (``ConnMonDataStale``, ``ConnMonJobLagging``): the stall is the cause.

``route_cases`` lists, per route, labels and the receiver they must reach; ``connmon mixin
check`` runs them through ``amtool config routes test``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streaming.mixin.alerts import BROKER_ALERT, PIPELINE_GROUP, alert_rules, finding_alerts
from streaming.mixin.config import SEVERITIES, MixinConfig

_RECEIVER = "connmon-{}"  # per severity
# Finding kinds a broker that is down or restarting causes on its clients.
_BROKER_CAUSED = ("idle_churn", "connection_storm")


@dataclass(frozen=True)
class RouteCase:
    """Labels of an alert and the receiver Alertmanager must route it to."""

    labels: dict[str, str]
    receiver: str


def _names(cfg: MixinConfig, group: str) -> list[str]:
    rules = next(g["rules"] for g in alert_rules(cfg)["groups"] if g["name"] == group)
    return [r["alert"] for r in rules if "alert" in r]


def _any_of(names: list[str]) -> str:
    return 'alertname=~"' + "|".join(sorted(names)) + '"'


def config(cfg: MixinConfig) -> dict[str, Any]:
    """``alertmanager.yml`` (Alertmanager's own format)."""
    pipeline = _names(cfg, PIPELINE_GROUP)
    repeat = {
        "critical": cfg.alert_critical_repeat_interval,
        "info": cfg.alert_info_repeat_interval,
    }
    severity_routes = [
        {
            "receiver": _RECEIVER.format(sev),
            "matchers": [f"severity={sev}"],
            **({"repeat_interval": repeat[sev]} if sev in repeat else {}),
        }
        for sev in SEVERITIES
    ]
    storms = _any_of([a.name for a in finding_alerts(cfg) if a.kind in _BROKER_CAUSED])
    return {
        "route": {
            "receiver": _RECEIVER.format("warning"),
            "group_by": list(cfg.alert_group_by),
            "group_wait": cfg.alert_group_wait,
            "group_interval": cfg.alert_group_interval,
            "repeat_interval": cfg.alert_repeat_interval,
            "routes": [
                {
                    "matchers": [_any_of(pipeline)],
                    "group_by": ["alertname", "job_id", "query", "instance"],
                    "routes": severity_routes,
                },
                *severity_routes,
            ],
        },
        "receivers": [
            *(
                {"name": _RECEIVER.format(sev), "webhook_configs": [{"url": url}]}
                for sev, url in sorted(cfg.alert_webhooks.items())
            ),
        ],
        "inhibit_rules": [
            {
                "source_matchers": [f"alertname={BROKER_ALERT}"],
                "target_matchers": [storms],
                "equal": ["cluster", "broker_id"],
            },
            {
                "source_matchers": [f"alertname={BROKER_ALERT}"],
                "target_matchers": ["alertname=ConnMonConnectionStorm", 'broker_id="*"'],
            },
            {
                "source_matchers": ["alertname=ConnMonJobStalled"],
                "target_matchers": [_any_of(["ConnMonDataStale", "ConnMonJobLagging"])],
                "equal": ["job_id"],
            },
        ],
    }


def route_cases(cfg: MixinConfig) -> list[RouteCase]:
    """One case per route: where a finding, a pipeline alert and an inhibitor go."""
    finding = {"cluster": "prod", "app": "orders", "host": "web-1", "broker_id": "1"}
    first = finding_alerts(cfg)[0].name
    return [
        RouteCase({"alertname": first, "severity": "critical", **finding}, "connmon-critical"),
        RouteCase({"alertname": first, "severity": "warning", **finding}, "connmon-warning"),
        RouteCase(
            {"alertname": "ConnMonJobStalled", "severity": "critical", "job_id": "j"},
            "connmon-critical",
        ),
        RouteCase(
            {"alertname": "ConnMonDataStale", "severity": "warning", "job_id": "j"},
            "connmon-warning",
        ),
        RouteCase({"alertname": first, "severity": "info", **finding}, "connmon-info"),
        RouteCase({"alertname": "Unrelated"}, "connmon-warning"),
    ]


def _cr_matchers(matchers: list[str]) -> list[dict[str, Any]]:
    """Matchers as the Prometheus Operator's ``AlertmanagerConfig`` writes them (no
    ``matchType`` means equality)."""
    out: list[dict[str, Any]] = []
    for m in matchers:
        regex = "=~" in m
        name, value = m.split("=~" if regex else "=", 1)
        out.append(
            {"name": name, "value": value.strip('"')} | ({"matchType": "=~"} if regex else {})
        )
    return out


def _cr_route(route: dict[str, Any]) -> dict[str, Any]:
    keys = {
        "receiver": "receiver",
        "group_by": "groupBy",
        "group_wait": "groupWait",
        "group_interval": "groupInterval",
        "repeat_interval": "repeatInterval",
    }
    out: dict[str, Any] = {keys[k]: v for k, v in route.items() if k in keys}
    if "matchers" in route:
        out["matchers"] = _cr_matchers(route["matchers"])
    if "routes" in route:
        out["routes"] = [_cr_route(r) for r in route["routes"]]
    return out


def config_object(cfg: MixinConfig) -> dict[str, Any]:
    """The same routes, receivers and inhibitions as an ``AlertmanagerConfig`` for the
    Prometheus Operator (``monitoring.coreos.com/v1alpha1``), which merges them under its
    Alertmanager's root route for alerts of this namespace."""
    am = config(cfg)
    receivers = []
    for r in am["receivers"]:
        hooks = [{"url": h["url"]} for h in r.get("webhook_configs", [])]
        receivers.append({"name": r["name"], **({"webhookConfigs": hooks} if hooks else {})})
    inhibit = []
    for rule in am["inhibit_rules"]:
        item = {
            "sourceMatch": _cr_matchers(rule["source_matchers"]),
            "targetMatch": _cr_matchers(rule["target_matchers"]),
        }
        if "equal" in rule:
            item["equal"] = rule["equal"]
        inhibit.append(item)
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {
            "name": "connmon",
            "namespace": cfg.kubernetes_namespace,
            "labels": dict(cfg.kubernetes_labels),
        },
        "spec": {"route": _cr_route(am["route"]), "receivers": receivers, "inhibitRules": inhibit},
    }
