"""Fleet overview: the worst client x broker pairs by CLOSE_WAIT, churn and storms, and every
active finding."""

from streaming.mixin import grafana as gf
from streaming.mixin.config import DEFAULT as cfg

d = cfg.detectors
ex = cfg.exporter_selector
F = f'{ex}, cluster=~"$cluster", host=~"$host", app=~"$app", broker_id=~"$broker"'
PAIR = "{{app}} @ {{host}} -> {{cluster}}/{{broker_id}} ({{side}})"

panels = [
    gf.stat(
        "Critical findings",
        "Findings the job reports as critical right now (all kinds).",
        [('sum(kind_severity:connmon_finding_active:sum{severity="critical"})', "")],
        "short",
        thresholds=[(1, "red")],
    ),
    gf.stat(
        "Warning findings",
        "Findings the job reports as warning right now (all kinds).",
        [('sum(kind_severity:connmon_finding_active:sum{severity="warning"})', "")],
        "short",
        thresholds=[(1, "orange")],
    ),
    gf.stat(
        "Stuck CLOSE_WAIT sockets",
        "CLOSE_WAIT sockets across the selected hosts, apps and brokers.",
        [(f"sum(connmon_close_wait_sockets{{{F}}})", "")],
        "short",
        thresholds=[(d.close_wait_warning_count, "orange"), (d.close_wait_critical_count, "red")],
    ),
    gf.stat(
        "Connection opens",
        "Connections opened per second across the selection (window average).",
        [(f"sum(connmon_connection_opens_per_second{{{F}}})", "")],
        "cps",
    ),
    gf.table(
        "Active findings",
        "Every finding the job reports as firing: kind, severity and the client x broker pair.",
        f"connmon_finding_active{{{F}}}",
    ),
    gf.table(
        "Client libraries",
        "Client x broker pairs by the Kafka client library and version the agent identified "
        "in the client process (docs/client-libraries.md says how each holds connections).",
        f"count by (client_library, client_version) (connmon_client_library_info{{{F}}})",
    ),
    gf.timeseries(
        "Worst pairs by CLOSE_WAIT",
        "Top 10 client x broker pairs by CLOSE_WAIT sockets. Lines: warning and critical "
        "thresholds of the close_wait_buildup detector.",
        [(f"topk(10, connmon_close_wait_sockets{{{F}}})", PAIR)],
        "short",
        thresholds=[(d.close_wait_warning_count, "orange"), (d.close_wait_critical_count, "red")],
    ),
    gf.timeseries(
        "Worst pairs by oldest CLOSE_WAIT",
        "Top 10 pairs by the age of their oldest CLOSE_WAIT socket; the line is the grace "
        "period after which CLOSE_WAIT counts as stuck.",
        [(f"topk(10, connmon_close_wait_oldest_age_seconds{{{F}}})", PAIR)],
        "s",
        thresholds=[(d.close_wait_grace_s, "orange")],
    ),
    gf.timeseries(
        "Worst pairs by idle-timeout churn",
        "Top 10 pairs by connections closed after being idle (reaped by "
        "connections.max.idle.ms or a load balancer), per second.",
        [(f"topk(10, connmon_idle_closes_per_second{{{F}}})", PAIR)],
        "cps",
    ),
    gf.timeseries(
        "Worst pairs by connection opens (storms)",
        "Top 10 pairs by connections opened per second; the line is the connection_storm "
        "detector's threshold.",
        [(f"topk(10, connmon_connection_opens_per_second{{{F}}})", PAIR)],
        "cps",
        thresholds=[(d.storm_opens_per_min / 60, "red")],
    ),
    gf.timeseries(
        "Sockets by state",
        "Kafka sockets of the selection by TCP state.",
        [(f"sum by (state) (connmon_sockets{{{F}}})", "{{state}}")],
        "short",
        stack=True,
    ),
    gf.timeseries(
        "Findings by kind",
        "Active findings by kind and severity over time.",
        [("kind_severity:connmon_finding_active:sum", "{{kind}} ({{severity}})")],
        "short",
    ),
    gf.timeseries(
        "Findings fired per hour",
        "Rate at which findings fire, per hour, by kind and severity at firing, counted by the "
        "exporter from the findings topic: includes findings that fired and resolved between "
        "two scrapes, which the active findings never show. Exporter replicas read the same "
        "topic, hence max.",
        [
            (
                "3600 * max by (kind, severity) "
                "(rate(connmon_findings_fired_total[$__rate_interval]))",
                "{{kind}} ({{severity}})",
            )
        ],
        "short",
    ),
    gf.row("Fleet-wide (all hosts, recording rules)"),
    gf.timeseries(
        "CLOSE_WAIT by broker",
        "CLOSE_WAIT sockets of all clients per broker and side (recording rule).",
        [
            (
                "cluster_side_broker:connmon_close_wait_sockets:sum",
                "{{cluster}} broker {{broker_id}} ({{side}})",
            )
        ],
        "short",
        width=8,
    ),
    gf.timeseries(
        "CLOSE_WAIT by app",
        "CLOSE_WAIT sockets per application across all hosts (recording rule).",
        [("cluster_side_app:connmon_close_wait_sockets:sum", "{{cluster}} {{app}} ({{side}})")],
        "short",
        width=8,
    ),
    gf.timeseries(
        "Sockets by state, fleet-wide",
        "All Kafka sockets by TCP state and side (recording rule).",
        [("cluster_side_state:connmon_sockets:sum", "{{cluster}} {{state}} ({{side}})")],
        "short",
        width=8,
    ),
    gf.timeseries(
        "Connection opens by app",
        "Connections opened per second per application across all hosts (recording rule).",
        [
            (
                "cluster_side_app:connmon_connection_opens_per_second:sum",
                "{{cluster}} {{app}} ({{side}})",
            )
        ],
        "cps",
    ),
    gf.timeseries(
        "Idle closes by app",
        "Connections closed after idling, per second per application (recording rule).",
        [("cluster_side_app:connmon_idle_closes_per_second:sum", "{{cluster}} {{app}} ({{side}})")],
        "cps",
    ),
]

dashboard = gf.dashboard(
    cfg,
    "fleet",
    "connmon / Fleet overview",
    "Kafka client connections across the fleet: worst pairs and active findings.",
    panels,
)
