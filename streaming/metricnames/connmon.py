"""Every metric the exporter serves: the job's aggregates and findings, the job's pipeline
health (from ``connmon.job-status``) and the exporter's own health.

Labels are bounded by construction: ``broker_id`` is the broker id, or the endpoint's host when
the id is unknown (never ``host:port``); ``peer_host`` is a client address on the broker side;
``client_library`` and ``client_version`` are a known list and a ``major.minor.patch``.
"""

from __future__ import annotations

from streaming.metricnames.base import Metric

# Identity of one client x broker series (docs/topics.md "Series key and identity").
SERIES_LABELS: tuple[str, ...] = ("side", "host", "app", "cluster", "broker_id", "peer_host")
JOB_LABELS: tuple[str, ...] = ("job_id", "query")
FINDING_LABELS: tuple[str, ...] = ("kind", "severity") + SERIES_LABELS


def _series(name: str, help_: str, extra: tuple[str, ...] = ()) -> Metric:
    return Metric(name, "gauge", help_, SERIES_LABELS + extra)


def _job(name: str, type_: str, help_: str) -> Metric:
    return Metric(name, type_, help_, JOB_LABELS)


# A per-series sample is written only when it says something: a state with no socket, a
# rate of zero, an age or idle time with no such socket is absent, not 0 (docs/metrics.md
# "Absent means none"). A healthy steady series is then two or three samples, plus its
# process's fd usage when the agent could read it.
AGGREGATE_METRICS: tuple[Metric, ...] = (
    _series(
        "connmon_sockets",
        "Sockets of this client x broker pair by TCP state (CLOSE_WAIT: the peer closed and "
        "the application did not; TIME_WAIT: this side closed first; SYN_SENT: connects not "
        "yet answered). A state with no socket is absent.",
        ("state",),
    ),
    _series(
        "connmon_close_wait_oldest_age_seconds",
        "Age of the oldest CLOSE_WAIT socket of the pair; absent without CLOSE_WAIT.",
    ),
    _series(
        "connmon_close_wait_slope_per_second",
        "Least-squares slope of the CLOSE_WAIT count within the aggregation window, in sockets "
        "per second; absent when the window has too few CLOSE_WAIT samples to fit one.",
    ),
    _series(
        "connmon_max_idle_seconds",
        "Largest idle time (no data either way) of any ESTABLISHED socket; absent without one.",
    ),
    _series(
        "connmon_duplicate_connections",
        "Processes holding more than one ESTABLISHED socket to this broker; absent when none.",
    ),
    _series(
        "connmon_unused_extra_connections",
        "Processes holding an extra socket to this broker that carried data only in its first "
        "seconds (a Java client's bootstrap connection, until its idle expiry): expected. "
        "Absent when none.",
    ),
    _series(
        "connmon_connection_opens_per_second",
        "Connections opened, averaged over the window; absent when none.",
    ),
    _series(
        "connmon_idle_reconnects_per_second",
        "Re-opens by the same client after an idle close (idle-timeout churn cycles), averaged "
        "over the window; absent when none.",
    ),
    _series(
        "connmon_broker_dropped_connections_per_second",
        "Connections the broker closed while connections toward it were in use (a restart or a "
        "failure, not an idle expiry), averaged over the window; absent when none.",
    ),
    _series(
        "connmon_connect_failures_per_second",
        "Connects to the broker that failed (refused, reset or timed out), averaged over the "
        "window; absent when none. Seen only with the agent's eBPF collector (a failed connect "
        "leaves no socket).",
    ),
    _series(
        "connmon_connection_closes_per_second",
        "Connections closed, averaged over the window, by who closed first; absent when none.",
        ("closed_by",),
    ),
    _series(
        "connmon_idle_closes_per_second",
        "Connections closed after being idle (idle-timeout reaping), averaged over the window; "
        "absent when none.",
    ),
    _series(
        "connmon_short_lived_connections_per_second",
        "Connections that lived shorter than the storm threshold, averaged over the window; "
        "absent when none.",
    ),
    _series(
        "connmon_process_fd_usage_ratio",
        "Open file descriptors of the series' process nearest its limit, as a share of its soft "
        "RLIMIT_NOFILE (0 to 1; at 1 it can open no file or socket), at the window's latest "
        "summary; on the broker side the process is the broker. Absent when the agent could "
        "not read them or the limit is unlimited. One value per process, repeated on each of "
        "its series: take the max by cluster, side, host and app.",
    ),
    _series(
        "connmon_client_library_info",
        "1 for a client-side series whose Kafka client library the agent identified: "
        "client_library is a known name or 'other', client_version its major.minor.patch "
        "('' when unknown). Join on the series labels to break other metrics down by library.",
        ("client_library", "client_version"),
    ),
)

FINDING_METRICS: tuple[Metric, ...] = (
    Metric(
        "connmon_finding_active",
        "gauge",
        "1 while the job reports this finding as firing; the series disappears when resolved.",
        FINDING_LABELS,
    ),
    Metric(
        "connmon_finding_recommendation_info",
        "gauge",
        "1 while the finding fires, with the job's recommendation for it (what to change, for "
        "this client and library) as a label: alert descriptions quote it.",
        FINDING_LABELS + ("recommendation",),
    ),
    Metric(
        "connmon_findings_fired_total",
        "counter",
        "Findings that fired since this exporter started, by kind and severity at firing: "
        "counts a finding that fired and resolved between two scrapes too. shard is the "
        "exporter's shard index (0 with one exporter): sum over shards, not over replicas.",
        ("kind", "severity", "shard"),
    ),
)

