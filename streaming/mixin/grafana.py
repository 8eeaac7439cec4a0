"""A thin layer over grafanalib 0.7.1 (as its own ``weave.py`` does): panel factories with a
description, a unit and ``${datasource}`` everywhere, template variables, a grid layout, and
``modernize()`` which turns grafanalib's schema-12 JSON into what current Grafana expects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attr
from grafanalib import core as g

from streaming.mixin import rules
from streaming.mixin.config import MixinConfig

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
FULL_WIDTH = 24

# Keys grafanalib writes that current Grafana ignores or rejects.
_DASHBOARD_LEGACY = ("rows", "hideControls", "sharedCrosshair", "style", "__inputs", "gnetId")
_PANEL_LEGACY = (
    "error", "height", "span", "minSpan", "editable", "cacheTimeout", "hideTimeOverride",
    "repeatDirection", "maxPerRow", "repeat", "thresholdType",
)  # fmt: skip
_TARGET_LEGACY = ("query", "target", "metric", "step", "intervalFactor", "interval", "hide")
_TEMPLATE_LEGACY = ("useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min", "auto_count")


def target(expr: str, legend: str = "", instant: bool = False, ref: str = "A") -> g.Target:
    return g.Target(
        expr=expr,
        legendFormat=legend,
        refId=ref,
        instant=instant,
        format="table" if instant else "time_series",
    )


def _targets(queries: Sequence[tuple[str, str]], instant: bool = False) -> list[g.Target]:
    return [
        target(expr, legend, instant, ref=chr(ord("A") + i))
        for i, (expr, legend) in enumerate(queries)
    ]


def _steps(thresholds: Sequence[tuple[float, str]], base: str = "green") -> list[dict[str, Any]]:
    """Grafana threshold steps: ``base`` below the first value, then each (value, color)."""
    steps: list[dict[str, Any]] = [{"color": base, "value": None}]
    steps += [{"color": color, "value": value} for value, color in thresholds]
    return steps


def timeseries(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    unit: str,
    thresholds: Sequence[tuple[float, str]] = (),
    width: int = 12,
    stack: bool = False,
    below: str = "green",
) -> g.TimeSeries:
    """A time series panel; ``thresholds`` (ascending) are drawn as lines, ``below`` is the
    color under the first one."""
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries),
        unit=unit,
        thresholds=_steps(thresholds, below),
        thresholdsStyleMode="line" if thresholds else "off",
        legendDisplayMode="table",
        legendPlacement="right" if width == FULL_WIDTH else "bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        stacking={"mode": "normal" if stack else "none", "group": "A"},
        fillOpacity=10,
        gridPos=g.GridPos(h=8, w=width, x=0, y=0),
    )


def stat(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    unit: str,
    thresholds: Sequence[tuple[float, str]] = (),
    width: int = 6,
) -> g.Stat:
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries),
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="none",
        colorMode="background" if thresholds else "value",
        noValue="0",
        thresholds=_steps(thresholds),
        gridPos=g.GridPos(h=4, w=width, x=0, y=0),
    )


def table(
    title: str, description: str, expr: str, unit: str = "short", width: int = FULL_WIDTH
) -> g.Table:
    return g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[target(expr, instant=True)],
        unit=unit,
        transformations=[
            {
                "id": "organize",
                "options": {"excludeByName": {"Time": True, "__name__": True, "job": True}},
            }
        ],
        gridPos=g.GridPos(h=8, w=width, x=0, y=0),
    )


def row(title: str) -> g.RowPanel:
    return g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=FULL_WIDTH, x=0, y=0))


def layout(panels: Iterable[g.Panel]) -> list[g.Panel]:
    """Place panels left to right, wrapping at 24 columns; a row header starts a new line."""
    out: list[g.Panel] = []
    x = y = line_h = 0
    for i, p in enumerate(panels, start=1):
        w, h = p.gridPos.w, p.gridPos.h
        if isinstance(p, g.RowPanel) or x + w > FULL_WIDTH:
            x, y, line_h = 0, y + line_h, 0
        out.append(attr.evolve(p, id=i, gridPos=g.GridPos(h=h, w=w, x=x, y=y)))
        x += w
        line_h = max(line_h, h)
        if isinstance(p, g.RowPanel):
            x, y, line_h = 0, y + h, 0
    return out


def _var(name: str, label: str, query: str) -> g.Template:
    return g.Template(
        name=name,
        label=label,
        dataSource=DATASOURCE,
        query=query,
        includeAll=True,
        multi=True,
        allValue=".*",
        default="$__all",
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=g.SORT_ALPHA_ASC,
    )


# The fleet overview's uid (after the configured prefix): it reads recording rules only.
FLEET_UID = "fleet"


def datasource_variable() -> g.Template:
    return g.Template(
        name="datasource",
        label="Data source",
        query="prometheus",
        type="datasource",
        default="default",
    )


def fleet_variables() -> list[g.Template]:
    """cluster, app, broker from the fleet roll-ups: no per-series query, even for a list."""
    return [
        _var("cluster", "Cluster", f"label_values({rules.SOCKETS_BY_STATE}, cluster)"),
        _var("app", "App", f'label_values({rules.SOCKETS_BY_APP}{{cluster=~"$cluster"}}, app)'),
        _var(
            "broker",
            "Broker",
            f'label_values({rules.SOCKETS_BY_BROKER}{{cluster=~"$cluster"}}, broker_id)',
        ),
    ]


def variables(cfg: MixinConfig, side: str | None = None) -> list[g.Template]:
    """datasource, cluster, host, app, broker: chained, multi-select, refreshed on time range
    change. Broker ids repeat across Kafka clusters, so the cluster comes first."""
    side_m = f'side="{side}"' if side else ""
    base = f"connmon_sockets{{{cfg.exporter_selector}{', ' + side_m if side_m else ''}"
    ds = datasource_variable()

    def query_var(name: str, label: str, label_name: str, extra: str) -> g.Template:
        return _var(name, label, f"label_values({base}{extra}}}, {label_name})")

    return [
        ds,
        query_var("cluster", "Cluster", "cluster", ""),
        query_var("host", "Host", "host", ', cluster=~"$cluster"'),
        query_var("app", "App", "app", ', cluster=~"$cluster", host=~"$host"'),
        query_var(
            "broker", "Broker", "broker_id", ', cluster=~"$cluster", host=~"$host", app=~"$app"'
        ),
    ]


def dashboard(
    cfg: MixinConfig, uid: str, title: str, description: str, panels: Iterable[g.Panel],
    side: str | None = None,
) -> g.Dashboard:  # fmt: skip
    """The fleet dashboard (``uid`` FLEET_UID) takes its variables from the roll-ups only."""
    if uid == FLEET_UID:
        templates = [datasource_variable(), *fleet_variables()]
    else:
        templates = variables(cfg, side)
    return g.Dashboard(
        title=title,
        uid=cfg.dashboard_uid_prefix + uid,
        description=description,
        tags=list(cfg.dashboard_tags),
        editable=False,
        refresh=cfg.dashboard_refresh,
        time=g.Time(cfg.dashboard_time_from, "now"),
        timezone="utc",
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        templating=g.Templating(list=templates),
        panels=layout(panels),
    )


# ---- JSON post-processing ---------------------------------------------------------------------
def _drop_none(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_none(v) for v in obj]
    return obj


def _panel(p: dict[str, Any]) -> dict[str, Any]:
    for key in _PANEL_LEGACY:
        p.pop(key, None)
    if p.get("type") != "row":
        p["datasource"] = dict(DATASOURCE)
    if not p.get("links"):
        p.pop("links", None)
    defaults = p.get("fieldConfig", {}).get("defaults", {})
    if p.get("type") == "table":
        # grafanalib writes the old table panel's top-level keys; modern tables use fieldConfig.
        defaults["unit"] = p.pop("unit", "short")
        defaults["mappings"] = p.pop("mappings", [])
        for key in ("columns", "fontSize", "color"):
            p.pop(key, None)
    for t in p.get("targets", []):
        for key in _TARGET_LEGACY:
            t.pop(key, None)
        t["datasource"] = dict(DATASOURCE)
        t["editorMode"] = "code"
        t["range"] = not t.get("instant", False)
    if p.get("type") == "row":
        p.pop("targets", None)
        p.pop("fieldConfig", None)
        p.setdefault("collapsed", False)
        p["panels"] = [_panel(c) for c in p.get("panels", [])]
    return p


def _template(t: dict[str, Any]) -> dict[str, Any]:
    for key in _TEMPLATE_LEGACY:
        t.pop(key, None)
    if t["type"] == "datasource":
        t["current"] = {}
        t["regex"] = ""
        t.pop("datasource", None)
    else:
        t["datasource"] = dict(DATASOURCE)
        t["definition"] = t["query"]
        t["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
        t.pop("options", None)
        t["options"] = []
    return t


def modernize(data: dict[str, Any]) -> dict[str, Any]:
    """grafanalib's JSON -> current Grafana: schema 39, ``{type, uid}`` datasource refs,
    legacy keys dropped, nulls removed."""
    d = _drop_none(data)
    for key in _DASHBOARD_LEGACY:
        d.pop(key, None)
    d["schemaVersion"] = SCHEMA_VERSION
    d["id"] = None
    d["panels"] = [_panel(p) for p in d.get("panels", [])]
    d["templating"]["list"] = [_template(t) for t in d["templating"]["list"]]
    d.get("timepicker", {}).pop("time_options", None)
    d["annotations"] = {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            }
        ]
    }
    return d


def to_json(dash: g.Dashboard) -> dict[str, Any]:
    """A dashboard object as modern Grafana JSON (a plain dict)."""
    import json

    from grafanalib._gen import DashboardEncoder

    return modernize(json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder)))
