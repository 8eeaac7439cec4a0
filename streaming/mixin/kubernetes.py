"""Kubernetes objects for the Prometheus Operator, from the same rules and config."""

from __future__ import annotations

from typing import Any

from streaming.mixin.config import MixinConfig


def prometheus_rule(cfg: MixinConfig, alerts: dict, rules: dict) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "connmon",
            "namespace": cfg.kubernetes_namespace,
            "labels": dict(cfg.kubernetes_labels),
        },
        "spec": {"groups": alerts["groups"] + rules["groups"]},
    }


def service_monitors(cfg: MixinConfig) -> list[dict[str, Any]]:
    """One ServiceMonitor per scrape job; the job label matches the rules' selectors."""
    out = []
    for component, port in (("exporter", "metrics"), ("agent", "metrics")):
        out.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": {
                    "name": f"connmon-{component}",
                    "namespace": cfg.kubernetes_namespace,
                    "labels": dict(cfg.kubernetes_labels),
                },
                "spec": {
                    "jobLabel": "app.kubernetes.io/name",
                    "selector": {"matchLabels": {"app.kubernetes.io/name": f"connmon-{component}"}},
                    "endpoints": [{"port": port, "interval": "30s", "path": "/metrics"}],
                },
            }
        )
    return out
