"""``connmon job`` (the streaming job) and ``connmon replay`` (the same over recorded files)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from streaming.errors import ConfigError
from streaming.job.settings import (
    JobSettings,
    detector_config,
    event_bound,
    from_sources,
    load_file,
)
from streaming.options import env_settings, parse_pairs
from streaming.stopping import StopSignal

log = logging.getLogger(__name__)

# Within systemd's default TimeoutStopSec (90 s) and the job pod's grace period (60 s), with time
# left to stop Spark.
STOP_TIMEOUT_S = 30.0


def register(subparsers: Any) -> None:
    job = subparsers.add_parser(
        "job",
        help="run the Spark Structured Streaming job (events -> aggregates and findings)",
        description="Read connmon.events with Spark's kafka source, window per client x broker, "
        "run the detectors, write aggregates, findings, dead letters and job status to Kafka.",
    )
    job.add_argument("--config", help="YAML/JSON file with job, detectors, kafka, producer, spark")
    job.add_argument("--master", help="Spark master (default local[*]; spark://host:port too)")
    job.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    job.add_argument("--checkpoint", help="checkpoint folder (required unless master is local)")
    job.add_argument(
        "--migrate-from",
        metavar="OLD",
        help="start a new --checkpoint with the state of the stopped job on OLD (other "
        "--shuffle-partitions or --state-buckets; another window resolves OLD's findings "
        "instead); ignored once the new one exists",
    )
    job.add_argument("--trigger", help="micro-batch interval, e.g. 5s (default 5s)")
    job.add_argument("--max-offsets-per-trigger", type=int, help="cap on events per micro-batch")
    job.add_argument("--starting-offsets", help="earliest, latest (default) or JSON offsets")
    job.add_argument(
        "--fail-on-data-loss", choices=("true", "false"), help="Spark's failOnDataLoss"
    )
    job.add_argument("--events-topic")
    job.add_argument("--aggregates-topic")
    job.add_argument("--findings-topic")
    job.add_argument("--deadletter-topic")
    job.add_argument("--status-topic")
    job.add_argument("--partials-topic", help="internal topic between the job's two queries")
    job.add_argument(
        "--partials-max-offsets-per-trigger",
        type=int,
        help="cap on partials records per state batch (default: 8 ingest batches' worth)",
    )
    job.add_argument("--job-id")
    job.add_argument(
        "--check-topics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="at start, check every topic exists with the right cleanup.policy (default on)",
    )
    job.add_argument(
        "--skip-offsets",
        metavar="PARTITION:FIRST[-LAST],...",
        help="events records to set aside unread, as dead letters with reason 'skipped' "
        "(a record the job cannot get past: the failing batch's log line names its offsets)",
    )
    job.add_argument(
        "--max-event-age",
        dest="max_event_age_s",
        type=_event_bound("--max-event-age"),
        metavar="DURATION",
        help="events older than this are dead letters, e.g. 1d, 24h, 90m, 30s, plain seconds; "
        "'off' (default 24h)",
    )
    job.add_argument(
        "--max-event-future",
        dest="max_event_future_s",
        type=_event_bound("--max-event-future"),
        metavar="DURATION",
        help="events further ahead than this are dead letters, e.g. 5m; 'off' (default 5m)",
    )
    job.add_argument("--shuffle-partitions", type=int)
    job.add_argument(
        "--state-buckets",
        type=int,
        help="state-store keys the series are spread over (fixed per checkpoint)",
    )
    job.add_argument(
        "--state-max-series-per-bucket",
        type=int,
        help="most series a state bucket keeps; the least recently seen healthy ones go first",
    )
    _common(job)
    job.add_argument(
        "--kafka-option",
        action="append",
        metavar="NAME=VALUE",
        help="Kafka consumer/producer option for Spark, without 'kafka.' (repeatable)",
    )
    job.add_argument(
        "--producer-option",
        action="append",
        metavar="NAME=VALUE",
        help="librdkafka option for the driver's producer (repeatable)",
    )
    job.add_argument("--spark-conf", action="append", metavar="NAME=VALUE")
    job.add_argument(
        "--run-for", type=float, help="stop after this many seconds (benchmarks, demos)"
    )
    job.add_argument(
        "--stop-timeout",
        type=float,
        default=STOP_TIMEOUT_S,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, wait this long for running micro-batches to finish before "
        f"abandoning them; they run again on restart (default {STOP_TIMEOUT_S:.0f})",
    )
    job.add_argument(
        "--describe",
        action="store_true",
        help="print the job's topology for these settings (queries, sources, state, sinks, "
        "topics and checkpoint paths) and exit without starting it",
    )
    job.set_defaults(func=run_job)

    rp = subparsers.add_parser(
        "replay",
        help="run the job's transformations over JSON-lines event files and print findings",
    )
    rp.add_argument("--events", required=True, help="JSON-lines file, folder or glob")
    rp.add_argument("--findings", required=True, help="output JSON-lines file of findings")
    rp.add_argument("--aggregates", help="also write the aggregates (JSON lines)")
    rp.add_argument("--deadletter", help="also write the rejected events (JSON lines)")
    rp.add_argument("--config", help="YAML/JSON file; its detectors section is used")
    rp.add_argument("--master", default="local[2]")
    _common(rp)
    rp.set_defaults(func=run_replay)


def _event_bound(flag: str) -> Callable[[str], float | str]:
    """The argparse type of an event-time bound ``flag``: seconds, or ``off``."""

    def convert(text: str) -> float | str:
        try:
            seconds = event_bound(flag, text)
        except ConfigError as exc:  # argparse puts the flag in front of the reason
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None
        return "off" if seconds is None else seconds

    return convert


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        dest="detector_set",
        help="override a detector threshold, e.g. close_wait_grace_s=5 (repeatable)",
    )


_JOB_FIELDS = (
    "master",
    "bootstrap_servers",
    "checkpoint",
    "migrate_from",
    "trigger",
    "max_offsets_per_trigger",
    "starting_offsets",
    "fail_on_data_loss",
    "events_topic",
    "aggregates_topic",
    "findings_topic",
    "deadletter_topic",
    "status_topic",
    "partials_topic",
    "partials_max_offsets_per_trigger",
    "job_id",
    "check_topics",
    "max_event_age_s",
    "max_event_future_s",
    "skip_offsets",
    "shuffle_partitions",
    "state_buckets",
    "state_max_series_per_bucket",
)


def settings_from_args(args: argparse.Namespace) -> JobSettings:
    file = load_file(args.config) if args.config else {}
    cli = {name: getattr(args, name, None) for name in _JOB_FIELDS}
    file = dict(file)
    for section, attr in (
        ("kafka", "kafka_option"),
        ("producer", "producer_option"),
        ("spark", "spark_conf"),
    ):
        extra = parse_pairs(attr.replace("_", "-"), getattr(args, attr, None))
        env = env_settings(os.environ, f"CONNMON_JOB_{section.upper()}_")
        file[section] = {**(file.get(section) or {}), **env, **extra}
    overrides = parse_pairs("set", args.detector_set)
    return from_sources(file, cli, overrides)


def _session(s: JobSettings, app: str) -> Any:
    from streaming.job.session import job_session

    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = {"spark.sql.shuffle.partitions": str(s.shuffle_partitions), **s.spark_conf}
    return job_session(app, s.master, conf)


def check_topics(s: JobSettings) -> None:
    """A missing topic or a wrong cleanup.policy stops the job before Spark starts; a cluster
    that does not answer only gets a warning (the job's own clients then wait or fail as
    before). The admin client uses the ``producer`` settings, as the driver's producer does."""
    from streaming.topics.admin import check_at_start

    required = {
        s.events_topic: "events",
        s.aggregates_topic: "aggregates",
        s.findings_topic: "findings",
        s.deadletter_topic: "deadletter",
        s.status_topic: "job_status",
        s.partials_topic: "partials",
    }
    check_at_start(
        "job",
        {**s.producer, "bootstrap.servers": s.bootstrap_servers},
        required,
        skip_hint="job.check_topics: false or --no-check-topics skips this check",
        setting="producer",
    )