JOB_METRICS: tuple[Metric, ...] = (
    _job("connmon_job_batch_duration_seconds", "gauge", "Duration of the last micro-batch."),
    _job("connmon_job_input_rows_per_second", "gauge", "Input rate of the last micro-batch."),
    _job(
        "connmon_job_processed_rows_per_second",
        "gauge",
        "Processing rate of the last micro-batch.",
    ),
    _job("connmon_job_batch_input_rows", "gauge", "Rows read by the last micro-batch."),
    _job(
        "connmon_job_input_offsets_behind",
        "gauge",
        "Records of the query's Kafka input left for later batches when its last micro-batch "
        "was planned (a backlog: only a batch size limit leaves any).",
    ),
    _job(
        "connmon_job_watermark_delay_seconds",
        "gauge",
        "How far the event-time watermark trails the batch time.",
    ),
    _job(
        "connmon_job_dead_letter_events_total",
        "counter",
        "Events rejected to the dead-letter topic since the job started.",
    ),
    _job(
        "connmon_job_late_events_total",
        "counter",
        "Events that arrived behind the watermark (dropped) since the job started.",
    ),
    _job(
        "connmon_job_internal_errors_total",
        "counter",
        "Records the job's own code failed on and set aside as dead letters (reason "
        "internal_error, or state_unreadable for a state bucket it could not read) instead of "
        "stopping, since the job started: each is a bug to report.",
    ),
    _job(
        "connmon_job_input_lost_records_total",
        "counter",
        "Records of the query's Kafka input deleted before it read them (retention ran out "
        "while it was stopped or behind, or the topic was created again), since the job "
        "started.",
    ),
    _job(
        "connmon_job_state_series",
        "gauge",
        "Series the state query holds in all its buckets, as each bucket was last saved.",
    ),
    _job(
        "connmon_job_state_bytes",
        "gauge",
        "Compressed bytes of the state query's buckets in the state store, all together.",
    ),
    _job(
        "connmon_job_state_bucket_series_max",
        "gauge",
        "Series in the largest state bucket (the limit is state_max_series_per_bucket).",
    ),
    _job(
        "connmon_job_state_bucket_bytes_max",
        "gauge",
        "Compressed bytes of the largest state bucket: one value the state store reads and "
        "writes whole each time the bucket is called.",
    ),
    _job(
        "connmon_job_state_series_shed_total",
        "counter",
        "Series forgotten at a bucket's series limit since the job started (healthy ones seen "
        "longest ago first); one that comes back starts without history.",
    ),
    _job(
        "connmon_job_last_event_timestamp_seconds",
        "gauge",
        "Event time of the newest event the job has processed (Unix time).",
    ),
    _job(
        "connmon_job_last_batch_timestamp_seconds",
        "gauge",
        "When the job finished its last micro-batch (Unix time).",
    ),
)

EXPORTER_METRICS: tuple[Metric, ...] = (
    Metric(
        "connmon_exporter_series",
        "gauge",
        "Client x broker series and findings the exporter holds now.",
    ),
    Metric("connmon_exporter_series_limit", "gauge", "Most series the exporter will hold."),
    Metric(
        "connmon_exporter_shards",
        "gauge",
        "Exporters the series are split between (--shards), labelled with this one's shard "
        "index: every index below the value must be scraped, or its series go unserved.",
        ("shard",),
    ),
    Metric(
        "connmon_exporter_series_dropped_total",
        "counter",
        "Series and findings not served because the series limit was reached: the oldest quiet "
        "series (no firing finding; by window end) evicted for a newer one or for a finding, "
        "or an older one refused.",
    ),
    Metric(
        "connmon_exporter_series_expired_total",
        "counter",
        "Series removed because they were not updated within the staleness limit.",
    ),
    Metric(
        "connmon_exporter_messages_total",
        "counter",
        "Messages consumed, by topic role (aggregates, findings, job_status).",
        ("topic",),
    ),
    Metric(
        "connmon_exporter_invalid_messages_total",
        "counter",
        "Messages rejected as malformed, by topic role and reason; they are kept aside in memory.",
        ("topic", "reason"),
    ),
    Metric(
        "connmon_exporter_last_message_timestamp_seconds",
        "gauge",
        "When the last message of a topic role was consumed (Unix time).",
        ("topic",),
    ),
    Metric(
        "connmon_exporter_consumer_errors_total",
        "counter",
        "Errors reported by the Kafka consumer.",
    ),
)

# Per host whose clock is off or whose events arrived late (at most 101 per job: a healthy
# fleet has none), from the job status's ``hosts``.
JOB_HOST_METRICS = (
    Metric(
        "connmon_job_host_clock_offset_seconds",
        "gauge",
        "The host's newest event time minus the job's clock when its batch was read (positive: "
        "its clock is ahead), while it is off by more than clock_skew_tolerance_s; absent "
        "otherwise.",
        (*JOB_LABELS, "host"),
    ),
    Metric(
        "connmon_job_host_skewed_events_total",
        "counter",
        "Events of the host in batches where its clock was off by more than "
        "clock_skew_tolerance_s, since the job started.",
        (*JOB_LABELS, "host"),
    ),
    Metric(
        "connmon_job_host_late_events_total",
        "counter",
        "Events of the host that arrived behind the watermark (dropped), since the job started.",
        (*JOB_LABELS, "host"),
    ),
)

CONNMON_METRICS: tuple[Metric, ...] = (
    AGGREGATE_METRICS + FINDING_METRICS + JOB_METRICS + JOB_HOST_METRICS + EXPORTER_METRICS
)
