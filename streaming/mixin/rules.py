"""Recording rules (``level:metric:operation``): the fleet roll-ups.

A fleet has up to hundreds of thousands of client x broker series. The fleet dashboard and the
fleet-level alert read only these roll-ups (per cluster, side, app, broker, client library), so
Prometheus touches the per-series data once per evaluation, not once per panel and viewer. The
per-series metrics stay for the drill-down dashboards, filtered to one host, app or broker.
Every roll-up here is read by the fleet dashboard or an alert (a unit test checks).

A roll-up sums what is there: a series without a sample (absent means none) adds nothing, and a
group with none at all has no roll-up sample (queries that must show 0 add ``or vector(0)``).
"""

from __future__ import annotations

from typing import Any

from streaming.metricnames.connmon import SERIES_LABELS
from streaming.mixin.config import MixinConfig

# The identity of one client x broker series on the exporter that serves it: what joins the
# library info series onto the other metrics of the same series.
SERIES_ON = ", ".join(("instance", *SERIES_LABELS))
GROUP = "connmon.rules"

BY_APP: tuple[str, ...] = ("cluster", "side", "app")
BY_BROKER: tuple[str, ...] = ("cluster", "side", "broker_id")


def _level(labels: tuple[str, ...]) -> str:
    return "_".join("broker" if label == "broker_id" else label for label in labels)


def record_name(labels: tuple[str, ...], metric: str, op: str = "sum") -> str:
    return f"{_level(labels)}:{metric}:{op}"


# (level labels, metric) of every ``<level>:<metric>:sum`` roll-up, in file order.
_SUMS: list[tuple[tuple[str, ...], str]] = []


def _sum(labels: tuple[str, ...], metric: str) -> str:
    _SUMS.append((labels, metric))
    return record_name(labels, metric)


# Sockets by TCP state: per app, per broker and fleet-wide (CLOSE_WAIT by app and by broker
# are their state="CLOSE_WAIT" samples). They also list the fleet dashboard's clusters, apps
# and brokers. Fleet-wide is summed from the per-app roll-up, not from the series again.
SOCKETS_BY_APP = _sum((*BY_APP, "state"), "connmon_sockets")
SOCKETS_BY_STATE = record_name(("cluster", "side", "state"), "connmon_sockets")
SOCKETS_BY_BROKER = _sum((*BY_BROKER, "state"), "connmon_sockets")
# Connection events per second, per app and per broker.
OPENS_BY_APP = _sum(BY_APP, "connmon_connection_opens_per_second")
OPENS_BY_BROKER = _sum(BY_BROKER, "connmon_connection_opens_per_second")
IDLE_CLOSES_BY_APP = _sum(BY_APP, "connmon_idle_closes_per_second")
IDLE_CLOSES_BY_BROKER = _sum(BY_BROKER, "connmon_idle_closes_per_second")
IDLE_RECONNECTS_BY_APP = _sum(BY_APP, "connmon_idle_reconnects_per_second")
IDLE_RECONNECTS_BY_BROKER = _sum(BY_BROKER, "connmon_idle_reconnects_per_second")
DROPS_BY_APP = _sum(BY_APP, "connmon_broker_dropped_connections_per_second")
DROPS_BY_BROKER = _sum(BY_BROKER, "connmon_broker_dropped_connections_per_second")
FAILED_CONNECTS_BY_APP = _sum(BY_APP, "connmon_connect_failures_per_second")
FAILED_CONNECTS_BY_BROKER = _sum(BY_BROKER, "connmon_connect_failures_per_second")
# Findings firing now.
FINDINGS = _sum(("cluster", "app", "kind", "severity"), "connmon_finding_active")
# Client x broker series per library and version (client side), and their sockets by state:
# the library is a label of the info series only, joined onto the sockets.
LIBRARIES = record_name(
    ("cluster", "client_library", "client_version"), "connmon_client_library_info", "count"
)
SOCKETS_BY_LIBRARY = record_name(("cluster", "client_library", "state"), "connmon_sockets")
# Client hosts that see a broker drop busy connections, refuse connects or leave them
# unanswered, per broker: what the broker alert counts. Recorded in the alert's own group
# (alerts.py), so the alert reads this evaluation's value.
FAILING_HOSTS = record_name(
    ("cluster", "broker_id"), "connmon_broker_failing_client_hosts", "count"
)
# A process's file descriptor usage: the max over its series (one per broker on the client
# side, per client address on the broker side), what the fd exhaustion alert extrapolates.
# Recorded in the alert's own group (alerts.py): a series per process, not per client x broker
# pair, is what its range functions read.
PROCESS_FD_USAGE = record_name(
    ("cluster", "side", "host", "app"), "connmon_process_fd_usage_ratio", "max"
)
# Roll-ups of more than one metric, named for what they count.
DERIVED_METRICS = frozenset({"connmon_broker_failing_client_hosts"})


def failing_hosts_expr(ex: str) -> str:
    """Per cluster and broker, the client hosts that see it fail in any of three ways; a host
    with several apps or ways counts once."""
    seen = (
        f'connmon_broker_dropped_connections_per_second{{side="client", {ex}}} > 0 or '
        f'connmon_connect_failures_per_second{{side="client", {ex}}} > 0 or '
        f'connmon_sockets{{side="client", state="SYN_SENT", {ex}}} > 0'
    )
    return f"count by (cluster, broker_id) (max by (cluster, broker_id, host) ({seen}))"


def recording_rules(cfg: MixinConfig) -> dict[str, Any]:
    ex = cfg.exporter_selector
    rules = [
        {
            "record": record_name(labels, metric),
            "expr": f"sum by ({', '.join(labels)}) ({metric}{{{ex}}})",
        }
        for labels, metric in _SUMS
    ]
    rules += [
        {
            # Rules of a group run in order: the per-app roll-up above is this evaluation's.
            "record": SOCKETS_BY_STATE,
            "expr": f"sum by (cluster, side, state) ({SOCKETS_BY_APP})",
        },
        {
            "record": LIBRARIES,
            "expr": "count by (cluster, client_library, client_version) "
            f"(connmon_client_library_info{{{ex}}})",
        },
        {
            "record": SOCKETS_BY_LIBRARY,
            "expr": "sum by (cluster, client_library, state) ("
            f'connmon_sockets{{side="client", {ex}}} '
            f"* on ({SERIES_ON}) group_left (client_library) "
            f"connmon_client_library_info{{{ex}}})",
        },
    ]
    group: dict[str, Any] = {"name": GROUP}
    if cfg.rollup_interval:
        group["interval"] = cfg.rollup_interval
    return {"groups": [{**group, "rules": rules}]}
