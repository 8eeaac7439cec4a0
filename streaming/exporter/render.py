"""Fast text exposition (format 0.0.4) of a store snapshot, for the /metrics endpoint.

``ConnmonCollector`` is the reference: a client_python custom collector that yields fresh
families per scrape. Formatting its ~10k samples through ``generate_latest`` costs ~4x the time
of this renderer, which joins pre-escaped label strings cached per series. A unit test checks
both produce the same samples.
"""

from __future__ import annotations

import math

from streaming.exporter.collector import SIMPLE_AGGREGATES, self_metric_samples
from streaming.exporter.store import Snapshot
from streaming.metricnames import metric
from streaming.metricnames.connmon import JOB_METRICS, SERIES_LABELS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def label_text(names: tuple[str, ...], values: tuple[str, ...] | list[str]) -> str:
    return ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))


def _header(name: str) -> str:
    m = metric(name)
    help_ = m.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_}\n# TYPE {name} {m.type}\n"


class Renderer:
    """Keeps the escaped label string of each live series between scrapes."""

    def __init__(self) -> None:
        self._labels: dict[tuple, str] = {}

    def _series(self, key: tuple) -> str:
        text = self._labels.get(key)
        if text is None:
            text = label_text(SERIES_LABELS, key)
            self._labels[key] = text
        return text

    def render(self, snap: Snapshot) -> str:
        out: list[str] = []
        add = out.append
        aggs = [(self._series(a.labels), a) for a in snap.aggregates]

        add(_header("connmon_sockets"))
        for lt, a in aggs:
            for state, count in a.sockets.items():
                add(f'connmon_sockets{{{lt},state="{_escape(state)}"}} {_value(count)}\n')
        closes = "connmon_connection_closes_per_second"
        add(_header(closes))
        for lt, a in aggs:
            for by, rate in a.closes.items():
                add(f'{closes}{{{lt},closed_by="{by}"}} {_value(rate)}\n')
        for name in SIMPLE_AGGREGATES:
            add(_header(name))
            prefix = name + "{"
            for lt, a in aggs:
                add(f"{prefix}{lt}}} {_value(a.gauges[name])}\n")

        add(_header("connmon_finding_active"))
        for f in snap.findings:
            kind = f'kind="{_escape(f.kind)}",severity="{f.severity}",'
            add(f"connmon_finding_active{{{kind}{self._series(f.labels)}}} 1.0\n")

        for m in JOB_METRICS:
            add(_header(m.name))
            for s in snap.statuses:
                if m.name in s.values:
                    lt = label_text(m.labels, (s.job_id, s.query))
                    add(f"{m.name}{{{lt}}} {_value(s.values[m.name])}\n")

        for name, samples in self_metric_samples(snap):
            add(_header(name))
            names = metric(name).labels
            for values, v in samples:
                lt = "{" + label_text(names, values) + "}" if names else ""
                add(f"{name}{lt} {_value(v)}\n")

        live = len(snap.aggregates) + len(snap.findings)
        if len(self._labels) > 2 * live + 1000:
            self._labels = {}  # drop labels of expired series; rebuilt on the next scrape
        return "".join(out)
