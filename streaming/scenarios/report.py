"""The run report: one self-contained HTML file with inline SVG charts of the key series (read
from Prometheus' query_range API), the findings seen, the alerts that fired, and the observer's
connection tables. No plotting library: ``line_chart`` draws the SVG itself.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _client_by_app(op: str, metric: str, matcher: str = "") -> str:
    """``op by (app)`` of a client-side metric, 0 for an app whose series have no such sample:
    counts, rates and ages are absent when there is none (docs/metrics.md), so its line drops
    to 0 instead of ending, or of being drawn straight across the gap."""
    selector = ", ".join(m for m in ('side="client"', matcher) if m)
    return (
        f"{op} by (app) ({metric}{{{selector}}}) "
        'or 0 * group by (app) (connmon_sockets{side="client"})'
    )


# (title, PromQL, unit) of the charts, one line per label set of the result.
CHARTS: tuple[tuple[str, str, str], ...] = (
    (
        "Active findings by kind",
        "sum by (kind) (connmon_finding_active)",
        "findings",
    ),
    (
        "CLOSE_WAIT sockets by client",
        _client_by_app("sum", "connmon_sockets", 'state="CLOSE_WAIT"'),
        "sockets",
    ),
    (
        "Oldest CLOSE_WAIT by client",
        _client_by_app("max", "connmon_close_wait_oldest_age_seconds"),
        "seconds",
    ),
    (
        "TIME_WAIT sockets by client",
        _client_by_app("sum", "connmon_sockets", 'state="TIME_WAIT"'),
        "sockets",
    ),
    (
        "Connection opens per second by client",
        _client_by_app("sum", "connmon_connection_opens_per_second"),
        "per second",
    ),
    (
        "Idle closes per second by client",
        _client_by_app("sum", "connmon_idle_closes_per_second"),
        "per second",
    ),
    (
        "Largest idle time by client",
        _client_by_app("max", "connmon_max_idle_seconds"),
        "seconds",
    ),
    (
        "Processes with duplicate connections by client",
        _client_by_app("sum", "connmon_duplicate_connections"),
        "processes",
    ),
    ("Alerts firing", 'count by (alertname) (ALERTS{alertstate="firing"})', "alerts"),
)
PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
)  # fmt: skip

Series = Mapping[str, Sequence[tuple[float, float]]]


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def line_chart(
    title: str, series: Series, unit: str = "", width: int = 560, height: int = 220
) -> str:
    """An SVG line chart; x is time (seconds since the first point), one polyline per series."""
    esc = html.escape
    left, right, top, bottom = 48, 12, 28, 28
    pw, ph = width - left - right, height - top - bottom
    points = [p for s in series.values() for p in s]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>',
    ]
    if not points:
        parts.append(
            f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" '
            f'fill="#888" font-size="12">no data</text></svg>'
        )
        return "".join(parts)
    t0 = min(t for t, _ in points)
    t1 = max(max(t for t, _ in points), t0 + 1)
    ymax = _nice_max(max(v for _, v in points))
    for i in range(5):
        y = top + ph - ph * i / 4
        parts.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
            f"{ymax * i / 4:g}</text>"
        )
    for i in range(5):
        x = left + pw * i / 4
        parts.append(
            f'<text x="{x:.1f}" y="{top + ph + 14}" font-size="10" text-anchor="middle">'
            f"{(t1 - t0) * i / 4:.0f}s</text>"
        )
    parts.append(
        f'<text x="{width - right}" y="16" font-size="10" text-anchor="end" fill="#666">'
        f"{esc(unit)}</text>"
    )
    for n, (name, pts) in enumerate(sorted(series.items())):
        color = PALETTE[n % len(PALETTE)]
        xy = " ".join(
            f"{left + pw * (t - t0) / (t1 - t0):.1f},{top + ph - ph * min(v, ymax) / ymax:.1f}"
            for t, v in pts
        )
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{xy}">'
            f"<title>{esc(name)}</title></polyline>"
        )
    parts.append("</svg>")
    legend = " ".join(
        f'<span style="color:{PALETTE[n % len(PALETTE)]}">&#9632; {esc(name)}</span>'
        for n, name in enumerate(sorted(series))
    )
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def to_series(result: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """A query_range ``result`` -> {label values joined: [(t, v)]} (NaN points dropped)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in result:
        name = (
            ",".join(f"{v}" for k, v in sorted(r["metric"].items()) if k != "__name__") or "value"
        )
        pts = [(float(t), float(v)) for t, v in r["values"] if not math.isnan(float(v))]
        out[name] = pts
    return out


