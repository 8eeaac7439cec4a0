"""The mixin's one config object: selectors, thresholds, ``for`` durations, dashboard settings
and where the runbook is. Detector thresholds come from ``streaming.detectors.config`` so a
threshold lives in one place; the alert texts and dashboard threshold lines quote them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from streaming.detectors.config import DEFAULT as DETECTORS
from streaming.detectors.config import DetectorConfig


@dataclass(frozen=True)
class MixinConfig:
    """Everything the generated rules and dashboards depend on."""

    detectors: DetectorConfig = DETECTORS

    # Selectors (PromQL label matchers without braces) for the scrape jobs.
    exporter_selector: str = 'job="connmon-exporter"'
    agent_selector: str = 'job="connmon-agent"'

    # `for` durations: how long a condition holds before the alert fires.
    finding_for: str = "2m"  # findings are already debounced by the job's windows
    agent_down_for: str = "5m"
    job_stalled_for: str = "2m"
    job_lagging_for: str = "10m"
    data_stale_for: str = "5m"
    dead_letter_for: str = "10m"
    cardinality_for: str = "5m"

    # Pipeline-health thresholds (seconds unless the name says otherwise).
    agent_heartbeat_stale_s: float = 300.0
    job_stalled_s: float = 300.0
    data_stale_s: float = 600.0
    dead_letter_per_s: float = 0.1
    cardinality_ratio: float = 0.9
    rate_window: str = "5m"

    # Dashboards.
    dashboard_refresh: str = "1m"
    dashboard_time_from: str = "now-6h"
    dashboard_uid_prefix: str = "connmon-"
    dashboard_tags: tuple[str, ...] = ("connmon", "kafka")

    # Where the runbook (docs/runbook.md, one section per alert) is found. Every alert's
    # runbook_url annotation is this plus "#<alert name lower-cased>". The default is the
    # runbook's path in this repository; set it to the URL where you publish docs/runbook.md
    # (e.g. "https://git.example.com/ops/connmon/blob/main/docs/runbook.md") to get links
    # that open from Alertmanager and Grafana.
    runbook_url_base: str = "docs/runbook.md"

    # Deploy objects.
    kubernetes_namespace: str = "monitoring"
    kubernetes_labels: dict[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/part-of": "connmon"}
    )

    @property
    def job_lag_s(self) -> float:
        """Watermark delay beyond the job's own allowance (watermark + 5 windows) is lag."""
        return self.detectors.watermark_s + 5 * self.detectors.window_s

    def runbook_url(self, alert: str) -> str:
        """The alert's section of the runbook (GitHub-style anchor: the name lower-cased)."""
        return f"{self.runbook_url_base}#{alert.lower()}"

    def replace(self, **changes: Any) -> MixinConfig:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown mixin setting(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


DEFAULT = MixinConfig()
