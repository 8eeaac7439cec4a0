"""Job settings: defaults, a config file (YAML or JSON) and command-line overrides, validated at
start so a wrong setting fails with its name (``streaming.cli.ConfigError``).

Config file shape::

    job:        {bootstrap_servers: ..., trigger: 5s, max_offsets_per_trigger: 200000, ...}
    detectors:  {close_wait_grace_s: 5, idle_churn_window_s: 120, ...}
    kafka:      {security.protocol: SASL_SSL, ...}      # Spark source options, without "kafka."
    producer:   {security.protocol: SASL_SSL, ...}      # the driver's librdkafka producer

Both also come from the environment, so a Secret can hold the credentials:
``CONNMON_JOB_KAFKA_SASL_JAAS_CONFIG`` -> ``kafka: {sasl.jaas.config: ...}``,
``CONNMON_JOB_PRODUCER_SASL_PASSWORD`` -> ``producer: {sasl.password: ...}``; the file's values
give way to them, and ``--kafka-option``/``--producer-option`` to neither.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.options import parse_bool
from streaming.topics.spec import DEFAULT_NAMES as TOPIC_NAMES

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
# Event-time bounds: each setting's command-line flag; ``off`` (also none, null, false) disables.
EVENT_BOUND_FLAGS = {
    "max_event_age_s": "--max-event-age",
    "max_event_future_s": "--max-event-future",
}
_OFF = ("off", "none", "null", "false")
# Batch caps, in records per micro-batch: the events source's and the partials source's.
_BATCH_CAPS = ("max_offsets_per_trigger", "partials_max_offsets_per_trigger")


@dataclass
class JobSettings:
    """Everything ``connmon job`` needs besides the detector thresholds."""

    bootstrap_servers: str = "127.0.0.1:9092"
    events_topic: str = TOPIC_NAMES["events"]
    aggregates_topic: str = TOPIC_NAMES["aggregates"]
    findings_topic: str = TOPIC_NAMES["findings"]
    deadletter_topic: str = TOPIC_NAMES["deadletter"]
    status_topic: str = TOPIC_NAMES["job_status"]
    # Internal: partial window rows from the ingest query to the state query, keyed by bucket.
    partials_topic: str = TOPIC_NAMES["partials"]
    # Cap on partials records per state batch (None: eight ingest batches' worth).
    partials_max_offsets_per_trigger: int | None = None
    job_id: str = "connmon-job"
    # At start, check that every topic exists with the cleanup.policy its data flow needs.
    check_topics: bool = True
    master: str = "local[*]"
    checkpoint: str | None = None
    # A checkpoint whose state a new checkpoint starts with (``migrate``).
    migrate_from: str | None = None
    trigger: str = "5s"
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "latest"
    fail_on_data_loss: bool = True
    max_event_age_s: float | None = 86400.0
    max_event_future_s: float | None = 300.0
    # Events records to set aside unread: "partition:first[-last],..." of the events topic.
    skip_offsets: str = ""
    shuffle_partitions: int = 4
    # Series are spread over this many state buckets; fixed for the life of a checkpoint.
    state_buckets: int = 256
    # Most series one bucket keeps; beyond it the ones seen longest ago without a firing
    # finding are forgotten (``buckets.Bucket.shed``), counted in the job status.
    state_max_series_per_bucket: int = 20_000
    kafka: dict[str, str] = field(default_factory=dict)
    producer: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    detectors: DetectorConfig = field(default_factory=DetectorConfig)

    @property
    def trigger_s(self) -> float:
        return parse_duration("trigger", self.trigger)

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def skip(self) -> tuple[tuple[int, int, int], ...]:
        """``skip_offsets`` as (partition, first offset, last offset) ranges."""
        return parse_offset_ranges("skip-offsets", self.skip_offsets)

    def validate(self) -> JobSettings:
        """Check every setting; raise ConfigError naming the first wrong one."""
        if not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap-servers: empty")
        for name in (
            "events_topic",
            "aggregates_topic",
            "findings_topic",
            "deadletter_topic",
            "partials_topic",
        ):
            if not getattr(self, name):
                raise ConfigError(f"{name.replace('_', '-')}: empty topic name")
        if self.trigger_s <= 0:
            raise ConfigError("trigger: must be a positive duration such as 5s")
        for name in _BATCH_CAPS:
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"{name.replace('_', '-')}: must be at least 1")
        so = self.starting_offsets.strip()
        if so not in ("earliest", "latest") and not so.startswith("{"):
            raise ConfigError("starting-offsets: earliest, latest or a JSON object of offsets")
        if so.startswith("{"):
            try:
                json.loads(so)
            except ValueError as exc:
                raise ConfigError(f"starting-offsets: not valid JSON ({exc})") from exc
        if not self.local and not self.checkpoint:
            raise ConfigError(
                f"checkpoint: required when master is {self.master!r} (not local[...]); "
                "pass --checkpoint DIR on storage every restart can reach"
            )
        if self.migrate_from is not None:
            if not self.checkpoint:
                raise ConfigError("migrate-from: needs --checkpoint, the new checkpoint")
            if self.migrate_from.rstrip("/") == self.checkpoint.rstrip("/"):
                raise ConfigError("migrate-from: the same folder as --checkpoint; give a new one")
        if self.shuffle_partitions < 1:
            raise ConfigError("shuffle-partitions: must be at least 1")
        if not 1 <= self.state_buckets <= 1_000_000:
            raise ConfigError("state-buckets: must be between 1 and 1000000")
        if self.state_max_series_per_bucket < 1:
            raise ConfigError("state-max-series-per-bucket: must be at least 1")
        self.skip  # noqa: B018 - parses, or raises naming the setting
        for name in EVENT_BOUND_FLAGS:
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ConfigError(f"{name}: must be a positive number of seconds, or None (off)")
        for key in self.kafka:
            if key.startswith("kafka."):
                raise ConfigError(f"kafka.{key}: give Kafka options without the 'kafka.' prefix")
            if key in ("bootstrap.servers", "group.id", "key.deserializer", "value.deserializer"):
                raise ConfigError(f"kafka.{key}: set by the job, not an option")
        d = self.detectors
        if d.window_s <= 0:
            raise ConfigError("detectors.window_s: must be positive")
        if d.watermark_s < 0:
            raise ConfigError("detectors.watermark_s: must not be negative")
        if d.idle_churn_window_s < d.window_s:
            raise ConfigError("detectors.idle_churn_window_s: shorter than detectors.window_s")
        if d.finding_heartbeat_s <= 0:
            raise ConfigError("detectors.finding_heartbeat_s: must be positive")
        for name in ("fire_after_windows", "resolve_after_windows"):
            if not 1 <= getattr(d, name) <= 60:
                raise ConfigError(f"detectors.{name}: must be between 1 and 60 windows")
        return self


_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_offset_ranges(name: str, text: str | None) -> tuple[tuple[int, int, int], ...]:
    """``0:1200-1250,3:77`` -> ((0, 1200, 1250), (3, 77, 77)); empty or None -> ()."""
    out = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        m = _RANGE.match(item)
        if not m:
            raise ConfigError(
                f"{name}: {item.strip()!r} is not PARTITION:OFFSET or PARTITION:FIRST-LAST"
            )
        first = int(m.group(2))
        last = int(m.group(3)) if m.group(3) is not None else first
        if last < first:
            raise ConfigError(f"{name}: {item.strip()!r} ends before it starts")
        out.append((int(m.group(1)), first, last))
    return tuple(out)


def parse_duration(name: str, text: str | float) -> float:
    """``5s``, ``500ms``, ``2m``, ``1h``, ``1d`` or plain seconds -> seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _DURATION.match(str(text))
    if not m:
        raise ConfigError(f"{name}: {text!r} is not a duration like 5s, 500ms, 2m, 1h or 1d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def event_bound(name: str, value: str | float | bool) -> float | None:
    """An event-time bound: a positive duration (``1d``, ``24h``, ``90m``, ``30s``, plain
    seconds) -> seconds; ``off`` (also none, null, false: YAML reads a bare ``off`` as false)
    -> None. A ConfigError names ``name``."""
    if value is False or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    if value is True:
        raise ConfigError(f"{name}: true is not a duration; give one such as 24h, or off")
    seconds = parse_duration(name, value)
    if seconds <= 0:
        raise ConfigError(f"{name}: must be a positive duration such as 24h, or off")
    return seconds


def detector_config(base: DetectorConfig, changes: dict[str, Any], origin: str) -> DetectorConfig:
    """``base`` with thresholds changed; values are converted to the field's type."""
    types = {f.name: f.type for f in dataclasses.fields(DetectorConfig)}
    typed: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in types:
            raise ConfigError(f"{origin}.{key}: unknown detector setting")
        if types[key] in (bool, "bool"):
            typed[key] = _flag(f"{origin}.{key}", value)
            continue
        kind = int if types[key] in (int, "int") else float
        try:
            typed[key] = kind(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{origin}.{key}: {value!r} is not a number") from exc
    return base.replace(**typed)


def _flag(name: str, value: Any) -> bool:
    try:
        return parse_bool(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not true or false") from None


def load_file(path: str) -> dict[str, Any]:
    """A YAML or JSON config file as a dict with the sections ``job``, ``detectors``, ..."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config: no such file {path}")
    text = p.read_text()
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError or ValueError, both mean unreadable
        raise ConfigError(f"config: cannot parse {path}: {exc}") from exc
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} must hold a mapping")
    unknown = sorted(set(data) - {"job", "detectors", "kafka", "producer", "spark"})
    if unknown:
        raise ConfigError(f"config: unknown section(s) {', '.join(unknown)} in {path}")
    return data


def from_sources(
    file: dict[str, Any] | None = None,
    cli: dict[str, Any] | None = None,
    detector_overrides: dict[str, str] | None = None,
) -> JobSettings:
    """Defaults <- config file <- command line; validated."""
    file = file or {}
    s = JobSettings()
    names = {f.name for f in dataclasses.fields(JobSettings)} - {
        "kafka",
        "producer",
        "spark_conf",
        "detectors",
    }
    for origin, values in (("job", file.get("job") or {}), ("cli", cli or {})):
        for key, value in values.items():
            attr = key.replace("-", "_")
            if attr not in names:
                raise ConfigError(f"{origin}.{key}: unknown job setting")
            if value is None:
                continue
            if attr in EVENT_BOUND_FLAGS:
                # Named as the person gave it: the flag, or the config file's key.
                where = EVENT_BOUND_FLAGS[attr] if origin == "cli" else f"{origin}.{key}"
                value = event_bound(where, value)
            setattr(s, attr, value)
    s.kafka = {str(k): str(v) for k, v in (file.get("kafka") or {}).items()}
    s.producer = {str(k): str(v) for k, v in (file.get("producer") or {}).items()}
    s.spark_conf = {str(k): str(v) for k, v in (file.get("spark") or {}).items()}
    s.detectors = detector_config(DetectorConfig(), file.get("detectors") or {}, "detectors")
    s.detectors = detector_config(s.detectors, detector_overrides or {}, "set")
    _coerce(s)
    return s.validate()


def _coerce(s: JobSettings) -> None:
    """Types of values that came from a file or the command line as strings."""
    for name in _BATCH_CAPS:
        try:
            if getattr(s, name) is not None:
                setattr(s, name, int(getattr(s, name)))
        except ValueError as exc:
            raise ConfigError(f"{name.replace('_', '-')}: not an integer") from exc
    if isinstance(s.fail_on_data_loss, str):
        if s.fail_on_data_loss.lower() not in ("true", "false"):
            raise ConfigError("fail-on-data-loss: true or false")
        s.fail_on_data_loss = s.fail_on_data_loss.lower() == "true"
    if isinstance(s.check_topics, str):
        if s.check_topics.lower() not in ("true", "false"):
            raise ConfigError("check-topics: true or false")
        s.check_topics = s.check_topics.lower() == "true"
    if not isinstance(s.check_topics, bool):
        raise ConfigError(f"check-topics: true or false, not {s.check_topics!r}")
    for name in ("shuffle_partitions", "state_buckets", "state_max_series_per_bucket"):
        try:
            setattr(s, name, int(getattr(s, name)))
        except ValueError:
            raise ConfigError(f"{name.replace('_', '-')}: not an integer") from None
    if isinstance(s.skip_offsets, list | tuple):
        s.skip_offsets = ",".join(str(x) for x in s.skip_offsets)
    s.skip_offsets = "" if s.skip_offsets is None else str(s.skip_offsets)
    s.trigger = str(s.trigger)
    parse_duration("trigger", s.trigger)