def render_html(
    title: str,
    meta: Mapping[str, str],
    charts: Sequence[str],
    findings: Sequence[Mapping[str, Any]],
    observed: str,
    notifications: Sequence[Mapping[str, Any]] = (),
    per_key: Sequence[tuple[str, int, float]] = (),
) -> str:
    """The report page (pure). ``notifications``: what Alertmanager delivered (its webhook
    JSON), what a person on call would have received; ``per_key``: ``records_per_key``."""
    esc = html.escape
    written = "".join(
        f"<tr><td>{esc(key)}</td><td>{n}</td><td>{rate:.0f}</td></tr>" for key, n, rate in per_key
    )
    sent = "".join(
        "<tr>"
        + "".join(
            f"<td>{esc(str(v))}</td>"
            for v in (
                n.get("status"),
                n.get("receiver"),
                ", ".join(f"{k}={v}" for k, v in sorted((n.get("groupLabels") or {}).items())),
                len(n.get("alerts") or []),
                ((n.get("alerts") or [{}])[0].get("annotations") or {}).get("description", ""),
            )
        )
        + "</tr>"
        for n in notifications
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{esc(str(f.get(k, '')))}</td>"
            for k in ("first_seen", "kind", "severity", "app", "side", "broker_id", "summary")
        )
        + "</tr>"
        for f in findings
    )
    meta_rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in meta.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
.chart {{ border: 1px solid #ddd; padding: 8px; }}
.legend {{ font-size: 11px; max-width: 560px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }}
pre {{ background: #f6f6f6; padding: 8px; font-size: 12px; overflow-x: auto; }}
</style></head><body>
<h1>{esc(title)}</h1>
<table>{meta_rows}</table>
<h2>Key series</h2>
<div class="charts">{"".join(f'<div class="chart">{c}</div>' for c in charts)}</div>
<h2>Findings that fired ({len(findings)})</h2>
<table><tr><th>first seen</th><th>kind</th><th>severity</th><th>app</th><th>side</th>
<th>broker</th><th>summary</th></tr>{rows}</table>
<h2>Finding records written per key ({sum(n for _, n, _ in per_key)})</h2>
<table><tr><th>key</th><th>records</th><th>per hour</th></tr>{written}</table>
<h2>Notifications delivered by Alertmanager ({len(notifications)})</h2>
<table><tr><th>status</th><th>receiver</th><th>group</th><th>alerts</th>
<th>description (first alert)</th></tr>{sent}</table>
<h2>What the clients did (independent observer, ss every second)</h2>
<pre>{esc(observed)}</pre>
</body></html>
"""


def time_to_first(
    first_firing: Mapping[tuple[str, str, str], float], started_at: float
) -> dict[str, tuple[float, str]]:
    """Per kind: seconds from the clients' start to its first firing finding, and for whom."""
    out: dict[str, tuple[float, str]] = {}
    for (kind, app, _side), seen in first_firing.items():
        dt = seen - started_at
        if kind not in out or dt < out[kind][0]:
            out[kind] = (dt, app)
    return dict(sorted(out.items()))


def first_findings(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first firing message per (kind, app, side, broker), oldest first."""
    seen: dict[tuple, dict[str, Any]] = {}
    for f in history:
        if f.get("status") != "firing":
            continue
        k = (f.get("kind"), f.get("app"), f.get("side"), f.get("broker_id"))
        if k not in seen:
            seen[k] = {**f, "first_seen": f.get("updated_at") or f.get("window_end", "")}
    return list(seen.values())


def records_per_key(
    history: Sequence[Mapping[str, Any]], elapsed_s: float
) -> list[tuple[str, int, float]]:
    """Finding records written per key over the run: (key, records, records per hour), the
    chattiest first. What a consumer of the findings topic (a ticket bridge, a chat bot) gets."""
    counts: dict[str, int] = {}
    for f in history:
        key = str(f.get("key") or f.get("kind"))
        counts[key] = counts.get(key, 0) + 1
    hours = max(elapsed_s, 1.0) / 3600
    return sorted(((k, n, n / hours) for k, n in counts.items()), key=lambda r: (-r[1], r[0]))


def write_report(session: Any, path: Path, step_s: float = 5.0) -> Path:
    """Query Prometheus over the session and write the HTML report to ``path``."""
    end = time.time()
    start = end - max(session.elapsed(), 60.0) - 30
    prom = session.components.prometheus if session.components else None
    charts = []
    for title, expr, unit in CHARTS:
        series: dict[str, list[tuple[float, float]]] = {}
        if prom is not None:
            try:
                data = prom.api("query_range", query=expr, start=start, end=end, step=step_s)
                series = to_series(data["result"])
            except Exception as exc:  # a missing metric must not lose the rest of the report
                title = f"{title} (query failed: {exc})"
        charts.append(line_chart(title, series, unit))
    history = session.findings.board.history if session.findings else []
    firsts = session.findings.board.first_firing if session.findings else {}
    meta = {
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "duration": f"{session.elapsed():.0f}s",
        "scenarios": ", ".join(s.name for s in session.scenarios),
        "clusters": "; ".join(f"{n}: {c.bootstrap_servers}" for n, c in session.clusters.items()),
        "actions": "; ".join(session.actions_done) or "none",
        "run dir": str(session.run_dir),
    }
    for kind, (dt, app) in time_to_first(firsts, session.started_at or end).items():
        meta[f"first {kind}"] = f"{dt:.0f}s after the clients started ({app})"
    hook = session.components.webhook if session.components else None
    page = render_html(
        "connmon run report",
        meta,
        charts,
        first_findings(history),
        session.observer_report(),
        hook.notifications() if hook is not None else (),
        records_per_key(history, session.elapsed()),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path
