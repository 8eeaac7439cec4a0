"""From exported series to a person's notification: a real Prometheus evaluates connmon's alert
rules and sends to a real Alertmanager running connmon's shipped configuration, whose
receivers post to a webhook receiver in the test. The series come from a /metrics endpoint the
test writes (the exporter's own output is tested elsewhere): what is under test here is the
rules, the routes, the grouping and the inhibitions, with the real servers.

Timings are shortened by configuration only (``for``, group waits, scrape interval); the
committed rules and configuration with their own timings run in test_stack_alerting.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from job_helpers import wait_for

from streaming.mixin.alerts import alert_rules
from streaming.mixin.build import dump_yaml
from streaming.mixin.config import DEFAULT
from streaming.mixin.rules import recording_rules
from streaming.stack.alertmanager import AlertmanagerServer, local_config
from streaming.stack.ports import free_port
from streaming.stack.prometheus import PrometheusServer, connmon_jobs
from streaming.stack.webhook import WebhookReceiver

CFG = DEFAULT.replace(
    finding_for="6s",
    broker_unavailable_for="1s",
    rate_window="1m",
    rollup_interval=None,  # the test Prometheus evaluates every rule group often
)


class Series:
    """A /metrics endpoint serving the series the test sets."""

    def __init__(self) -> None:
        self.lines: dict[str, str] = {}
        self.port = free_port()
        series = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = "\n".join(series.lines.values()).encode() + b"\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, name: str, value: float, **labels: str) -> str:
        text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
        key = f"{name}{{{text}}}"
        self.lines[key] = f"{key} {value}"
        return key

    def drop(self, keys: list[str]) -> None:
        for k in keys:
            self.lines.pop(k, None)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[tuple[Series, WebhookReceiver, AlertmanagerServer]]:
    d = tmp_path_factory.mktemp("alerting")
    series = Series()
    (d / "alerts.yaml").write_text(dump_yaml(alert_rules(CFG)))
    (d / "rules.yaml").write_text(dump_yaml(recording_rules(CFG)))
    with WebhookReceiver() as hook:
        am = AlertmanagerServer(local_config(hook.url(), "1s", "2s"), base_dir=str(d / "am"))
        with (
            am,
            PrometheusServer(
                scrape_jobs=connmon_jobs(exporters=[f"127.0.0.1:{series.port}"]),
                rule_files=[d / "alerts.yaml", d / "rules.yaml"],
                alertmanagers=[am.address],
                base_dir=str(d / "prom"),
            ),
        ):
            yield series, hook, am
    series.server.shutdown()


def _finding(series: Series, kind: str, severity: str, host: str, app: str, broker: str) -> str:
    return series.set(
        "connmon_finding_active", 1, kind=kind, severity=severity, side="client",
        host=host, app=app, cluster="prod", broker_id=broker,
    )  # fmt: skip


def _groups(hook: WebhookReceiver, **group: str) -> list[dict[str, Any]]:
    """Notifications of the group with these group labels."""
    return [n for n in hook.notifications() if n["groupLabels"] == group]


def test_a_leaking_app_is_one_notification_with_links_that_open_then_a_resolved_one(stack):
    series, hook, _ = stack
    keys = [
        _finding(series, "close_wait_buildup", "warning", host, "orders", broker)
        for host, broker in (("web-1", "1"), ("web-2", "1"), ("web-2", "2"))
    ]
    advice = "Close the consumer on every error path (it leaks a socket per failed poll)."
    keys.append(
        series.set(
            "connmon_finding_recommendation_info",
            1,
            kind="close_wait_buildup",
            severity="warning",
            side="client",
            host="web-1",
            app="orders",
            cluster="prod",
            broker_id="1",
            recommendation=advice,
        )  # fmt: skip
    )
    group = {"alertname": "ConnMonCloseWaitBuildup", "cluster": "prod", "app": "orders"}
    firing = wait_for("the firing notification", lambda: _groups(hook, **group))
    time.sleep(5)  # any second notification for the same group would be here by now
    sent = _groups(hook, **group)
    assert len(sent) == 1, sent
    n = sent[0]
    assert n["status"] == "firing" and n["receiver"] == "connmon-warning"
    assert n in hook.notifications("/warning")
    assert len(n["alerts"]) == 3  # three hosts x brokers, one notification
    a = next(x for x in n["alerts"] if x["labels"]["host"] == "web-1")
    assert a["labels"]["severity"] == "warning" and a["labels"]["app"] == "orders"
    ann = a["annotations"]
    assert ann["summary"] == (
        "Sockets to a Kafka broker are stuck in CLOSE_WAIT: orders on web-1, broker 1, "
        "cluster prod."
    )
    assert (
        "orders on web-1 (client side) holds CLOSE_WAIT sockets to broker 1" in ann["description"]
    )
    assert ann["description"].endswith(" What to do: " + advice)
    assert ann["runbook_url"] == DEFAULT.runbook_url_base + "#connmonclosewaitbuildup"
    assert ann["dashboard_url"].startswith(
        DEFAULT.grafana_url + "/d/connmon-client?var-cluster=prod"
    )
    assert firing

    series.drop(keys)  # the client fixed: the series go away
    resolved = wait_for(
        "the resolved notification",
        lambda: [x for x in _groups(hook, **group) if x["status"] == "resolved"],
    )
    assert {al["status"] for al in resolved[-1]["alerts"]} == {"resolved"}


def test_two_leaking_apps_are_two_notifications(stack):
    series, hook, _ = stack
    for app in ("payments", "billing"):
        _finding(series, "idle_zombie", "warning", "web-3", app, "1")
    for app in ("payments", "billing"):
        group = {"alertname": "ConnMonIdleZombie", "cluster": "prod", "app": app}
        sent = wait_for(f"{app}'s notification", lambda group=group: _groups(hook, **group))
        assert len(sent) == 1 and len(sent[0]["alerts"]) == 1, sent


def test_a_broker_down_holds_back_the_storms_it_causes_not_others(stack):
    series, hook, am = stack
    drops = []
    for host in ("web-4", "web-5"):  # two client hosts see broker 3 drop their connections
        drops.append(series.set(
            "connmon_broker_dropped_connections_per_second", 0.5, side="client",
            host=host, app="ingest", cluster="prod", broker_id="3",
        ))  # fmt: skip
    group = {"alertname": "ConnMonBrokerUnavailable", "cluster": "prod"}
    broker = wait_for("the broker's notification", lambda: _groups(hook, **group))
    assert broker[0]["alerts"][0]["labels"]["broker_id"] == "3"
    # Now the storms its clients raise, a host-level one, and one toward a healthy broker.
    _finding(series, "connection_storm", "critical", "web-4", "ingest", "3")
    _finding(series, "idle_churn", "warning", "web-5", "ingest", "3")
    _finding(series, "connection_storm", "critical", "web-6", "*", "*")
    _finding(series, "connection_storm", "critical", "web-6", "export", "1")
    other = {"alertname": "ConnMonConnectionStorm", "cluster": "prod", "app": "export"}
    sent = wait_for("the storm toward the healthy broker", lambda: _groups(hook, **other))
    assert sent[0]["receiver"] == "connmon-critical"

    def held_back() -> list[dict[str, Any]]:
        return [
            a for a in am.alerts()
            if a["labels"]["alertname"] in ("ConnMonConnectionStorm", "ConnMonIdleChurn")
            and a["status"]["inhibitedBy"]
        ]  # fmt: skip

    inhibited = wait_for("the storms toward broker 3 inhibited", lambda: len(held_back()) == 3)
    assert inhibited
    time.sleep(5)  # a notification for them, were they not held back, would be out by now
    for app in ("ingest", "*"):
        for alert in ("ConnMonConnectionStorm", "ConnMonIdleChurn"):
            assert _groups(hook, alertname=alert, cluster="prod", app=app) == [], (alert, app)

    # The broker is back: no drop is exported any more (a rate of zero is no sample), and the
    # alert resolves.
    series.drop(drops)
    resolved = wait_for(
        "the broker's resolved notification",
        lambda: [n for n in _groups(hook, **group) if n["status"] == "resolved"],
    )
    assert resolved[-1]["alerts"][0]["labels"]["broker_id"] == "3"
