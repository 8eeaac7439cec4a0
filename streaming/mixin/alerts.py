"""Alert rules: one per finding kind, plus pipeline health. They follow the conventions of the
monitoring mixins (kubernetes-mixin, node-mixin): CamelCase names sharing the ``ConnMon``
prefix, a ``severity`` label, a one-sentence ``summary``, a ``description`` that names the
labels, and a ``runbook_url`` to the alert's section of docs/runbook.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streaming.mixin.config import MixinConfig
from streaming.mixin.rules import FAILING_HOSTS, PROCESS_FD_USAGE, failing_hosts_expr

FINDING_LABELS = "kind, severity, side, host, app, cluster, broker_id, peer_host"
FINDING_GROUP, BROKER_GROUP, PROCESS_GROUP, PIPELINE_GROUP = (
    "connmon.findings",
    "connmon.brokers",
    "connmon.processes",
    "connmon.pipeline",
)
BROKER_ALERT = "ConnMonBrokerUnavailable"
FD_ALERT = "ConnMonFdExhaustionPredicted"
_WHO = "{{ $labels.app }} on {{ $labels.host }} ({{ $labels.side }} side)"
_BROKER = "broker {{ $labels.broker_id }}"
# Who, where and toward which broker, for a finding alert's summary (the host-level series of a
# host's failed connects has app and broker "*").
_WHERE = (
    '{{ if eq $labels.app "*" }}host {{ $labels.host }}{{ else }}{{ $labels.app }} on '
    "{{ $labels.host }}, broker {{ $labels.broker_id }}{{ end }}"
    "{{ with $labels.cluster }}, cluster {{ . }}{{ end }}"
)
# The job's recommendation for the finding, from the exporter's info series of its labels.
_ADVICE = (
    "{{ with printf `connmon_finding_recommendation_info{kind=%q, side=%q, host=%q, app=%q, "
    "cluster=%q, broker_id=%q, peer_host=%q}` $labels.kind $labels.side $labels.host "
    "$labels.app $labels.cluster $labels.broker_id $labels.peer_host | query }}"
    "{{ with first . }} What to do: {{ .Labels.recommendation }}{{ end }}{{ end }}"
)


@dataclass(frozen=True)
class FindingAlert:
    name: str
    kind: str
    summary: str
    description: str


def _g(value: float) -> str:
    return f"{value:g}"


def finding_alerts(cfg: MixinConfig) -> tuple[FindingAlert, ...]:
    d = cfg.detectors
    return (
        FindingAlert(
            "ConnMonCloseWaitBuildup",
            "close_wait_buildup",
            "Sockets to a Kafka broker are stuck in CLOSE_WAIT.",
            f"{_WHO} holds CLOSE_WAIT sockets to {_BROKER} for more than "
            f"{_g(d.close_wait_grace_s)}s: the broker closed them and the application never "
            f"did (warning from {d.close_wait_warning_count}, critical from "
            f"{d.close_wait_critical_count} sockets, a rising count, or a process that runs "
            "out of file descriptors within "
            f"{_duration(d.fd_exhaustion_critical_s)} at this rate).",
        ),
        FindingAlert(
            "ConnMonIdleChurn",
            "idle_churn",
            "A Kafka client keeps re-creating connections reaped for idleness.",
            f"{_WHO} had its connection to {_BROKER} closed after more than "
            f"{_g(d.idle_churn_min_idle_s)}s idle and re-opened at least "
            f"{d.idle_churn_min_cycles} times within {_g(d.idle_churn_window_s)}s.",
        ),
        FindingAlert(
            "ConnMonDuplicateConnections",
            "duplicate_connections",
            "A Kafka client process holds an idle extra connection to one broker.",
            f"{_WHO} has a process with more than one ESTABLISHED socket to {_BROKER}, the "
            f"extra one idle for more than {_g(d.duplicate_idle_s)}s.",
        ),
        FindingAlert(
            "ConnMonIdleZombie",
            "idle_zombie",
            "A Kafka connection has been idle longer than any idle timeout.",
            f"{_WHO} holds an ESTABLISHED socket to {_BROKER} idle for more than "
            f"{_g(d.zombie_idle_s)}s: idle expiry is disabled on both sides.",
        ),
        FindingAlert(
            "ConnMonConnectionStorm",
            "connection_storm",
            "A Kafka client is opening connections to a broker at a storm rate.",
            f"{_WHO} opens more than {_g(d.storm_opens_per_min)} connections per minute to "
            f"{_BROKER}, or more than {_g(d.storm_short_lived_per_min)} per minute that live "
            f"under {_g(d.storm_short_lived_s)}s, or waits on more than "
            f"{d.storm_syn_sent_count} unanswered connects (SYN_SENT).",
        ),
        FindingAlert(
            "ConnMonTimeWaitPileup",
            "time_wait_pileup",
            "TIME_WAIT sockets toward a Kafka broker are piling up.",
            f"{_WHO} has TIME_WAIT sockets to {_BROKER} above "
            f"{d.time_wait_warning_count} (critical from {d.time_wait_critical_count}).",
        ),
    )


def _alert(
    cfg: MixinConfig,
    name: str,
    expr: str,
    for_: str,
    summary: str,
    description: str,
    severity: str | None,
    dashboard: str = "pipeline",
    variables: dict[str, str] | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr, "for": for_}
    if severity is not None:
        rule["labels"] = {"severity": severity}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": cfg.runbook_url(name),
        "dashboard_url": cfg.dashboard_url(dashboard, variables or {}),
    }
    return rule


def _labels(*names: str) -> dict[str, str]:
    """Dashboard variables set from the alert's labels (``broker`` from ``broker_id``)."""
    return {
        ("broker" if n == "broker_id" else n): f"{{{{ $labels.{n} | urlquery }}}}" for n in names
    }


