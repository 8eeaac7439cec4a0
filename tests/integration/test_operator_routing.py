"""connmon's shipped AlertmanagerConfig as a Kubernetes cluster with the Prometheus Operator
routes it.

The operator's own code (``ConfigBuilder``, pinned in deploy/local/alertmanager-routing) turns
the committed ``deploy/kubernetes/alertmanagerconfig.yaml`` into the configuration its
Alertmanager runs, on top of kube-prometheus-stack's default configuration and at the
operator's default matcher strategy (``OnNamespace``). Every alert of the committed
``prometheusrule.yaml``, with the labels that file gives it, must reach connmon's receiver for
its severity (amtool of the Alertmanager version the operator configures), and connmon's
inhibitions must hold alerts back in a real Alertmanager running that configuration. The
object as a real API server stores it (CRD defaults filled in) converts to the same.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from job_helpers import wait_for

from streaming.mixin.build import ROOT
from streaming.mixin.config import SEVERITIES
from streaming.stack import operator_routing
from streaming.stack.alertmanager import AlertmanagerServer

pytestmark = pytest.mark.integration

KUBE = ROOT / "deploy" / "kubernetes"
AMC = KUBE / "alertmanagerconfig.yaml"
RULES = KUBE / "prometheusrule.yaml"
BASE = ROOT / "tests" / "fixtures" / "alertmanager" / "kube-prometheus-stack.yaml"


def _amc() -> dict[str, Any]:
    return yaml.safe_load(AMC.read_text())


def _receiver(severity: str) -> str:
    """The name the operator gives connmon's receiver of a severity."""
    meta = _amc()["metadata"]
    return f"{meta['namespace']}/{meta['name']}/connmon-{severity}"


