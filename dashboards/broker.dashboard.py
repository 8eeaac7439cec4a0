"""Broker drill-down: the broker-side view of client connections, per client address."""

from streaming.mixin import grafana as gf
from streaming.mixin.config import DEFAULT as cfg

d = cfg.detectors
F = (
    f'{cfg.exporter_selector}, side="broker", cluster=~"$cluster", host=~"$host", '
    'broker_id=~"$broker"'
)
PEER = "{{peer_host}} -> {{cluster}}/{{broker_id}}"

panels = [
    gf.timeseries(
        "Client connections by state",
        "Sockets on the broker hosts by TCP state.",
        [
            (
                f"sum by (cluster, broker_id, state) (connmon_sockets{{{F}}})",
                "{{cluster}}/{{broker_id}} {{state}}",
            )
        ],
        "short",
        width=24,
        stack=True,
    ),
    gf.timeseries(
        "Top client addresses by ESTABLISHED sockets",
        "The 20 client addresses with the most ESTABLISHED connections to the brokers.",
        [
            (
                f"topk(20, sum by (peer_host, cluster, broker_id) (connmon_sockets{{{F}, "
                f'state="ESTABLISHED"}}))',
                PEER,
            )
        ],
        "short",
    ),
    gf.timeseries(
        "Broker-side CLOSE_WAIT",
        "CLOSE_WAIT on the broker: clients that went away while the broker still holds the "
        "socket (seen during heavy group churn).",
        [(f'topk(20, connmon_sockets{{{F}, state="CLOSE_WAIT"}})', PEER)],
        "short",
        thresholds=[(d.close_wait_warning_count, "orange"), (d.close_wait_critical_count, "red")],
    ),
    gf.timeseries(
        "Broker-side TIME_WAIT",
        "TIME_WAIT on the broker: the broker closed first (its connections.max.idle.ms fired).",
        [(f'topk(20, connmon_sockets{{{F}, state="TIME_WAIT"}})', PEER)],
        "short",
        thresholds=[(d.time_wait_warning_count, "orange"), (d.time_wait_critical_count, "red")],
    ),
    gf.timeseries(
        "Connection opens by client address",
        "New connections per second per client address; the line is the storm threshold.",
        [(f"topk(20, connmon_connection_opens_per_second{{{F}}})", PEER)],
        "cps",
        thresholds=[(d.storm_opens_per_min / 60, "red")],
    ),
    gf.timeseries(
        "Idle closes by client address",
        "Connections closed after idling, per second, per client address.",
        [(f"topk(20, connmon_idle_closes_per_second{{{F}}})", PEER)],
        "cps",
    ),
    gf.timeseries(
        "Max idle time by client address",
        "Longest idle connection per client address; the line is the zombie idle limit.",
        [(f"topk(20, connmon_max_idle_seconds{{{F}}})", PEER)],
        "s",
        thresholds=[(d.zombie_idle_s, "red")],
    ),
    gf.timeseries(
        "Broker file descriptors in use",
        "Open file descriptors of each broker process as a share of its soft limit on open "
        "files (RLIMIT_NOFILE). At the line (100%) the broker accepts no connection and opens "
        "no log segment. ConnMonFdExhaustionPredicted fires when the trend of the last "
        f"{cfg.fd_exhaustion_range} reaches it within {cfg.fd_exhaustion_horizon_s / 60:g} "
        "minutes. No line: the agent could not read the process's descriptors, or its limit is "
        "unlimited.",
        [
            (
                f"max by (cluster, host, app) (connmon_process_fd_usage_ratio{{{F}}})",
                "{{app}} @ {{host}} ({{cluster}})",
            )
        ],
        "percentunit",
        thresholds=[(1.0, "red")],
        width=24,
    ),
]

dashboard = gf.dashboard(
    cfg,
    "broker",
    "connmon / Broker drill-down",
    "The brokers' side of client connections: per client address and broker.",
    panels,
    side="broker",
)
