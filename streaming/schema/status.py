"""``connmon.job-status`` and ``connmon.deadletter`` values, schema 1 (docs/topics.md)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1
INTERNAL_ERROR = "internal_error"  # a record the job's own code failed on (a bug), set aside
STATE_UNREADABLE = "state_unreadable"  # a bucket's saved state the job cannot read, set aside
SKIPPED = "skipped"  # a record the operator told the job to skip (``connmon job --skip-offsets``)
DEAD_LETTER_RAW_BYTES = 4096  # dead letters carry this much of the record, plus size and hash
# In the order they are tested (streaming.schema.validate).
DEADLETTER_REASONS = (
    "null_value",
    "empty_value",
    "too_large",
    "invalid_utf8",
    "malformed_json",
    "wrong_type",
    "unsupported_schema",
    "unknown_kind",
    "missing_field",
    "field_too_long",
    "invalid_value",
    "time_out_of_range",
    SKIPPED,
    INTERNAL_ERROR,
    STATE_UNREADABLE,
)


def error_detail(exc: BaseException) -> str:
    """An exception as a dead letter's ``detail``: its type and message, bounded."""
    return f"{type(exc).__name__}: {exc}"[:500]


def dead_letter(
    reason: str,
    detail: str | None,
    raw: bytes | None,
    rejected_at: str,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    kafka_timestamp: str | None = None,
) -> dict[str, Any]:
    """A ``connmon.deadletter`` value (the job's decoder builds the same in Spark SQL)."""
    return {
        "schema": SCHEMA_VERSION,
        "reason": reason,
        "detail": detail,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "kafka_timestamp": kafka_timestamp,
        "raw": None if raw is None else base64.b64encode(raw[:DEAD_LETTER_RAW_BYTES]).decode(),
        "raw_bytes": 0 if raw is None else len(raw),
        "raw_sha256": None if raw is None else hashlib.sha256(raw).hexdigest(),
        "rejected_at": rejected_at,
    }


# The job's two streaming queries, as status records, metrics and checkpoints name them: the
# ingest query reads the events, the state query holds the series' state and writes findings.
INGEST_QUERY = "ingest"
STATE_QUERY = "state"
# Names earlier versions gave a query in status records; readers take them as today's, so a
# status published before an upgrade and one after it are the same query's.
QUERY_ALIASES = {"aggregates": INGEST_QUERY}


@dataclass
class JobStatus:
    """One micro-batch of one streaming query, as the driver's listener saw it."""

    job_id: str
    query: str
    batch_id: int
    timestamp: str
    batch_duration_s: float
    input_rows_per_s: float
    processed_rows_per_s: float
    num_input_rows: int
    watermark: str | None
    watermark_delay_s: float | None
    dead_letter_total: int
    late_events_total: int
    last_event_time: str | None
    # hosts whose clock is off or whose events arrived late: [{"host", "clock_offset_s",
    # "skewed_events_total", "late_events_total"}], the most skewed first
    hosts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # records the job's own code failed on and set aside as dead letters (reason
    # internal_error, or state_unreadable for a state bucket it could not read), since the job
    # started: each is a bug to report
    internal_errors_total: int = 0
    # records of the query's input not yet read when the batch was planned (None: unknown)
    offsets_behind: int | None = None
    # records of the query's input deleted before it read them, since the job started
    input_lost_total: int = 0
    # The state query's state, as its buckets were last saved (None for the ingest query):
    # series and compressed bytes in all buckets and in the largest one, and series forgotten
    # at the per-bucket limit (state_max_series_per_bucket) since the job started.
    state_series: int | None = None
    state_bytes: int | None = None
    state_bucket_series_max: int | None = None
    state_bucket_bytes_max: int | None = None
    state_series_shed_total: int | None = None

    @property
    def key(self) -> str:
        """The record's key in the compacted topic: one per job and query."""
        return f"{self.job_id}:{self.query}"

    def to_dict(self) -> dict[str, Any]:
        """The record; the state fields only in the state query's."""
        body = dataclasses.asdict(self)
        for name in _STATE_FIELDS:
            if body[name] is None:
                del body[name]
        return {"schema": SCHEMA_VERSION, **body}


_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(JobStatus) if f.name.startswith("state_"))
