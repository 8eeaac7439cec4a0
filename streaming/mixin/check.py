"""Checks on the generated mixin: metric names against the catalog, dashboard lint rules,
promtool, amtool, and (when installed) pint and Grafana's dashboard-linter."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from streaming.cachedir import cache_dir
from streaming.metricnames import ALL_METRICS, PROMETHEUS_BUILTINS, series_names
from streaming.metricnames.connmon import SERIES_LABELS
from streaming.mixin import grafana, kubernetes_policy
from streaming.mixin.alertmanager import RouteCase
from streaming.mixin.build import ALERTMANAGER_FILE, ROOT
from streaming.mixin.exprs import dashboard_exprs, panels
from streaming.mixin.promql import metric_names
from streaming.prometheus_bin import amtool, promtool

GO_BIN = Path(os.environ.get("CONNMON_GO_BIN") or cache_dir() / "go-bin")
INSTALL_TOOLS = ROOT / "deploy" / "prometheus" / "install-tools.sh"
PROM_DIR = ROOT / "deploy" / "prometheus"
RULE_FILES = (PROM_DIR / "alerts.yaml", PROM_DIR / "rules.yaml")
ALERTMANAGER_CONFIG = ROOT / ALERTMANAGER_FILE
_RATE_FUNCS = re.compile(r"\b(rate|irate|increase)\s*\(")
_RANGE_AFTER = re.compile(r"\[([^\]]+)\]")


# ---- expressions --------------------------------------------------------------------------
def recorded_names(rule_docs: list[dict[str, Any]]) -> set[str]:
    return {
        r["record"] for d in rule_docs for g in d["groups"] for r in g["rules"] if "record" in r
    }


def unknown_metrics(
    exprs: list[tuple[str, str]], rule_docs: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    """(where, name) for every metric an expression names that the catalog does not list."""
    known = series_names() | PROMETHEUS_BUILTINS | recorded_names(rule_docs)
    return [(where, n) for where, e in exprs for n in sorted(metric_names(e)) if n not in known]


# Metrics with a sample set per client x broker series (100k+ in a fleet): a fleet dashboard
# reads their recording-rule roll-ups instead.
PER_SERIES_METRICS: frozenset[str] = frozenset(
    m.name for m in ALL_METRICS if set(SERIES_LABELS) <= set(m.labels)
)


def is_fleet_dashboard(dash: dict[str, Any]) -> bool:
    return str(dash.get("uid", "")).endswith(grafana.FLEET_UID)


def per_series_reads(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, name) for every per-series metric a panel or variable of ``dash`` queries."""
    return [
        (where, n)
        for where, e in dashboard_exprs(dash)
        for n in sorted(metric_names(e))
        if n in PER_SERIES_METRICS
    ]


# ---- dashboard lint (the rules of grafana/dashboard-linter we rely on) ---------------------
def lint_dashboard(dash: dict[str, Any]) -> list[str]:
    """Problems in one dashboard JSON; empty when clean."""
    problems: list[str] = []
    uid = dash.get("uid", "?")
    if dash.get("schemaVersion", 0) < 36:
        problems.append(f"{uid}: schemaVersion {dash.get('schemaVersion')} is legacy")
    if dash.get("editable") is not False:
        problems.append(f"{uid}: provisioned dashboards must not be editable")
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables.get("datasource")
    if not ds or ds["type"] != "datasource" or ds["query"] != "prometheus":
        problems.append(f"{uid}: needs a 'datasource' variable of type datasource (prometheus)")
    # The fleet overview reads roll-ups, which have no host.
    required = (
        ("cluster", "app", "broker")
        if is_fleet_dashboard(dash)
        else ("cluster", "host", "app", "broker")
    )
    for name in required:
        if name not in variables:
            problems.append(f"{uid}: template variable ${name} missing")
    for v in variables.values():
        if v["type"] == "query":
            if v.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{uid}: ${v['name']} does not use ${{datasource}}")
            if v.get("refresh") != 2:
                problems.append(f"{uid}: ${v['name']} must refresh on time range change")
    for key in ("rows", "hideControls", "sharedCrosshair", "style"):
        if key in dash:
            problems.append(f"{uid}: legacy key {key!r}")
    if is_fleet_dashboard(dash):
        problems += [
            f"{where}: reads the per-series {name}; a fleet dashboard reads recording rules"
            for where, name in per_series_reads(dash)
        ]
    seen_ids: set[int] = set()
    for p in panels(dash):
        where = f"{uid}/{p.get('title') or p.get('id')}"
        if p.get("id") in seen_ids:
            problems.append(f"{where}: duplicate panel id {p.get('id')}")
        seen_ids.add(p.get("id"))
        if "gridPos" not in p:
            problems.append(f"{where}: no gridPos")
        if p["type"] == "row":
            continue
        if not p.get("title") or not p.get("description"):
            problems.append(f"{where}: needs a title and a description")
        if p.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
            problems.append(f"{where}: datasource is not {{type, uid: ${{datasource}}}}")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"{where}: no unit")
        if not p.get("targets"):
            problems.append(f"{where}: no targets")
        for t in p.get("targets", []):
            if t.get("datasource") != p.get("datasource"):
                problems.append(f"{where}: target datasource differs from the panel's")
            problems += [f"{where}: {msg}" for msg in _lint_expr(t["expr"])]
    return problems


