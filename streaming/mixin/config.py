"""The mixin's one config object: selectors, thresholds, ``for`` durations, dashboard settings,
where the runbook is, and the settings of the Kubernetes objects. Detector thresholds come from
``streaming.detectors.config`` so a threshold lives in one place; the alert texts and dashboard
threshold lines quote them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from streaming import __version__
from streaming.detectors.config import DEFAULT as DETECTORS
from streaming.detectors.config import DetectorConfig
from streaming.errors import ConfigError
from streaming.metricnames import AGENT_JOB, EXPORTER_JOB
from streaming.mixin.kubernetes_policy import host_path_problem
from streaming.options import parse_bool

KAFKA_SECURITY = ("sasl_ssl", "ssl", "plaintext")
SEVERITIES = ("critical", "warning", "info")  # each has its own receiver
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


@dataclass(frozen=True)
class MixinConfig:
    """Everything the generated rules and dashboards depend on."""

    detectors: DetectorConfig = DETECTORS

    # Selectors (PromQL label matchers without braces) for the scrape jobs.
    exporter_selector: str = f'job="{EXPORTER_JOB}"'
    agent_selector: str = f'job="{AGENT_JOB}"'

    # `for` durations: how long a condition holds before the alert fires.
    finding_for: str = "2m"  # findings are already debounced by the job's windows
    agent_down_for: str = "5m"
    job_stalled_for: str = "2m"
    job_lagging_for: str = "10m"
    data_stale_for: str = "5m"
    dead_letter_for: str = "10m"
    clock_skew_for: str = "5m"
    cardinality_for: str = "5m"
    exporter_down_for: str = "5m"
    broker_unavailable_for: str = "1m"  # shorter than finding_for: it must inhibit first
    # Longer than a step up can keep fd_exhaustion_rise_window true: a short spike or a
    # process that grew once and stays flat never fires.
    fd_exhaustion_for: str = "15m"

    # Pipeline-health thresholds (seconds unless the name says otherwise).
    agent_heartbeat_stale_s: float = 300.0
    job_stalled_s: float = 300.0
    data_stale_s: float = 600.0
    dead_letter_per_s: float = 0.1
    cardinality_ratio: float = 0.9
    # Client hosts that must see a broker drop or refuse connections before it is unavailable:
    # one host alone is more likely its own network.
    broker_unavailable_hosts: int = 2
    rate_window: str = "5m"
    # ConnMonFdExhaustionPredicted: a process's fd usage ratio, extrapolated along its trend
    # over fd_exhaustion_range (predict_linear), reaches 1 within fd_exhaustion_horizon_s (the
    # detectors' fd_exhaustion_critical_s), and it rose within the last
    # fd_exhaustion_rise_window (above its lowest there): a process that is high but flat is
    # not running out. The rise window must be longer than the slowest leak's steps (a
    # CLOSE_WAIT leak steps at each idle expiry, about every 10 min) and shorter than
    # fd_exhaustion_for.
    fd_exhaustion_range: str = "30m"
    fd_exhaustion_rise_window: str = "15m"
    # How often the fleet roll-ups are evaluated (their group's interval; None: Prometheus'
    # global evaluation_interval). They read every client x broker series, the costliest
    # rules by far, and their inputs change once per window (60 s).
    rollup_interval: str | None = "1m"

    # Dashboards.
    dashboard_refresh: str = "1m"
    dashboard_time_from: str = "now-6h"
    dashboard_uid_prefix: str = "connmon-"
    dashboard_tags: tuple[str, ...] = ("connmon", "kafka")

    # Where the runbook (docs/runbook.md, one section per alert) is published. Every alert's
    # runbook_url annotation is this plus "#<alert name lower-cased>"; set it to the URL where
    # you publish docs/runbook.md (e.g. "https://git.example.com/ops/connmon/blob/main/docs/
    # runbook.md"). It must be absolute: a notification opens it outside any checkout.
    runbook_url_base: str = "https://connmon.example.com/docs/runbook.md"
    # Grafana's URL: every alert's dashboard_url annotation opens the dashboard of its
    # labels (absolute, like the runbook's).
    grafana_url: str = "https://grafana.example.com"

    # Alertmanager (deploy/alertmanager/): how notifications are grouped and repeated, and the
    # webhook each severity goes to. Replace the receivers with your own (any Alertmanager
    # receiver type) when you merge connmon's routes into your configuration.
    alert_group_by: tuple[str, ...] = ("alertname", "cluster", "app")
    alert_group_wait: str = "30s"
    alert_group_interval: str = "5m"
    alert_repeat_interval: str = "4h"
    alert_critical_repeat_interval: str = "1h"
    # Info findings (e.g. duplicate connections) cost file descriptors, not service: they go to
    # a low-urgency receiver (a channel or a ticket queue, never a pager), reminded daily.
    alert_info_repeat_interval: str = "24h"
    alert_webhooks: dict[str, str] = field(
        default_factory=lambda: {
            "critical": "https://alerts.example.com/connmon/critical",
            "warning": "https://alerts.example.com/connmon/warning",
            "info": "https://alerts.example.com/connmon/info",
        }
    )

    # Kubernetes objects (deploy/kubernetes/, explained in deploy/kubernetes/README.md).
    # The agent's and the exporter's namespace: it must admit the agent's privileged pods.
    kubernetes_namespace: str = "connmon"
    # The job's namespace, restricted: its Role creates pods there, and a pod may mount any
    # Secret of its namespace, so it holds nothing but the job.
    job_namespace: str = "connmon-job"
    kubernetes_labels: dict[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/part-of": "connmon"}
    )
    image: str = f"registry.example.com/connmon:{__version__}"
    image_pull_policy: str = "IfNotPresent"
    # The image's user (deploy/container/Containerfile); the agent alone runs as root.
    image_uid: int = 10001
    # Kafka: where events go and the job and exporter read, and the agent's one monitored
    # cluster in the generated config/agent.yaml.
    kafka_bootstrap_servers: str = "kafka-bootstrap.kafka.svc:9093"
    kafka_cluster_name: str = "main"
    # How every component talks to Kafka: "sasl_ssl" (TLS, SASL/SCRAM with the credentials of
    # the Secret connmon-<component>-kafka: username, password, ca.crt), "ssl" (TLS only, the
    # Secret's ca.crt) or "plaintext" (test clusters only).
    kafka_security: str = "sasl_ssl"
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"
    # Egress to Kafka (NetworkPolicy): pods of this namespace ("" for none) and these CIDRs, on
    # these ports. They must cover every broker of every monitored cluster.
    kafka_namespace: str = "kafka"
    kafka_egress_cidrs: tuple[str, ...] = ()
    kafka_ports: tuple[int, ...] = (9093,)
    # Who may scrape the agent and the exporter (NetworkPolicy ingress).
    prometheus_namespace: str = "monitoring"
    prometheus_pod_labels: dict[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/name": "prometheus"}
    )
    # Egress to the API server: the Spark driver's (it creates executor pods), the agent's.
    # Required: the addresses behind the kubernetes Service (its EndpointSlice); none means no
    # egress rule, and the driver cannot start its executors.
    kubernetes_api_cidrs: tuple[str, ...] = ()
    kubernetes_api_ports: tuple[int, ...] = (443, 6443)
    agent_port: int = 9852
    exporter_port: int = 9853
    # /metrics of the agent and the exporter over https, with the certificate of this Secret
    # (tls.crt, tls.key and the CA Prometheus checks it with, ca.crt: cert-manager's keys).
    metrics_tls: bool = True
    metrics_tls_secret: str = "connmon-metrics-tls"
    # The agent enters every network namespace itself (hostPID, /proc/<pid>/ns/net, the node's
    # own through /proc/1/ns/net), so it needs no host network; true puts /metrics on the
    # node's address.
    agent_host_network: bool = False
    # Host folders the agent mounts read-only to name pods (pod uid -> namespace/name) when the
    # API server does not say. /var/lib/kubelet/pods (it holds every pod's Secrets) only with
    # agent_kubernetes_api off.
    agent_host_paths: tuple[str, ...] = ("/var/log/pods",)
    # The host's tracefs for the eBPF collector (bpftrace reads tracepoint formats there; the
    # container's /sys has none). An empty folder where the host mounts no tracefs: the agent
    # then says why it uses scans only.
    agent_tracefs: str | None = "/sys/kernel/tracing"
    # The agent watches its node's pods on the API server (names, and labels for app rules):
    # a token, a ClusterRole with get/list/watch on pods, egress to kubernetes_api_cidrs.
    agent_kubernetes_api: bool = True
    # The agent's AppArmor profile: "Unconfined" (the runtime's default profile hides host
    # processes from the agent's ptrace reads), "RuntimeDefault" or "Localhost/<profile>" (a
    # profile loaded on every node).
    agent_apparmor_profile: str = "Unconfined"
    agent_resources: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        }
    )
    # Exporters splitting the series (a StatefulSet; pod N serves shard N). Size it so each
    # holds at most exporter_series_limit series (benchmarks/exporter has the figures).
    exporter_shards: int = 1
    exporter_resources: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        }
    )
    exporter_series_limit: int = 20000
    # The Spark job: driver pod (spark-submit, client mode) and executor pods.
    job_driver_memory: str = "2g"
    job_driver_resources: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "requests": {"cpu": "1", "memory": "3Gi"},
            "limits": {"memory": "3Gi"},
        }
    )
    job_executor_instances: int = 2
    job_executor_cores: int = 1
    job_executor_memory: str = "2g"
    job_executor_memory_overhead: str = "1g"
    # Checkpoint folder on storage every driver restart reaches: s3a://bucket/path or
    # hdfs://namenode/path. S3: see the s3a settings in deploy/kubernetes/README.md.
    job_checkpoint: str = "s3a://connmon-checkpoints/connmon-job"
    # S3-compatible endpoint ("" for AWS itself); set for MinIO, Ceph and the like.
    job_s3_endpoint: str = ""
    # Egress to the checkpoint storage (NetworkPolicy). Required: none means no egress rule.
    job_checkpoint_cidrs: tuple[str, ...] = ()
    job_checkpoint_ports: tuple[int, ...] = (443,)

    @property
    def job_lag_s(self) -> float:
        """Watermark delay beyond the job's own allowance (watermark + 5 windows) is lag."""
        return self.detectors.watermark_s + 5 * self.detectors.window_s

    @property
    def fd_exhaustion_horizon_s(self) -> float:
        """The alert pages for the deadline at which close_wait_buildup turns critical."""
        return self.detectors.fd_exhaustion_critical_s

    def runbook_url(self, alert: str) -> str:
        """The alert's section of the runbook (GitHub-style anchor: the name lower-cased)."""
        return f"{self.runbook_url_base}#{alert.lower()}"

    def dashboard_url(self, dashboard: str, variables: dict[str, str]) -> str:
        """A dashboard of the mixin with its template variables set (Go templates allowed)."""
        query = "&".join(f"var-{k}={v}" for k, v in variables.items())
        uid = self.dashboard_uid_prefix + dashboard
        return f"{self.grafana_url.rstrip('/')}/d/{uid}" + (f"?{query}" if query else "")

    def validate(self) -> MixinConfig:
        """Raise ``ConfigError`` naming the first setting the generated objects cannot use."""
        urls = {"runbook_url_base": self.runbook_url_base, "grafana_url": self.grafana_url}
        urls |= {f"alert_webhooks.{k}": v for k, v in self.alert_webhooks.items()}
        for name, value in urls.items():
            if not re.match(r"^https?://[^/\s]+", value):
                raise ConfigError(
                    f"{name}: {value!r} is not an absolute http(s) URL; links in notifications "
                    "open outside any checkout"
                )
        missing = sorted(set(SEVERITIES) - set(self.alert_webhooks))
        if missing:
            raise ConfigError(f"alert_webhooks: no receiver for severity {', '.join(missing)}")
        self._validate_kubernetes()
        return self

    def _validate_kubernetes(self) -> None:
        """The settings of deploy/kubernetes/: choices, namespaces, CIDRs, ports, host paths."""
        choices = {
            "kafka_security": (self.kafka_security, KAFKA_SECURITY),
            "kafka_sasl_mechanism": (self.kafka_sasl_mechanism, SASL_MECHANISMS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ConfigError(f"{name}: must be one of {', '.join(allowed)}, not {value!r}")
        for name in ("kubernetes_namespace", "job_namespace"):
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", getattr(self, name)):
                raise ConfigError(f"{name}: {getattr(self, name)!r} is not a namespace name")
        if self.job_namespace == self.kubernetes_namespace:
            raise ConfigError(
                "job_namespace: must differ from kubernetes_namespace, which admits privileged "
                "pods: the job's Role creates pods in its own namespace"
            )
        for name in ("kafka_egress_cidrs", "kubernetes_api_cidrs", "job_checkpoint_cidrs"):
            for cidr in getattr(self, name):
                try:
                    ipaddress.ip_network(cidr)
                except ValueError as exc:
                    raise ConfigError(f"{name}: {cidr!r} is not a CIDR ({exc})") from None
        for name in ("kafka_ports", "kubernetes_api_ports", "job_checkpoint_ports"):
            for port in getattr(self, name):
                if not isinstance(port, int) or not 0 < port < 65536:
                    raise ConfigError(f"{name}: {port!r} is not a port number (1-65535)")
        host_paths = [("agent_host_paths", path) for path in self.agent_host_paths]
        host_paths += [("agent_tracefs", self.agent_tracefs)] if self.agent_tracefs else []
        for name, path in host_paths:
            problem = host_path_problem(path, self.agent_kubernetes_api)
            if problem:
                raise ConfigError(f"{name}: {problem}")
        profile = self.agent_apparmor_profile
        if profile not in ("Unconfined", "RuntimeDefault") and not re.fullmatch(
            r"Localhost/\S+", profile
        ):
            raise ConfigError(
                "agent_apparmor_profile: Unconfined, RuntimeDefault or Localhost/<profile>, "
                f"not {profile!r}"
            )
        if self.metrics_tls and not self.metrics_tls_secret:
            raise ConfigError("metrics_tls_secret: empty, while metrics_tls is on")

    def replace(self, **changes: Any) -> MixinConfig:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown mixin setting(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


def with_settings(base: MixinConfig, pairs: dict[str, str]) -> MixinConfig:
    """``base`` with ``NAME=VALUE`` settings from a command line (a tuple as a comma-separated
    list; ``alert_webhooks.<severity>=URL`` for one receiver), validated."""
    fields = {f.name for f in dataclasses.fields(MixinConfig)}
    changes: dict[str, Any] = {}
    webhooks = dict(base.alert_webhooks)
    for key, value in pairs.items():
        if key.startswith("alert_webhooks."):
            webhooks[key.split(".", 1)[1]] = value
            continue
        current = getattr(base, key, None) if key in fields else None
        try:
            if isinstance(current, bool):
                changes[key] = parse_bool(value)
            elif isinstance(current, int | float):
                changes[key] = type(current)(value)
            elif isinstance(current, str):
                changes[key] = value
            elif isinstance(current, tuple):
                items = [v.strip() for v in value.split(",") if v.strip()]
                # Ports stay numbers (a string port in a NetworkPolicy names a container port).
                kind = type(current[0]) if current and isinstance(current[0], int) else str
                changes[key] = tuple(kind(v) for v in items)
            else:
                raise ConfigError(f"set.{key}: not a mixin setting the command line can set")
        except ValueError:
            raise ConfigError(f"set.{key}: {value!r} is not a {type(current).__name__}") from None
    return dataclasses.replace(base, alert_webhooks=webhooks, **changes).validate()


DEFAULT = MixinConfig()
