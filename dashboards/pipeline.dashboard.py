"""Pipeline health: agents, the streaming job and the exporter."""

from streaming.mixin import grafana as gf
from streaming.mixin.config import DEFAULT as cfg

ex, ag = cfg.exporter_selector, cfg.agent_selector
JQ = "{{job_id}} {{query}}"

panels = [
    gf.row("Agents"),
    gf.timeseries(
        "Agents up",
        "1 when Prometheus can scrape the agent and the agent can read sockets.",
        [
            (f"up{{{ag}}}", "scrape {{instance}}"),
            (f"connmon_agent_up{{{ag}}}", "agent {{instance}}"),
        ],
        "short",
    ),
    gf.timeseries(
        "Agent scan duration (p99)",
        "99th percentile of the time one socket scan takes per agent.",
        [
            (
                "histogram_quantile(0.99, sum by (le, instance) "
                f"(rate(connmon_agent_scan_duration_seconds_bucket{{{ag}}}[$__rate_interval])))",
                "{{instance}}",
            )
        ],
        "s",
    ),
    gf.timeseries(
        "Agent events produced and dropped",
        "Events per second the agents produce to Kafka, and drop (by reason).",
        [
            (
                f"sum by (kind) (rate(connmon_agent_events_produced_total{{{ag}}}"
                "[$__rate_interval]))",
                "produced {{kind}}",
            ),
            (
                f"sum by (reason) (rate(connmon_agent_events_dropped_total{{{ag}}}"
                "[$__rate_interval]))",
                "dropped {{reason}}",
            ),
        ],
        "cps",
    ),
    gf.timeseries(
        "Time since last agent scan",
        "Seconds since each agent completed a scan.",
        [(f"time() - connmon_agent_last_scan_timestamp_seconds{{{ag}}}", "{{instance}}")],
        "s",
        thresholds=[(cfg.agent_heartbeat_stale_s, "red")],
    ),
    gf.row("Streaming job"),
    gf.timeseries(
        "Micro-batch duration",
        "Duration of the job's last micro-batch per query.",
        [(f"connmon_job_batch_duration_seconds{{{ex}}}", JQ)],
        "s",
        thresholds=[(cfg.detectors.window_s, "orange")],
    ),
    gf.timeseries(
        "Input and processing rate",
        "Rows per second read and processed by each query.",
        [
            (f"connmon_job_input_rows_per_second{{{ex}}}", "input " + JQ),
            (f"connmon_job_processed_rows_per_second{{{ex}}}", "processed " + JQ),
        ],
        "rowsps",
    ),
    gf.timeseries(
        "Input left for later batches",
        "Records of each query's Kafka input not yet read when its last micro-batch was "
        "planned: above zero only when a batch size limit holds a backlog back, and falling "
        "while the query catches up.",
        [(f"connmon_job_input_offsets_behind{{{ex}}}", JQ)],
        "short",
    ),
    gf.timeseries(
        "Watermark delay",
        "How far the event-time watermark trails the batch time; the line is the lag alert "
        "threshold.",
        [(f"connmon_job_watermark_delay_seconds{{{ex}}}", JQ)],
        "s",
        thresholds=[(cfg.job_lag_s, "red")],
    ),
    gf.timeseries(
        "Data age",
        "Seconds since the newest processed event and since the last finished micro-batch.",
        [
            (f"time() - connmon_job_last_event_timestamp_seconds{{{ex}}}", "event " + JQ),
            (f"time() - connmon_job_last_batch_timestamp_seconds{{{ex}}}", "batch " + JQ),
        ],
        "s",
        thresholds=[(cfg.data_stale_s, "red")],
    ),
    gf.timeseries(
        "Dead-letter, late events and lost input",
        "Events per second rejected to the dead-letter topic and arriving behind the watermark, "
        "and input records per second a query found deleted before it read them.",
        [
            (
                f"max by (job_id, query) (rate(connmon_job_dead_letter_events_total{{{ex}}}"
                "[$__rate_interval]))",
                "dead-letter " + JQ,
            ),
            (
                f"max by (job_id, query) (rate(connmon_job_late_events_total{{{ex}}}"
                "[$__rate_interval]))",
                "late " + JQ,
            ),
            (
                f"max by (job_id, query) (rate(connmon_job_input_lost_records_total{{{ex}}}"
                "[$__rate_interval]))",
                "input lost " + JQ,
            ),
        ],
        "cps",
        thresholds=[(cfg.dead_letter_per_s, "red")],
    ),
    gf.timeseries(
        "State size",
        "Series the state query holds, in all buckets and in the largest one (its limit is "
        "state_max_series_per_bucket), and series per second forgotten at that limit (healthy "
        "ones seen longest ago first; ConnMonJobStateSeriesShed).",
        [
            (f"max by (job_id) (connmon_job_state_series{{{ex}}})", "series {{job_id}}"),
            (
                f"max by (job_id) (connmon_job_state_bucket_series_max{{{ex}}})",
                "largest bucket {{job_id}}",
            ),
            (
                f"max by (job_id) (rate(connmon_job_state_series_shed_total{{{ex}}}"
                "[$__rate_interval]))",
                "forgotten/s {{job_id}}",
            ),
        ],
        "short",
    ),
    gf.timeseries(
        "State bytes",
        "Compressed bytes of the state query's buckets, all together and the largest one: the "
        "state store reads and writes a bucket's value whole whenever the bucket is called.",
        [
            (f"max by (job_id) (connmon_job_state_bytes{{{ex}}})", "all {{job_id}}"),
            (
                f"max by (job_id) (connmon_job_state_bucket_bytes_max{{{ex}}})",
                "largest bucket {{job_id}}",
            ),
        ],
        "bytes",
    ),
    gf.timeseries(
        "Host clocks",
        "Per host, its newest event time minus the fleet's (positive: the host's clock is "
        "ahead), while it is off by more than the job's clock tolerance. Past either line (the "
        "watermark) for 5 minutes ConnMonHostClockSkew fires: a host behind has its events "
        "dropped as late, one ahead has its windows close late.",
        [
            (
                f"max by (job_id, host) (connmon_job_host_clock_offset_seconds{{{ex}}})",
                "{{host}}",
            )
        ],
        "s",
        thresholds=[(-cfg.detectors.watermark_s, "green"), (cfg.detectors.watermark_s, "red")],
        below="red",
    ),
    gf.timeseries(
        "Late events by host",
        "Events per second per host that arrived behind the watermark and were dropped (a "
        "clock behind, or a backlog sent after an outage); the 10 largest.",
        [
            (
                "topk(10, sum by (host) (max by (job_id, query, host) "
                f"(rate(connmon_job_host_late_events_total{{{ex}}}[$__rate_interval]))))",
                "{{host}}",
            ),
        ],
        "cps",
    ),
    gf.timeseries(
        "Skewed events by host",
        "Events per second per host sent while its clock was off by more than the job's clock "
        "tolerance; the 10 largest.",
        [
            (
                "topk(10, sum by (host) (max by (job_id, query, host) "
                f"(rate(connmon_job_host_skewed_events_total{{{ex}}}[$__rate_interval]))))",
                "{{host}}",
            ),
        ],
        "cps",
    ),
    gf.row("Exporter"),
    gf.timeseries(
        "Exporter series",
        "Series and findings held by the exporter, and its limit.",
        [
            (f"connmon_exporter_series{{{ex}}}", "series {{instance}}"),
            (f"connmon_exporter_series_limit{{{ex}}}", "limit {{instance}}"),
        ],
        "short",
    ),
    gf.timeseries(
        "Exporter drops, expiries and invalid messages",
        "Per second: new series refused at the limit, series expired as stale, and messages "
        "rejected as malformed.",
        [
            (
                f"sum by (instance) (rate(connmon_exporter_series_dropped_total{{{ex}}}"
                "[$__rate_interval]))",
                "dropped {{instance}}",
            ),
            (
                f"sum by (instance) (rate(connmon_exporter_series_expired_total{{{ex}}}"
                "[$__rate_interval]))",
                "expired {{instance}}",
            ),
            (
                f"sum by (topic, reason) (rate(connmon_exporter_invalid_messages_total{{{ex}}}"
                "[$__rate_interval]))",
                "invalid {{topic}} {{reason}}",
            ),
        ],
        "cps",
    ),
    gf.timeseries(
        "Exporter input",
        "Messages consumed per second per topic role, and seconds since the last one.",
        [
            (
                f"sum by (topic) (rate(connmon_exporter_messages_total{{{ex}}}[$__rate_interval]))",
                "{{topic}}",
            ),
        ],
        "cps",
    ),
    gf.timeseries(
        "Time since last exporter message",
        "Seconds since the exporter consumed a message, per topic role.",
        [
            (
                f"time() - connmon_exporter_last_message_timestamp_seconds{{{ex}}}",
                "{{topic}}",
            ),
        ],
        "s",
    ),
]

dashboard = gf.dashboard(
    cfg,
    "pipeline",
    "connmon / Pipeline health",
    "Agents, the Spark streaming job and the exporter: are the numbers fresh and complete?",
    panels,
)