def _alert_labels() -> dict[str, dict[str, str]]:
    """Per alert of the committed PrometheusRule, the labels its rule sets."""
    obj = yaml.safe_load(RULES.read_text())
    return {
        r["alert"]: {"alertname": r["alert"], **r.get("labels", {})}
        for g in obj["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }


def _label_sets() -> list[dict[str, str]]:
    """Each alert with each severity it can have: its rule's, or the finding's own."""
    out = []
    for labels in _alert_labels().values():
        severities = [labels["severity"]] if "severity" in labels else list(SEVERITIES)
        out += [{**labels, "severity": s} for s in severities]
    return out


def _generate(directory: Path, base: Path = BASE, **kw: str) -> Path:
    out = directory / "alertmanager.yaml"
    out.write_text(operator_routing.generate([AMC], base=base, **kw))
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return _generate(tmp_path_factory.mktemp("operator"))


def _routes(config: Path, labels: dict[str, str]) -> str:
    argv = [str(operator_routing.binary("amtool")), "config", "routes", "test"]
    argv += [f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize(
    "strategy", ["OnNamespace", "OnNamespaceExceptForAlertmanagerNamespace", "None"]
)
def test_every_alert_reaches_its_severitys_receiver(tmp_path, strategy):
    generated = _generate(tmp_path, strategy=strategy)
    sets = _label_sets()
    assert len(sets) >= 19
    wrong = {
        json.dumps(labels, sort_keys=True): got
        for labels in sets
        if (got := _routes(generated, labels)) != _receiver(labels["severity"])
    }
    assert not wrong, wrong


def test_without_the_namespace_label_an_alert_falls_to_the_root_receiver(generated):
    """What the namespace label on every rule is for: the operator's route for connmon's
    AlertmanagerConfig only takes alerts of its namespace."""
    labels = {**_label_sets()[0]}
    del labels["namespace"]
    assert _routes(generated, labels) == "null"


# ---- inhibitions in a real Alertmanager -------------------------------------------------
def _first(value: str) -> str:
    """One value a matcher accepts (the first alternative of a regex of alternatives)."""
    return value.split("|")[0]


def _side(matchers: list[dict[str, str]], alerts: dict[str, dict[str, str]]) -> dict[str, str]:
    """An alert matching one side of an inhibition, labelled as its rule labels it."""
    labels = {m["name"]: _first(m["value"]) for m in matchers}
    return {"severity": "warning", **alerts[labels["alertname"]], **labels}


def _start(generated: Path) -> AlertmanagerServer:
    config = yaml.safe_load(generated.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = "http://127.0.0.1:9/"  # nothing listens: deliveries are not tested here
    return AlertmanagerServer(config=config).start()


@pytest.fixture(scope="module")
def alertmanager(generated) -> Any:
    server = _start(generated)
    yield server
    server.stop()


# deploy/kubernetes/README.md's advice for kube-prometheus-stack's own inhibit rules
EXCLUDE = 'alertname !~ "ConnMon.*"'


def _post(am: AlertmanagerServer, alerts: list[dict[str, str]]) -> None:
    now = datetime.now(UTC).isoformat()
    body = json.dumps([{"labels": a, "startsAt": now} for a in alerts]).encode()
    req = urllib.request.Request(
        f"{am.url}/api/v2/alerts", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10):
        pass


def _inhibited(am: AlertmanagerServer, marker: str) -> dict[str, bool]:
    return {
        a["labels"]["case"]: bool(a["status"]["inhibitedBy"])
        for a in am.alerts()
        if a["labels"].get("case", "").startswith(marker)
    }


def test_connmons_inhibitions_apply(alertmanager):
    """Each inhibit rule of the AlertmanagerConfig, with alerts labelled as the PrometheusRule
    labels them: the target is held back, and (where the rule names labels that must be
    equal) the same target for another cluster, broker or job is not."""
    alerts = _alert_labels()
    sent, expect = [], {}
    for i, rule in enumerate(_amc()["spec"]["inhibitRules"]):
        source = {**_side(rule["sourceMatch"], alerts), "case": f"inhibit-{i}-source"}
        target = _side(rule["targetMatch"], alerts)
        for name in rule.get("equal", []):
            source[name] = target[name] = "same"
        sent += [source, {**target, "case": f"inhibit-{i}-target"}]
        expect[f"inhibit-{i}-target"] = True
        expect[f"inhibit-{i}-source"] = False
        if rule.get("equal"):
            other = {**target, rule["equal"][0]: "other", "case": f"inhibit-{i}-other"}
            sent.append(other)
            expect[f"inhibit-{i}-other"] = False
    _post(alertmanager, sent)
    got = wait_for(
        "the alerts and their inhibition",
        lambda: (s := _inhibited(alertmanager, "inhibit-")) == expect and s,
        timeout_s=30,
        detail=lambda: _inhibited(alertmanager, "inhibit-"),
    )
    assert got == expect


def _chart_case(am: AlertmanagerServer, tag: str, held: set[str]) -> dict[str, bool]:
    """One app's critical alert and another app's warning of the same name; a connmon info
    alert while the chart's InfoInhibitor fires for connmon's namespace: which are held back
    (once the cases in ``held`` are, and a few seconds more for the others)."""
    alert = _alert_labels()["ConnMonCloseWaitBuildup"]
    ns = alert["namespace"]
    sent = [
        {**alert, "severity": "critical", "app": "payments", "case": f"{tag}-critical"},
        {**alert, "severity": "warning", "app": "billing", "case": f"{tag}-warning"},
        {"alertname": "InfoInhibitor", "severity": "none", "namespace": ns, "case": f"{tag}-ii"},
        {
            **_alert_labels()["ConnMonDuplicateConnections"],
            "severity": "info",
            "case": f"{tag}-info",
        },
    ]
    _post(am, sent)
    wait_for(
        "the alerts received",
        lambda: len(_inhibited(am, f"{tag}-")) == len(sent),
        timeout_s=30,
        detail=lambda: _inhibited(am, f"{tag}-"),
    )
    # The inhibitor takes in new alerts asynchronously.
    wait_for(
        "the alerts held back",
        lambda: all(_inhibited(am, f"{tag}-")[c] for c in held),
        timeout_s=30,
        detail=lambda: _inhibited(am, f"{tag}-"),
    )
    time.sleep(3)
    return _inhibited(am, f"{tag}-")


def test_kube_prometheus_stacks_own_inhibitions_reach_connmons_alerts(alertmanager, tmp_path):
    """deploy/kubernetes/README.md: the chart's severity rule holds back one app's warning
    while another app's alert of the same name is critical (all of connmon's alerts share a
    namespace), and its InfoInhibitor holds back connmon's info alerts; the README's matcher
    added to those rules' targets keeps connmon's alerts out of them."""
    assert EXCLUDE in (KUBE / "README.md").read_text()
    as_shipped = _chart_case(alertmanager, "chart", {"chart-warning", "chart-info"})
    assert as_shipped["chart-warning"] and as_shipped["chart-info"], as_shipped
    assert not as_shipped["chart-critical"]

    base = yaml.safe_load(BASE.read_text())
    for rule in base["inhibit_rules"]:
        if rule.get("source_matchers"):  # the three that hold alerts back
            rule["target_matchers"].append(EXCLUDE)
    amended = tmp_path / "base.yaml"
    amended.write_text(yaml.safe_dump(base))
    server = _start(_generate(tmp_path, base=amended))
    try:
        advised = _chart_case(server, "advised", {"advised-ii"})
    finally:
        server.stop()
    advised.pop("advised-ii")  # the chart holds its InfoInhibitor itself back, always
    assert not any(advised.values()), advised


def test_the_object_as_the_api_server_stores_it_routes_the_same(kube, generated, tmp_path):
    """The operator reads the object back from the API server, with the CRD's defaults filled
    in: that object converts to the same configuration as the committed file."""
    kube.kubectl("apply", "--server-side", "--field-manager=connmon-test",
                 "-f", str(KUBE / "namespace.yaml"), "-f", str(AMC))  # fmt: skip
    meta = _amc()["metadata"]
    stored = kube.request(
        "GET",
        f"/apis/monitoring.coreos.com/v1alpha1/namespaces/{meta['namespace']}"
        f"/alertmanagerconfigs/{meta['name']}",
    )
    as_stored = tmp_path / "stored.json"
    as_stored.write_text(json.dumps(stored))
    got = operator_routing.generate([as_stored], base=BASE)
    assert yaml.safe_load(got) == yaml.safe_load(generated.read_text())
