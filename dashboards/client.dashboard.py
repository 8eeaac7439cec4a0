"""Client drill-down: one client host or app, its sockets to each broker."""

from streaming.mixin import grafana as gf
from streaming.mixin.config import DEFAULT as cfg

d = cfg.detectors
F = (
    f'{cfg.exporter_selector}, side="client", cluster=~"$cluster", host=~"$host", app=~"$app", '
    'broker_id=~"$broker"'
)
BY = "{{app}} @ {{host}} -> {{cluster}}/{{broker_id}}"
PROC = "{{app}} @ {{host}} ({{cluster}})"

panels = [
    gf.row("Sockets"),
    gf.timeseries(
        "Sockets by broker and state",
        "The client's Kafka sockets per broker and TCP state (latest in each window).",
        [
            (
                f"sum by (cluster, broker_id, state) (connmon_sockets{{{F}}})",
                "{{cluster}}/{{broker_id}} {{state}}",
            )
        ],
        "short",
        width=24,
    ),
    gf.timeseries(
        "CLOSE_WAIT sockets",
        "Sockets the broker closed that the client application has not closed. Lines: "
        "close_wait_buildup warning and critical counts.",
        [(f'connmon_sockets{{{F}, state="CLOSE_WAIT"}}', BY)],
        "short",
        thresholds=[(d.close_wait_warning_count, "orange"), (d.close_wait_critical_count, "red")],
    ),
    gf.timeseries(
        "Oldest CLOSE_WAIT age",
        "Age of the oldest CLOSE_WAIT socket; it should stay near zero for a healthy client.",
        [(f"connmon_close_wait_oldest_age_seconds{{{F}}}", BY)],
        "s",
        thresholds=[(d.close_wait_grace_s, "orange")],
    ),
    gf.timeseries(
        "CLOSE_WAIT slope",
        "Least-squares slope of the CLOSE_WAIT count within each window (sockets per second; "
        "gaps where a window had too few samples); the line is the critical slope.",
        [(f"connmon_close_wait_slope_per_second{{{F}}}", BY)],
        "short",
        thresholds=[(d.close_wait_critical_slope_per_s, "red")],
    ),
    gf.timeseries(
        "Max idle time",
        "Longest idle socket per broker. Lines: the duplicate-connection idle limit and the "
        "zombie idle limit.",
        [(f"connmon_max_idle_seconds{{{F}}}", BY)],
        "s",
        thresholds=[(d.duplicate_idle_s, "orange"), (d.zombie_idle_s, "red")],
    ),
    gf.timeseries(
        "File descriptors in use",
        "Open file descriptors of the client process as a share of its soft limit on open "
        "files (RLIMIT_NOFILE); of several processes of one app on a host, the one nearest its "
        "limit. At the line (100%) it can open no socket or file. "
        f"ConnMonFdExhaustionPredicted fires when the trend of the last {cfg.fd_exhaustion_range}"
        f" reaches it within {cfg.fd_exhaustion_horizon_s / 60:g} minutes. No line: the agent "
        "could not read the process's descriptors, or its limit is unlimited.",
        [(f"max by (cluster, host, app) (connmon_process_fd_usage_ratio{{{F}}})", PROC)],
        "percentunit",
        thresholds=[(1.0, "red")],
        width=24,
    ),
    gf.row("Churn"),
    gf.timeseries(
        "Opens and closes",
        "Connections opened and closed per second; closes split by who closed first (local: "
        "the client, peer: the broker or a middlebox).",
        [
            (f"connmon_connection_opens_per_second{{{F}}}", "opens " + BY),
            (
                f"sum by (app, host, cluster, broker_id, closed_by) "
                f"(connmon_connection_closes_per_second{{{F}}})",
                "closes by {{closed_by}} " + BY,
            ),
        ],
        "cps",
        thresholds=[(d.storm_opens_per_min / 60, "red")],
    ),
    gf.timeseries(
        "Idle closes, reconnects and drops",
        "Closes after idling, re-opens by the same client after such a close (idle-timeout "
        "churn cycles), connections shorter than the storm threshold, and connections the "
        "broker dropped while others were in use (restarts), per second.",
        [
            (f"connmon_idle_closes_per_second{{{F}}}", "idle closes " + BY),
            (f"connmon_idle_reconnects_per_second{{{F}}}", "idle reconnects " + BY),
            (f"connmon_short_lived_connections_per_second{{{F}}}", "short-lived " + BY),
            (
                f"connmon_broker_dropped_connections_per_second{{{F}}}",
                "dropped by the broker " + BY,
            ),
        ],
        "cps",
    ),
    gf.timeseries(
        "Duplicate connections",
        "Processes holding more than one ESTABLISHED socket to one broker, and among them those "
        "whose extra socket is unused since it opened (a Java client's bootstrap connection: "
        "expected until the client's idle expiry closes it, not an alert).",
        [
            (f"connmon_duplicate_connections{{{F}}}", "with extra sockets " + BY),
            (f"connmon_unused_extra_connections{{{F}}}", "unused since opened " + BY),
        ],
        "short",
    ),
    gf.timeseries(
        "TIME_WAIT and SYN_SENT",
        "TIME_WAIT (client closed first) and SYN_SENT (connects not answered) sockets.",
        [
            (f'connmon_sockets{{{F}, state="TIME_WAIT"}}', "TIME_WAIT " + BY),
            (f'connmon_sockets{{{F}, state="SYN_SENT"}}', "SYN_SENT " + BY),
        ],
        "short",
        thresholds=[(d.time_wait_warning_count, "orange")],
    ),
]

dashboard = gf.dashboard(
    cfg,
    "client",
    "connmon / Client drill-down",
    "One Kafka client host or app: sockets, CLOSE_WAIT, idle times and churn per broker.",
    panels,
    side="client",
)
