"""``connmon agent``: run the agent, or print one scan's events with ``--once --output -``."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from typing import Any

from streaming.agent import config as agent_config
from streaming.errors import ConfigError
from streaming.stopping import StopSignal

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent",
        help="watch Kafka client/broker TCP sockets on this host and produce events",
        description=(
            "Scan TCP sockets (netlink sock_diag, /proc fallback), attribute them to processes and "
            "Kafka brokers, and produce socket-state events. Settings: --config file, then "
            "CONNMON_AGENT_* environment variables, then these flags."
        ),
    )
    p.add_argument("--config", help="YAML or TOML config file")
    p.add_argument(
        "--bootstrap-servers", help="Kafka cluster receiving the events (producer bootstrap)"
    )
    p.add_argument(
        "--cluster-bootstrap",
        action="append",
        metavar="[NAME=]HOST:PORT,...",
        help="a monitored cluster's bootstrap servers (repeatable)",
    )
    p.add_argument("--once", action="store_true", help="one scan, print its events, exit")
    p.add_argument("--output", metavar="-|FILE", help="write JSON lines here instead of Kafka")
    p.add_argument("--interval", type=float, dest="scan_interval_s", help="scan interval (s)")
    p.add_argument("--summary-interval", type=float, dest="summary_interval_s", help="seconds")
    p.add_argument("--topic", dest="events_topic", help="events topic (default connmon.events)")
    p.add_argument(
        "--check-topics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="at start, check the events topic exists with cleanup.policy delete (default on)",
    )
    p.add_argument("--metrics-address", help="HOST:PORT for /metrics ('' disables)")
    p.add_argument("--tls-cert-file", help="serve /metrics over https with this certificate")
    p.add_argument("--tls-key-file", help="the certificate's private key")
    p.add_argument("--basic-auth-user", help="require basic auth on /metrics as this user")
    p.add_argument("--basic-auth-password-file", help="file holding that user's password")
    p.add_argument("--collector", choices=("auto", "netlink", "proc"))
    p.add_argument("--ebpf", choices=("auto", "on", "off"))
    p.add_argument(
        "--network-namespaces",
        choices=agent_config.NETWORK_NAMESPACES,
        help="scan every network namespace on the host (all, default) or only the agent's (own)",
    )
    p.add_argument(
        "--kubernetes-api",
        choices=("auto", "on", "off"),
        help="pod names and labels from the Kubernetes API server (default auto: in a pod)",
    )
    p.add_argument("--host", help="host name in events (default: this host's name)")
    p.add_argument("--queue-size", type=int, help="bounded local event queue (default 10000)")
    p.add_argument("--proc-root", help=argparse.SUPPRESS)
    p.add_argument("--max-scans", type=int, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {
        k: getattr(args, k, None)
        for k in (
            "scan_interval_s",
            "summary_interval_s",
            "events_topic",
            "check_topics",
            "metrics_address",
            "tls_cert_file",
            "tls_key_file",
            "basic_auth_user",
            "basic_auth_password_file",
            "collector",
            "ebpf",
            "network_namespaces",
            "host",
            "queue_size",
            "proc_root",
            "cluster_bootstrap",
        )
    }
    if args.bootstrap_servers:
        flags["kafka"] = {"bootstrap.servers": args.bootstrap_servers}
    if getattr(args, "kubernetes_api", None):
        flags["kubernetes"] = {"api": args.kubernetes_api}
    return flags


def check_events_topic(cfg: agent_config.AgentConfig) -> None:
    """A missing events topic or one with the wrong cleanup.policy stops the agent at start;
    a cluster that does not answer only gets a warning: the agent buffers and retries."""
    from streaming.topics.admin import check_at_start

    check_at_start(
        "agent", cfg.kafka, {cfg.events_topic: "events"}, timeout_s=cfg.metadata_timeout_s
    )


def run(args: argparse.Namespace) -> int:
    """Scan until SIGTERM/SIGINT (or ``--max-scans``), then flush what is queued (up to
    ``flush_timeout_s``), log one line and exit 0."""
    from streaming.agent.kubeapi import START_WAIT_S
    from streaming.agent.metrics import AgentMetrics
    from streaming.agent.producer import KafkaSink, StreamSink
    from streaming.agent.runner import Agent, make_ebpf, make_pod_watcher, make_refresher

    stop = StopSignal("agent").install()  # a signal during the start is acted on after it
    cfg = agent_config.load(args.config, _flags(args))
    metrics = AgentMetrics()
    pods = make_pod_watcher(cfg, metrics)
    if args.output:
        stream = sys.stdout if args.output == "-" else open(args.output, "a")  # noqa: SIM115
        sink: Any = StreamSink(stream, metrics)
    else:
        if not cfg.bootstrap_servers:
            raise ConfigError("bootstrap-servers: needed to produce events (or use --output)")
        if cfg.check_topics:
            check_events_topic(cfg)
        sink = KafkaSink(cfg.events_topic, cfg.host, cfg.kafka, metrics, cfg.queue_size)
    refresher = make_refresher(cfg, metrics)
    # Learn brokers before the first scan, so the first events carry broker ids.
    refresher.refresh_due(timeout_s=cfg.metadata_timeout_s)
    if pods is not None:
        # The first scan names pods (and applies label rules) from the API's list if it comes
        # in time; processes read before it are named again once it is in.
        pods.start().wait_synced(START_WAIT_S)
    collector = None if args.once else make_ebpf(cfg, metrics)
    agent = Agent(cfg, sink, metrics, refresher, pod_source=pods, ebpf_collector=collector)
    agent.stop_event = stop.event
    if args.once:
        agent.scan(force_summary=True)
        sink.close(cfg.flush_timeout_s)
        if pods is not None:
            pods.stop()
        return 0
    if cfg.metrics_address:
        try:
            metrics.serve(cfg.metrics_address, cfg.metrics_security)
        except OSError as exc:
            msg = f"metrics_address: cannot listen on {cfg.metrics_address}: {exc}"
            raise ConfigError(msg) from None
        log.info("serving %s://%s/metrics", cfg.metrics_security.scheme, cfg.metrics_address)
    refresher.start()

    # Each scan allocates a record per socket; with the default gen-0 threshold (700) the
    # cyclic collector would run dozens of times per scan over the long-lived tracked sockets.
    gc.set_threshold(50_000, 20, 20)
    log.info(
        "agent %s: %d cluster(s), collector %s%s, scanning every %.1fs",
        agent.events.agent_id,
        len(cfg.clusters),
        agent.collector.name,
        " + ebpf" if collector is not None else "",
        cfg.scan_interval_s,
    )
    try:
        agent.run(max_scans=args.max_scans)
    finally:
        refresher.stop()
        if pods is not None:
            pods.stop()
        if collector is not None:
            collector.stop()
        left = sink.close(cfg.flush_timeout_s)
    undelivered = f"{left} event(s) not delivered" if left else ""
    if stop.requested:
        stop.log_stopped(undelivered)
    elif left:
        log.warning("%s at shutdown", undelivered)
    return 0
