"""deploy/prometheus as committed, as a user takes it: the example prometheus.yml loads the
rule files and sends the alerts to an Alertmanager, every *.yaml there is a rule file, and the
dashboards find every recording rule they read in the files the docs say to load."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from streaming.mixin.exprs import dashboard_exprs
from streaming.mixin.promql import metric_names

ROOT = Path(__file__).resolve().parents[3]
PROM_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_YML = PROM_DIR / "prometheus.yml"
GRAFANA_README = ROOT / "deploy" / "grafana" / "README.md"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _recorded(path: Path) -> set[str]:
    return {r["record"] for g in _yaml(path)["groups"] for r in g["rules"] if "record" in r}


def _rule_files() -> list[str]:
    """The paths prometheus.yml's ``rule_files`` names (relative to it)."""
    return list(_yaml(PROMETHEUS_YML)["rule_files"])


def _all_recorded() -> set[str]:
    return set().union(*(_recorded(p) for p in sorted(PROM_DIR.glob("*.yaml"))))


def _dashboard_reads() -> dict[str, set[str]]:
    """Dashboard file -> the recording rules (names with a colon) its queries read."""
    out = {}
    for path in sorted((ROOT / "dashboards" / "out").glob("*.json")):
        dash = json.loads(path.read_text())
        out[path.name] = {n for _, e in dashboard_exprs(dash) for n in metric_names(e) if ":" in n}
    return out


def test_every_yaml_file_there_is_a_rule_file() -> None:
    """Docs and tools load deploy/prometheus/*.yaml as rule files: nothing else may match."""
    for path in sorted(PROM_DIR.glob("*.yaml")):
        doc = _yaml(path)
        assert isinstance(doc, dict) and set(doc) == {"groups"}, f"{path.name} is no rule file"
        assert all(g["rules"] for g in doc["groups"]), path.name


def test_prometheus_yml_loads_every_rule_file_and_sends_alerts_to_alertmanager() -> None:
    cfg = _yaml(PROMETHEUS_YML)
    loaded = sorted(Path(p).name for p in cfg["rule_files"])
    assert loaded == sorted(p.name for p in PROM_DIR.glob("*.yaml")), loaded
    managers = cfg["alerting"]["alertmanagers"]
    targets = [t for m in managers for sc in m.get("static_configs", []) for t in sc["targets"]]
    assert targets, "alerting: needs an Alertmanager target"


def test_dashboards_find_their_recording_rules_in_the_files_the_docs_name() -> None:
    reads = _dashboard_reads()
    defined = _all_recorded()
    # The dashboards read recording rules, and each of them exists in some committed file.
    assert any(reads.values())
    missing = {f: sorted(names - defined) for f, names in reads.items() if names - defined}
    assert not missing, missing
    readme = GRAFANA_README.read_text()
    named = set(re.findall(r"deploy/prometheus/([\w.-]+\.yaml)", readme))
    in_docs = set().union(*(_recorded(PROM_DIR / n) for n in named if (PROM_DIR / n).exists()))
    in_prometheus_yml = set().union(*(_recorded(PROM_DIR / Path(p).name) for p in _rule_files()))
    for where, loaded in (("grafana/README.md", in_docs), ("prometheus.yml", in_prometheus_yml)):
        unread = {f: sorted(names - loaded) for f, names in reads.items() if names - loaded}
        assert not unread, f"{where} does not load the rules these dashboards read: {unread}"
    # A rule recorded next to an alert rather than in rules.yaml is easy to miss: the README
    # names each one the dashboards read.
    elsewhere = set().union(*reads.values()) - _recorded(PROM_DIR / "rules.yaml")
    unnamed = sorted(n for n in elsewhere if n not in readme)
    assert not unnamed, f"deploy/grafana/README.md does not say where these come from: {unnamed}"