def run_job(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT, ``--run-for`` or a failed query. Then stop each query once its
    running micro-batch is committed (one still running after ``--stop-timeout`` is abandoned
    and runs again on restart), stop Spark and its JVM; on a signal, log one line; exit 0."""
    if getattr(args, "describe", False):
        from streaming.job.topology import describe

        sys.stdout.write(describe(settings_from_args(args)))
        return 0
    stop = StopSignal("job").install()  # a signal during Spark's start is acted on after it
    s = settings_from_args(args)
    if s.check_topics:
        check_topics(s)
    from streaming.job.pipeline import start_job
    from streaming.job.session import stop_session

    spark = _session(s, s.job_id)
    stop.install()  # the SparkContext has just put in its own SIGINT handler
    try:
        job = start_job(spark, s)
    except BaseException:
        stop_session(spark)
        raise
    deadline = time.monotonic() + args.run_for if args.run_for else None
    log.info("job %s running on %s; findings -> %s", s.job_id, s.master, s.findings_topic)
    try:
        while not stop.wait(0.5):
            if deadline is not None and time.monotonic() >= deadline:
                break
            for q in job.queries:
                if q.exception() is not None:
                    print(failure_line(spark, s, q.name, q.exception()), file=sys.stderr)
                    return 1
    finally:
        try:
            between = job.stop(args.stop_timeout)
        finally:
            stop_session(spark)
    stop.log_stopped("" if between else "a running batch was abandoned, it runs again on restart")
    return 0


def failure_line(spark: Any, s: JobSettings, query: str, exc: Any) -> str:
    """One line for a query that stopped: its batch, for the ingest query the events records
    it was reading and how to set them aside, and the error's first line."""
    from streaming.job.checkpoint import INGEST_QUERY, uncommitted_offsets

    where = ""
    try:
        pending = uncommitted_offsets(spark, s.checkpoint, query) if s.checkpoint else None
    except Exception:  # the checkpoint cannot be read: say what is known
        pending = None
    if pending is not None:
        batch, ranges = pending
        where = f" in batch {batch}"
        events = [r for r in ranges if r[0] == s.events_topic and r[2] is not None]
        if query == INGEST_QUERY and events:
            skip = ",".join(f"{p}:{a}-{b}" for _t, p, a, b in events)
            where += f" (events offsets {skip}; to set them aside: --skip-offsets {skip})"
    return f"connmon job: query {query} failed{where}: {error_summary(str(exc))}"


_RAISED = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b.*:\s*\S")


def error_summary(text: str) -> str:
    """The line of a Spark error that says why: the last ``SomeError: message`` line (where a
    Python or Java stack trace ends), else the first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    raised = [line for line in lines if _RAISED.match(line)]
    return (raised[-1] if raised else lines[0])[:400]


def run_replay(args: argparse.Namespace) -> int:
    from streaming.detectors.config import DetectorConfig

    file = load_file(args.config) if args.config else {}
    cfg = detector_config(DetectorConfig(), file.get("detectors") or {}, "detectors")
    cfg = detector_config(cfg, parse_pairs("set", args.detector_set), "set")
    import glob as _glob
    from pathlib import Path

    if not Path(args.events).exists() and not _glob.glob(args.events):
        raise ConfigError(f"events: no such file or folder {args.events}")
    s = JobSettings(master=args.master, detectors=cfg).validate()
    from streaming.job.pipeline import replay, write_jsonl
    from streaming.job.session import stop_session

    spark = _session(s, "connmon-replay")
    try:
        result = replay(spark, args.events, cfg)
    finally:
        stop_session(spark)
    write_jsonl(args.findings, result.findings, echo=print)
    if args.aggregates:
        write_jsonl(args.aggregates, result.aggregates, echo=None)
    if args.deadletter:
        write_jsonl(args.deadletter, result.dead_letters, echo=None)
    print(
        f"connmon replay: {len(result.findings)} finding record(s), "
        f"{len(result.aggregates)} aggregate(s), {len(result.dead_letters)} rejected event(s)",
        file=sys.stderr,
    )
    return 0