def broker_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    """A broker that clients on several hosts see drop their connections or refuse their
    connects: down or restarting. It inhibits the churn and storms it causes on its clients
    (deploy/alertmanager). It reads a fleet roll-up, recorded first in the same group so the
    alert sees this evaluation's value, not the previous one."""
    return [
        {"record": FAILING_HOSTS, "expr": failing_hosts_expr(cfg.exporter_selector)},
        _alert(
            cfg,
            BROKER_ALERT,
            f"{FAILING_HOSTS} >= {cfg.broker_unavailable_hosts}",
            cfg.broker_unavailable_for,
            "A Kafka broker is dropping or refusing its clients' connections.",
            "Clients on {{ $value }} hosts see broker {{ $labels.broker_id }} of cluster "
            "{{ $labels.cluster }} close busy connections, refuse connects or leave them "
            "unanswered: it is down, restarting or unreachable. Idle-churn and storm alerts of "
            "its clients are held back while this fires.",
            "warning",
            "broker",
            _labels("cluster", "broker_id"),
        ),
    ]


def _duration(seconds: float) -> str:
    """``3600`` -> ``1h``, ``5400`` -> ``90m``: a horizon as people write it."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def fd_usage_expr(cfg: MixinConfig) -> str:
    """Per process (cluster, side, host, app), the max of its series' fd usage ratio: the
    process's own value, repeated on its series toward each broker or from each client."""
    ex = cfg.exporter_selector
    return f"max by (cluster, side, host, app) (connmon_process_fd_usage_ratio{{{ex}}})"


def fd_exhaustion_expr(cfg: MixinConfig) -> str:
    """A process's fd usage ratio now, while it is at its limit, or while it rose within the
    rise window and its trend over the range (``predict_linear``) reaches 1 within the
    horizon. The rise condition keeps a process that is high but flat quiet: a step up stops
    counting once it is a rise window old, before the alert's ``for`` has passed."""
    p, rise, rng = PROCESS_FD_USAGE, cfg.fd_exhaustion_rise_window, cfg.fd_exhaustion_range
    horizon = _g(cfg.fd_exhaustion_horizon_s)
    return (
        f"{p} >= 1 or ({p} > min_over_time({p}[{rise}]) and "
        f"predict_linear({p}[{rng}], {horizon}) >= 1)"
    )


