"""The metric catalog: every metric connmon exports, with its help text and labels.

The exporter, the agent's self-metrics, the dashboards and the alert rules import names from
here; a test fails when a query names a metric that is not listed.
"""

from __future__ import annotations

from streaming.metricnames.agent import AGENT_METRICS
from streaming.metricnames.base import FORBIDDEN_LABELS, Metric
from streaming.metricnames.connmon import CONNMON_METRICS

# Series every Prometheus has without connmon listing them.
PROMETHEUS_BUILTINS: frozenset[str] = frozenset(
    {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped"}
)


# The Prometheus job label of each component that serves /metrics. The rules and dashboards
# select on them, the local stack and the example prometheus.yml name their scrape jobs so, and
# on Kubernetes the ServiceMonitors take them from each Service's app.kubernetes.io/name.
AGENT_JOB = "connmon-agent"
EXPORTER_JOB = "connmon-exporter"

ALL_METRICS: tuple[Metric, ...] = CONNMON_METRICS + AGENT_METRICS
BY_NAME: dict[str, Metric] = {m.name: m for m in ALL_METRICS}


def series_names(metrics: tuple[Metric, ...] = ALL_METRICS) -> frozenset[str]:
    """Every sample name the catalog's families expose, incl. ``_bucket``/``_sum``/``_count``."""
    return frozenset(n for m in metrics for n in m.series_names())


def metric(name: str) -> Metric:
    """The catalog entry for ``name``; a KeyError names the unknown metric."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in streaming.metricnames") from None


__all__ = [
    "AGENT_JOB",
    "AGENT_METRICS",
    "ALL_METRICS",
    "BY_NAME",
    "EXPORTER_JOB",
    "FORBIDDEN_LABELS",
    "PROMETHEUS_BUILTINS",
    "Metric",
    "metric",
    "series_names",
]
