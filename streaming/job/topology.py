"""``connmon job --describe``: the job's topology for its settings, as text. Its two queries
with their sources, steps, state and sinks, the topic names and checkpoint paths, in the manner
of Kafka Streams' ``Topology.describe()``. Pure: nothing is started."""

from __future__ import annotations

from streaming.job.checkpoint import INGEST_QUERY, LEGACY_INGEST_DIR, STATE_QUERY
from streaming.job.settings import JobSettings
from streaming.schema.findings import KINDS


def _join(checkpoint: str | None, query: str) -> str:
    if checkpoint is None:
        return f"<a temporary folder>/{query} (no --checkpoint: state does not survive a restart)"
    return f"{checkpoint.rstrip('/')}/{query}"


def describe(s: JobSettings) -> str:
    """The topology the job runs with settings ``s``."""
    d = s.detectors
    cap = s.max_offsets_per_trigger
    partials_cap = s.partials_max_offsets_per_trigger
    lines = [
        f"Job {s.job_id} on {s.master}, Kafka {s.bootstrap_servers}, every {s.trigger}",
        f"  Query {INGEST_QUERY}, checkpoint {_join(s.checkpoint, INGEST_QUERY)} "
        f"({LEGACY_INGEST_DIR}/ in a checkpoint an earlier connmon started)",
        f"    Source: Kafka topic {s.events_topic} (starting offsets {s.starting_offsets}, "
        + (f"at most {cap} records a batch)" if cap else "no batch cap)"),
        "    --> decode: each record to an event, or a dead letter with its reason",
        f"    --> partial rows: per {d.window_s:g} s event-time window and series, the batch's "
        "statistics",
        f"    --> bucket: xxhash64 of the series mod {s.state_buckets}",
        f"    Sink: Kafka topic {s.partials_topic} (key <run id>:<bucket>, JSON lines; internal)",
        f"    Sink: Kafka topic {s.deadletter_topic} (rejected events, key <partition>:<offset>)",
        f"  Query {STATE_QUERY}, checkpoint {_join(s.checkpoint, STATE_QUERY)}",
        f"    Source: Kafka topic {s.partials_topic} (this checkpoint's run id only, "
        + (
            f"at most {partials_cap} records a batch)"
            if partials_cap
            else "a few ingest batches a batch)"
        ),
        f"    --> state: transformWithState over {s.state_buckets} buckets in "
        f"{s.shuffle_partitions} state-store partitions; a bucket's value holds its series' "
        f"open windows, history and firing findings (at most "
        f"{s.state_max_series_per_bucket} series); event-time timers at window ends "
        f"(watermark {d.watermark_s:g} s)",
        "    --> detectors: " + ", ".join(KINDS) + "; hysteresis and the publication rule",
        f"    Sink: Kafka topic {s.aggregates_topic} (compacted, key: series)",
        f"    Sink: Kafka topic {s.findings_topic} (compacted, key: kind|client|cluster|broker)",
        f"    Sink: Kafka topic {s.deadletter_topic} (records the job's own code failed on)",
        f"  Listener: a status record per query and batch -> Kafka topic {s.status_topic} "
        f"(compacted, key {s.job_id}:<query>)",
    ]
    return "\n".join(lines) + "\n"