def process_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    """A Kafka client or broker process about to run out of file descriptors, whatever leaks
    them (CLOSE_WAIT sockets, files, sockets to anything else): no new connection after that.
    It reads a per-process roll-up recorded first in its own group, so that its range functions
    read one series per process and this evaluation's value."""
    horizon = _duration(cfg.fd_exhaustion_horizon_s)
    return [
        {"record": PROCESS_FD_USAGE, "expr": fd_usage_expr(cfg)},
        _alert(
            cfg,
            FD_ALERT,
            fd_exhaustion_expr(cfg),
            cfg.fd_exhaustion_for,
            f"A Kafka process is predicted to run out of file descriptors within {horizon}.",
            f"{_WHO}{{{{ with $labels.cluster }}}}, cluster {{{{ . }}}}{{{{ end }}}} "
            "{{ if ge $value 1.0 }}has no file descriptor left (all of its soft limit on open "
            "files is in use){{ else }}uses {{ $value | humanizePercentage }} of its soft "
            "limit on open files, and at the trend of the last "
            f"{cfg.fd_exhaustion_range} reaches it within {horizon}{{{{ end }}}}: then every "
            "new connection, to Kafka or anything else, fails with 'Too many open files'.",
            "critical",
            # The drill-down of its side: the client dashboard, or the broker's.
            "{{ $labels.side }}",
            _labels("cluster", "host", "app"),
        ),
    ]


