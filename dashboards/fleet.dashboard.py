"""Fleet overview from the recording rules alone: findings, CLOSE_WAIT, churn and broker
trouble per cluster, app, broker and client library. No query here reads a per-series metric,
so the dashboard costs the same with a hundred series or a million; the client and broker
drill-downs show the series behind a number."""

from streaming.mixin import grafana as gf
from streaming.mixin import rules as r
from streaming.mixin.config import DEFAULT as cfg

d = cfg.detectors
ex = cfg.exporter_selector
C = 'cluster=~"$cluster"'
APP = f'{C}, app=~"$app"'
BROKER = f'{C}, broker_id=~"$broker"'
APP_LEGEND = "{{cluster}} {{app}} ({{side}})"
BROKER_LEGEND = "{{cluster}} broker {{broker_id}} ({{side}})"
CW = 'state="CLOSE_WAIT"'


def total(expr: str) -> str:
    """A stat's sum: 0, not "No data", when nothing is counted (absent means none)."""
    return f"sum({expr}) or vector(0)"


def worst(rule: str, matchers: str) -> str:
    return f"topk(10, {rule}{{{matchers}}})"


panels = [
    gf.stat(
        "Critical findings",
        "Findings the job reports as critical right now (all kinds).",
        [(total(f'{r.FINDINGS}{{{APP}, severity="critical"}}'), "")],
        "short",
        thresholds=[(1, "red")],
    ),
    gf.stat(
        "Warning findings",
        "Findings the job reports as warning right now (all kinds).",
        [(total(f'{r.FINDINGS}{{{APP}, severity="warning"}}'), "")],
        "short",
        thresholds=[(1, "orange")],
    ),
    gf.stat(
        "CLOSE_WAIT sockets",
        "CLOSE_WAIT sockets of the selected clusters and apps, both sides. Colours: the "
        "close_wait_buildup detector's warning and critical counts for one client x broker "
        "pair.",
        [(total(f"{r.SOCKETS_BY_APP}{{{APP}, {CW}}}"), "")],
        "short",
        thresholds=[(d.close_wait_warning_count, "orange"), (d.close_wait_critical_count, "red")],
    ),
    gf.stat(
        "Connection opens",
        "Connections opened per second by the selected apps (client side, window average).",
        [(total(f'{r.OPENS_BY_APP}{{{APP}, side="client"}}'), "")],
        "cps",
    ),
    gf.table(
        "Active findings by app",
        "Findings firing now per cluster, app, kind and severity; the client and broker "
        "dashboards show the hosts and brokers behind them.",
        f"{r.FINDINGS}{{{APP}}}",
    ),
    gf.table(
        "Client libraries",
        "Client x broker series by the Kafka client library and version the agent identified "
        "in the client process (docs/client-libraries.md says how each holds connections).",
        f"{r.LIBRARIES}{{{C}}}",
    ),
    gf.row("Worst apps and brokers"),
    gf.timeseries(
        "Brokers failing their clients",
        "Per broker, the client hosts that see it drop busy connections, refuse connects or "
        "leave them unanswered: what the broker alert counts. The line is the alert's "
        "threshold.",
        [(worst(r.FAILING_HOSTS, BROKER), "{{cluster}} broker {{broker_id}}")],
        "short",
        thresholds=[(cfg.broker_unavailable_hosts, "red")],
        width=24,
    ),
    gf.timeseries(
        "Apps by CLOSE_WAIT",
        "The 10 apps with the most CLOSE_WAIT sockets. Lines: the close_wait_buildup "
        "detector's warning and critical counts for one client x broker pair.",
        [(worst(r.SOCKETS_BY_APP, f"{APP}, {CW}"), APP_LEGEND)],
        "short",
        thresholds=[(d.close_wait_warning_count, "orange"), (d.close_wait_critical_count, "red")],
    ),
    gf.timeseries(
        "Brokers by CLOSE_WAIT",
        "The 10 brokers with the most CLOSE_WAIT sockets toward them (client side) or on them "
        "(broker side).",
        [(worst(r.SOCKETS_BY_BROKER, f"{BROKER}, {CW}"), BROKER_LEGEND)],
        "short",
    ),
    gf.timeseries(
        "Apps by idle-timeout churn",
        "The 10 apps with the most connections closed after idling (reaped by "
        "connections.max.idle.ms or a load balancer), and with the most re-opens after such "
        "a close, per second.",
        [
            (worst(r.IDLE_CLOSES_BY_APP, APP), "idle closes " + APP_LEGEND),
            (worst(r.IDLE_RECONNECTS_BY_APP, APP), "reconnects " + APP_LEGEND),
        ],
        "cps",
    ),
    gf.timeseries(
        "Brokers by idle-timeout churn",
        "The 10 brokers whose connections are most often closed after idling, and re-opened "
        "after such a close, per second: a broker's connections.max.idle.ms, or a load "
        "balancer in front of it, reaping its clients.",
        [
            (worst(r.IDLE_CLOSES_BY_BROKER, BROKER), "idle closes " + BROKER_LEGEND),
            (worst(r.IDLE_RECONNECTS_BY_BROKER, BROKER), "reconnects " + BROKER_LEGEND),
        ],
        "cps",
    ),
    gf.timeseries(
        "Apps by connection opens (storms)",
        "The 10 apps opening the most connections per second; the line is the "
        "connection_storm detector's threshold for one client x broker pair.",
        [(worst(r.OPENS_BY_APP, APP), APP_LEGEND)],
        "cps",
        thresholds=[(d.storm_opens_per_min / 60, "red")],
    ),
    gf.timeseries(
        "Brokers by connection opens",
        "The 10 brokers with the most connections opened per second toward them (client "
        "side) or on them (broker side): a broker's reconnect wave shows here first.",
        [(worst(r.OPENS_BY_BROKER, BROKER), BROKER_LEGEND)],
        "cps",
    ),
    gf.timeseries(
        "Apps hit by broker drops and failed connects",
        "The 10 apps with the most connections a broker closed while in use, and with the "
        "most failed connects (seen with the agent's eBPF collector), per second.",
        [
            (worst(r.DROPS_BY_APP, APP), "dropped " + APP_LEGEND),
            (worst(r.FAILED_CONNECTS_BY_APP, APP), "failed connects " + APP_LEGEND),
        ],
        "cps",
    ),
    gf.timeseries(
        "Brokers by drops and failed connects",
        "The 10 brokers that close the most connections while in use, and that fail the most "
        "connects, per second.",
        [
            (worst(r.DROPS_BY_BROKER, BROKER), "dropped " + BROKER_LEGEND),
            (worst(r.FAILED_CONNECTS_BY_BROKER, BROKER), "failed connects " + BROKER_LEGEND),
        ],
        "cps",
    ),
    gf.row("Fleet-wide"),
    gf.timeseries(
        "Sockets by state",
        "All Kafka sockets of the selected clusters by TCP state and side.",
        [(f"{r.SOCKETS_BY_STATE}{{{C}}}", "{{cluster}} {{state}} ({{side}})")],
        "short",
    ),
    gf.timeseries(
        "Client sockets by library",
        "Client-side sockets by the client library the agent identified and TCP state.",
        [(f"{r.SOCKETS_BY_LIBRARY}{{{C}}}", "{{cluster}} {{client_library}} {{state}}")],
        "short",
    ),
    gf.timeseries(
        "Findings by kind",
        "Active findings of the selected clusters and apps by kind and severity over time.",
        [(f"sum by (kind, severity) ({r.FINDINGS}{{{APP}}})", "{{kind}} ({{severity}})")],
        "short",
    ),
    gf.timeseries(
        "Findings fired per hour",
        "Rate at which findings fire, per hour, by kind and severity at firing, counted by the "
        "exporters from the findings topic (a few series per exporter, not per client x broker "
        "pair): includes findings that fired and resolved between two scrapes, which the "
        "active findings never show. Summed over shards; replicas that serve the same shard "
        "count the same findings, hence max per shard.",
        [
            (
                "3600 * sum by (kind, severity) (max by (kind, severity, shard) "
                f"(rate(connmon_findings_fired_total{{{ex}}}[$__rate_interval])))",
                "{{kind}} ({{severity}})",
            )
        ],
        "short",
    ),
]

dashboard = gf.dashboard(
    cfg,
    gf.FLEET_UID,
    "connmon / Fleet overview",
    "Kafka client connections across the fleet, from recording rules: findings, CLOSE_WAIT, "
    "churn and broker trouble per cluster, app, broker and client library.",
    panels,
)
