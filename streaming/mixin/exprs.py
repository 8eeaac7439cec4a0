"""The PromQL expressions of the mixin's outputs: every rule of a rules file, every panel
target and query variable of a dashboard JSON."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any


def rule_exprs(rule_doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expr) for every rule of a rules file."""
    for group in rule_doc["groups"]:
        for rule in group["rules"]:
            yield f"{group['name']}/{rule.get('alert') or rule.get('record')}", rule["expr"]


def dashboard_exprs(dash: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expr) for every panel target and query variable of a dashboard JSON."""
    for panel in panels(dash):
        for t in panel.get("targets", []):
            yield f"{dash['uid']}/{panel['title']}/{t.get('refId')}", t["expr"]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            m = re.match(r"^label_values\((.*),\s*\w+\)$", var["query"])
            yield f"{dash['uid']}/${var['name']}", m.group(1) if m else var["query"]


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])