def pipeline_alerts(cfg: MixinConfig) -> list[dict[str, Any]]:
    ex, ag, w = cfg.exporter_selector, cfg.agent_selector, cfg.rate_window
    wm = _g(cfg.detectors.watermark_s)
    return [
        _alert(
            cfg,
            "ConnMonAgentDown",
            f"up{{{ag}}} == 0 or connmon_agent_up{{{ag}}} == 0 or "
            f"(time() - connmon_agent_last_scan_timestamp_seconds{{{ag}}}) "
            f"> {_g(cfg.agent_heartbeat_stale_s)}",
            cfg.agent_down_for,
            "A connmon agent is not reporting.",
            "The connmon agent {{ $labels.instance }} is down, cannot read sockets, or has not "
            f"completed a scan for {_g(cfg.agent_heartbeat_stale_s)}s.",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonJobStalled",
            f"time() - max by (job_id, query) (connmon_job_last_batch_timestamp_seconds{{{ex}}})"
            f" > {_g(cfg.job_stalled_s)}",
            cfg.job_stalled_for,
            "The connmon streaming job has stopped completing micro-batches.",
            "Query {{ $labels.query }} of job {{ $labels.job_id }} has not finished a "
            f"micro-batch for more than {_g(cfg.job_stalled_s)}s.",
            "critical",
        ),
        _alert(
            cfg,
            "ConnMonJobLagging",
            f"max by (job_id, query) (connmon_job_watermark_delay_seconds{{{ex}}}) "
            f"> {_g(cfg.job_lag_s)}",
            cfg.job_lagging_for,
            "The connmon streaming job is falling behind its input.",
            "Query {{ $labels.query }} of job {{ $labels.job_id }} has a watermark delay of "
            f"{{{{ $value | humanizeDuration }}}} (more than {_g(cfg.job_lag_s)}s).",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonDataStale",
            f"time() - max by (job_id, query) "
            f"(connmon_job_last_event_timestamp_seconds{{{ex}}}) > {_g(cfg.data_stale_s)}",
            cfg.data_stale_for,
            "connmon has received no new socket events.",
            "The newest event processed by query {{ $labels.query }} of job "
            f"{{{{ $labels.job_id }}}} is more than {_g(cfg.data_stale_s)}s old: agents may "
            "not be producing or the events topic is unreachable.",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonDeadLetterRate",
            f"max by (job_id, query) (rate(connmon_job_dead_letter_events_total{{{ex}}}[{w}])) "
            f"> {_g(cfg.dead_letter_per_s)}",
            cfg.dead_letter_for,
            "connmon is rejecting socket events to the dead-letter topic.",
            "Query {{ $labels.query }} of job {{ $labels.job_id }} rejects "
            "{{ $value | humanize }} events per second to the dead-letter topic "
            f"(more than {_g(cfg.dead_letter_per_s)}).",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonJobInternalErrors",
            f"max by (job_id, query) (increase(connmon_job_internal_errors_total{{{ex}}}[{w}])) "
            "> 0",
            "0m",
            "The connmon job set aside records its own code failed on.",
            "Query {{ $labels.query }} of job {{ $labels.job_id }} failed on "
            "{{ $value | humanize }} record(s) in the last " + w + " and wrote them to the "
            "dead-letter topic with reason internal_error (state_unreadable for a bucket's "
            "saved state it could not read) instead of stopping: a bug in connmon.",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonJobInputLost",
            f"max by (job_id, query) (increase(connmon_job_input_lost_records_total{{{ex}}}"
            f"[{w}])) > 0",
            "0m",
            "The connmon job's input was deleted before the job read it.",
            "Query {{ $labels.query }} of job {{ $labels.job_id }} found "
            "{{ $value | humanize }} record(s) of its input topic deleted before it read them "
            "in the last " + w + " (the topic's retention ran out while the query was stopped "
            "or behind, or the topic was created again): windows miss what they held. The job "
            "goes on with its state.",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonJobStateSeriesShed",
            f"max by (job_id) (increase(connmon_job_state_series_shed_total{{{ex}}}[{w}])) > 0",
            "0m",
            "The connmon job forgot series at its per-bucket limit.",
            "Job {{ $labels.job_id }} forgot {{ $value | humanize }} series in the last "
            + w
            + " because a state bucket held more than state_max_series_per_bucket: the healthy "
            "series seen longest ago went first, and one that comes back starts without "
            "history (an idle-churn cycle or a CLOSE_WAIT trend may be missed). Raise "
            "state_buckets (with a migration) or the limit.",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonHostClockSkew",
            # Signed, so the description can say ahead or behind: the offset's magnitude is
            # past the watermark either way.
            f"max by (job_id, host) (connmon_job_host_clock_offset_seconds{{{ex}}} > {wm}) or "
            f"min by (job_id, host) (connmon_job_host_clock_offset_seconds{{{ex}}} < -{wm})",
            cfg.clock_skew_for,
            "A host's clock is off by more than the job's watermark.",
            "The clock of host {{ $labels.host }} is off the fleet's by "
            "{{ $value | humanizeDuration }} (job {{ $labels.job_id }}; positive: ahead, "
            f"negative: behind), more than the watermark of {wm}s: "
            "{{ if lt $value 0.0 }}its events arrive behind the watermark and are dropped as "
            "late{{ else }}its windows close and its findings fire late{{ end }}. "
            "Fix NTP/chrony on that host.",
            "warning",
        ),
        _alert(
            cfg,
            "ConnMonExporterDown",
            # A shard that Prometheus cannot scrape, one that was never started (fewer shard
            # indexes scraped than the shards configured), or no exporter target at all.
            f"up{{{ex}}} == 0 or count by (job) (count by (job, shard) "
            f"(connmon_exporter_shards{{{ex}}})) < max by (job) (connmon_exporter_shards{{{ex}}})"
            f" or absent(up{{{ex}}})",
            cfg.exporter_down_for,
            "A connmon exporter is down or a shard of the series is not served.",
            "{{ if $labels.instance }}Prometheus cannot scrape the connmon exporter "
            "{{ $labels.instance }}{{ else }}Fewer connmon exporter shards of job "
            "{{ $labels.job }} are scraped than configured (--shards), or none{{ end }}: the "
            "findings and series of the missing share are not served, and their alerts "
            "cannot fire.",
            "critical",
        ),
        _alert(
            cfg,
            "ConnMonExporterCardinalityLimit",
            f"increase(connmon_exporter_series_dropped_total{{{ex}}}[{w}]) > 0 or "
            f"connmon_exporter_series{{{ex}}} / connmon_exporter_series_limit{{{ex}}} "
            f"> {_g(cfg.cardinality_ratio)}",
            cfg.cardinality_for,
            "The connmon exporter is at its series limit.",
            "The connmon exporter {{ $labels.instance }} drops new series or holds more than "
            f"{_g(cfg.cardinality_ratio * 100)}% of its series limit.",
            "warning",
        ),
    ]


def alert_rules(cfg: MixinConfig) -> dict[str, Any]:
    findings = [
        _alert(
            cfg,
            a.name,
            f"max by ({FINDING_LABELS}) "
            f'(connmon_finding_active{{kind="{a.kind}", {cfg.exporter_selector}}}) > 0',
            cfg.finding_for,
            f"{a.summary.rstrip('.')}: {_WHERE}.",
            a.description + _ADVICE,
            None,  # the finding's own severity label (warning/critical) is kept
            "client",
            _labels("cluster", "host", "app", "broker_id"),
        )
        for a in finding_alerts(cfg)
    ]
    return {
        "groups": [
            {"name": FINDING_GROUP, "rules": findings},
            {"name": BROKER_GROUP, "rules": broker_alerts(cfg)},
            {"name": PROCESS_GROUP, "rules": process_alerts(cfg)},
            {"name": PIPELINE_GROUP, "rules": pipeline_alerts(cfg)},
        ]
    }
