"""Recording rules (``level:metric:operation``) the dashboards use."""

from __future__ import annotations

from typing import Any

from streaming.mixin.config import MixinConfig

# (level labels, metric); each becomes ``<level>:<metric>:sum``.
_SUMS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("cluster", "side", "state"), "connmon_sockets"),
    (("cluster", "side", "broker_id"), "connmon_close_wait_sockets"),
    (("cluster", "side", "app"), "connmon_close_wait_sockets"),
    (("cluster", "side", "app"), "connmon_connection_opens_per_second"),
    (("cluster", "side", "app"), "connmon_idle_closes_per_second"),
    (("kind", "severity"), "connmon_finding_active"),
)


def _level(labels: tuple[str, ...]) -> str:
    return "_".join("broker" if label == "broker_id" else label for label in labels)


def record_name(labels: tuple[str, ...], metric: str) -> str:
    return f"{_level(labels)}:{metric}:sum"


def recording_rules(cfg: MixinConfig) -> dict[str, Any]:
    rules = [
        {
            "record": record_name(labels, metric),
            "expr": f"sum by ({', '.join(labels)}) ({metric}{{{cfg.exporter_selector}}})",
        }
        for labels, metric in _SUMS
    ]
    return {"groups": [{"name": "connmon.rules", "rules": rules}]}
