"""``connmon mixin build|check``: write the generated rules, dashboards and deploy objects, or
verify them (up to date, catalog names, lint, promtool, amtool; pint and dashboard-linter if
present)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streaming.mixin import alertmanager, build, check
from streaming.mixin.config import DEFAULT, with_settings
from streaming.mixin.exprs import dashboard_exprs, rule_exprs
from streaming.options import parse_pairs


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("mixin", help="build or check alerts, rules and dashboards")
    sub = p.add_subparsers(dest="mixin_command", metavar="ACTION", required=True)
    b = sub.add_parser(
        "build",
        help="write dashboards/out, deploy/prometheus, deploy/alertmanager, deploy/kubernetes",
    )
    b.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="a mixin setting, e.g. runbook_url_base=https://..., grafana_url=https://..., "
        "alert_webhooks.critical=https://... (repeatable; streaming/mixin/config.py lists them)",
    )
    b.add_argument("--out", help="write into this folder instead of the checkout")
    b.set_defaults(func=run_build)
    c = sub.add_parser("check", help="verify the generated files and lint them")
    c.add_argument(
        "--require-linters",
        action="store_true",
        help="fail when pint or dashboard-linter cannot be installed (default: report only)",
    )
    c.set_defaults(func=run_check)


def run_build(args: argparse.Namespace) -> int:
    cfg = with_settings(DEFAULT, parse_pairs("set", args.set))
    root = Path(args.out) if args.out else build.ROOT
    for path in build.write(root, cfg):
        print(path.relative_to(root))
    return 0


def _report(name: str, rc: int, output: str) -> bool:
    print(f"{'ok  ' if rc == 0 else 'FAIL'} {name}")
    if rc != 0 and output:
        print("     " + output.replace("\n", "\n     "))
    return rc == 0


def run_check(args: argparse.Namespace) -> int:
    ok = True
    stale = build.stale()
    ok &= _report("generated files up to date", len(stale), "\n".join(stale))
    rules, dashes = check.load_outputs()
    exprs = [e for doc in rules for e in rule_exprs(doc)]
    exprs += [e for d in dashes for e in dashboard_exprs(d)]
    unknown = check.unknown_metrics(exprs, rules)
    ok &= _report(
        "metric names in the catalog", len(unknown), "\n".join(f"{w}: {n}" for w, n in unknown)
    )
    problems = [p for d in dashes for p in check.lint_dashboard(d)]
    ok &= _report("dashboard lint", len(problems), "\n".join(problems))
    problems = check.kubernetes_policy_problems()
    ok &= _report("kubernetes security policy", len(problems), "\n".join(problems))
    ok &= _report("promtool check rules", *check.promtool_check_rules())
    ok &= _report("promtool test rules", *check.promtool_test_rules())
    ok &= _report("amtool check-config", *check.amtool_check_config())
    cases = alertmanager.route_cases(DEFAULT)
    ok &= _report(
        f"amtool config routes test ({len(cases)} cases)", *check.amtool_route_tests(cases)
    )
    rc, out = check.install_go_tools()
    if rc != 0:
        print(f"{'FAIL' if args.require_linters else 'skip'} pint, dashboard-linter: {out}")
        ok &= not args.require_linters
    else:
        ok &= _report("pint lint", *(check.pint_lint() or (1, "pint missing")))
        paths = sorted((build.ROOT / "dashboards/out").glob("*.json"))
        ok &= _report("dashboard-linter --strict", *(check.dashboard_linter(paths) or (1, "")))
    sys.stdout.flush()
    return 0 if ok else 1
