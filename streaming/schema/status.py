"""``connmon.job-status`` and ``connmon.deadletter`` values, schema 1 (docs/topics.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1
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
)


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

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, **dataclasses.asdict(self)}
