"""Small PromQL helpers: selector building and the metric names an expression mentions."""

from __future__ import annotations

import re

_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
        "group_right", "bool", "offset", "inf", "nan", "atan2", "start", "end",
    }
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_DURATION = re.compile(r"^\d")


def metric_names(expr: str) -> set[str]:
    """Metric names (and recording-rule names) referenced by ``expr``."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = re.sub(r"\$\{?[\w:]+\}?", "", text)  # Grafana variables
    names = set()
    for m in _IDENT.finditer(text):
        name = m.group(1)
        if name.lower() in _KEYWORDS or _DURATION.match(name):
            continue
        names.add(name)
    return names


def sel(*matchers: str) -> str:
    """``{a, b}`` from non-empty matchers."""
    return "{" + ", ".join(m for m in matchers if m) + "}"


def grafana_to_promql(expr: str, rate_interval: str = "5m") -> str:
    """Replace Grafana's variables so Prometheus can parse the query."""
    out = expr.replace("$__rate_interval", rate_interval).replace("$__interval", "1m")
    out = out.replace("$__range", "1h")
    return re.sub(r"\$\{?(\w+)\}?", ".*", out)