def _lint_expr(expr: str) -> list[str]:
    out = []
    for m in _RATE_FUNCS.finditer(expr):
        rng = _RANGE_AFTER.search(expr, m.end())
        if rng and rng.group(1) != "$__rate_interval":
            out.append(f"{m.group(1)}() should use [$__rate_interval], not [{rng.group(1)}]")
    for name in metric_names(expr):
        if name.endswith("_total") and not re.search(
            rf"\b(rate|irate|increase)\s*\(\s*{re.escape(name)}\b", expr
        ):
            out.append(f"counter {name} must be wrapped in rate()/increase()")
    return out


# ---- external tools -----------------------------------------------------------------------
def _run(cmd: list[str]) -> tuple[int, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def promtool_check_rules(files: tuple[Path, ...] = RULE_FILES) -> tuple[int, str]:
    return _run([promtool(), "check", "rules", *map(str, files)])


def promtool_test_rules() -> tuple[int, str]:
    tests = sorted(str(p) for p in (PROM_DIR / "tests").glob("*.yaml"))
    return _run([promtool(), "test", "rules", *tests])


def amtool_check_config(path: Path = ALERTMANAGER_CONFIG) -> tuple[int, str]:
    return _run([amtool(), "check-config", str(path)])


def amtool_route_tests(cases: list[RouteCase], path: Path = ALERTMANAGER_CONFIG) -> tuple[int, str]:
    """Each case through ``amtool config routes test``: its labels must reach its receiver."""
    failed = []
    for case in cases:
        labels = [f"{k}={v}" for k, v in case.labels.items()]
        rc, out = _run(
            [amtool(), "config", "routes", "test", f"--config.file={path}",
             f"--verify.receivers={case.receiver}", *labels]
        )  # fmt: skip
        if rc != 0:
            got = out.splitlines()[0] if out else "nothing"
            failed.append(f"{' '.join(labels)}: expected {case.receiver}, got {got}")
    return (1 if failed else 0), "\n".join(failed)


def go_tool(name: str) -> str | None:
    path = GO_BIN / name
    return str(path) if path.exists() else shutil.which(name)


def install_go_tools() -> tuple[int, str]:
    return _run(["bash", str(INSTALL_TOOLS)])


def pint_lint() -> tuple[int, str] | None:
    pint = go_tool("pint")
    if pint is None:
        return None
    return _run([pint, "--offline", "lint", *map(str, RULE_FILES)])


def dashboard_linter(paths: list[Path]) -> tuple[int, str] | None:
    linter = go_tool("dashboard-linter")
    if linter is None:
        return None
    results = [_run([linter, "lint", "--strict", str(p)]) for p in paths]
    return max(r[0] for r in results), "\n".join(r[1] for r in results)


def kubernetes_policy_problems(root: Path = ROOT) -> list[str]:
    """The security policy (``kubernetes_policy``) over deploy/kubernetes/ as committed: every
    manifest the kustomization lists, the executor pod template, the agent's and job's configs."""
    kdir = root / "deploy" / "kubernetes"
    kust = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    objects = [
        doc
        for name in [*kust["resources"], "config/executor-pod-template.yaml"]
        for doc in yaml.safe_load_all((kdir / name).read_text())
        if doc
    ]
    agent = yaml.safe_load((kdir / "config" / "agent.yaml").read_text())
    job = yaml.safe_load((kdir / "config" / "job.yaml").read_text())
    return kubernetes_policy.problems(objects, agent, job)


def load_outputs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rule docs, dashboards) as committed."""
    rules = [yaml.safe_load(p.read_text()) for p in RULE_FILES]
    dashes = [json.loads(p.read_text()) for p in sorted((ROOT / "dashboards/out").glob("*.json"))]
    return rules, dashes
