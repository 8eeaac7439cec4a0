"""``connmon exporter``: consume the job's topics and serve them on /metrics."""

from __future__ import annotations

import argparse
import logging
import os

from confluent_kafka import KafkaException

from streaming.exporter import config as cfg
from streaming.exporter.consumer import TopicReader
from streaming.exporter.http import metrics_app
from streaming.exporter.store import Store
from streaming.options import env_settings
from streaming.stopping import StopSignal
from streaming.webserver import serve_endpoint

KAFKA_ENV_PREFIX = "CONNMON_EXPORTER_KAFKA_"

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "exporter",
        help="serve aggregates, findings and job health to Prometheus",
        description=__doc__,
    )
    p.add_argument("--bootstrap-servers", default=cfg.default_bootstrap())
    p.add_argument("--listen", default=cfg.DEFAULT_LISTEN, help="host:port for /metrics")
    p.add_argument("--aggregates-topic", default=cfg.DEFAULT_TOPICS["aggregates"])
    p.add_argument("--findings-topic", default=cfg.DEFAULT_TOPICS["findings"])
    p.add_argument("--status-topic", default=cfg.DEFAULT_TOPICS["job_status"])
    p.add_argument("--series-limit", type=int, default=20000)
    p.add_argument("--staleness", type=float, default=300.0, help="seconds (window_end age)")
    p.add_argument("--finding-staleness", type=float, default=1800.0, help="seconds")
    p.add_argument(
        "--shards",
        type=int,
        default=1,
        help="exporters that split the series between them (default 1: this one serves all)",
    )
    p.add_argument(
        "--shard-index",
        default="0",
        help="this exporter's share, 0 .. shards-1, or a StatefulSet pod name ending in -<n>",
    )
    p.add_argument("--tls-cert-file")
    p.add_argument("--tls-key-file")
    p.add_argument("--basic-auth-user")
    p.add_argument("--basic-auth-password-file")
    p.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer setting (repeatable), e.g. security.protocol=SSL; "
        f"{KAFKA_ENV_PREFIX}<KEY> variables set them too (SASL_PASSWORD -> sasl.password)",
    )
    p.add_argument(
        "--check-topics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="at start, check the three topics exist and are compacted (default on)",
    )
    p.set_defaults(func=run)


def check_topics(conf: cfg.ExporterConfig) -> None:
    """A missing topic or one that is not compacted stops the exporter at start; a cluster
    that does not answer only gets a warning (the reader waits for it, as before)."""
    from streaming.topics.admin import check_at_start

    required = {conf.topics[role]: role for role in ("aggregates", "findings", "job_status")}
    check_at_start(
        "exporter",
        {**conf.kafka_config, "bootstrap.servers": conf.bootstrap_servers},
        required,
        skip_hint="--no-check-topics skips this check",
        setting="kafka-config",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT, then stop reading and serving, log one line, exit 0."""
    stop = StopSignal("exporter").install()  # a signal during the start is acted on after it
    conf = cfg.build(
        bootstrap_servers=args.bootstrap_servers,
        listen=args.listen,
        aggregates_topic=args.aggregates_topic,
        findings_topic=args.findings_topic,
        status_topic=args.status_topic,
        series_limit=args.series_limit,
        staleness_s=args.staleness,
        finding_staleness_s=args.finding_staleness,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        basic_auth_user=args.basic_auth_user,
        basic_auth_password_file=args.basic_auth_password_file,
        kafka_config=args.kafka_config,
        kafka_env=env_settings(os.environ, KAFKA_ENV_PREFIX),
        check_topics=args.check_topics,
        shards=args.shards,
        shard_index=args.shard_index,
    )
    if conf.check_topics:
        check_topics(conf)
    store = Store(
        conf.series_limit,
        conf.staleness_s,
        conf.finding_staleness_s,
        shard=conf.shard.index,
        shards=conf.shard.count,
    )
    try:
        httpd, _ = serve_endpoint(
            metrics_app(store),
            conf.listen_host,
            conf.listen_port,
            conf.security,
            thread_name="connmon-exporter-http",
        )
    except OSError as exc:
        raise cfg.ConfigError(f"listen: cannot bind {args.listen}: {exc}") from exc
    try:
        reader = TopicReader(
            conf.bootstrap_servers, conf.topics, store, conf.kafka_config, shard=conf.shard
        ).start()
    except KafkaException as exc:
        httpd.shutdown()
        raise cfg.ConfigError(f"kafka-config: {exc}") from exc
    log.info(
        "serving %s://%s:%d/metrics (shard %d of %d)",
        conf.security.scheme,
        conf.listen_host,
        conf.listen_port,
        conf.shard.index,
        conf.shard.count,
    )

    while not stop.wait(5.0):
        if not reader.alive():
            log.error("the Kafka reader stopped; exiting")
            httpd.shutdown()
            return 1
    reader.stop()
    httpd.shutdown()
    stop.log_stopped()
    return 0
