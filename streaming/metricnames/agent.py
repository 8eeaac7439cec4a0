"""The agent's self-metrics (served on its own /metrics). Labels are bounded: states, sides,
event kinds, drop reasons, collector names, configured cluster names, API error reasons and
the reasons eBPF is not used."""

from __future__ import annotations

from streaming.metricnames.base import Metric

SCAN_DURATION = Metric(
    "connmon_agent_scan_duration_seconds",
    "histogram",
    "Time of one scan: socket dump, attribution, lifecycle tracking and event construction.",
)
SOCKETS = Metric(
    "connmon_agent_sockets",
    "gauge",
    "Kafka sockets seen in the last scan by TCP state and side.",
    ("state", "side"),
)
EVENTS_PRODUCED = Metric(
    "connmon_agent_events_produced_total",
    "counter",
    "Events delivered to Kafka (or written to the output) by kind.",
    ("kind",),
)
EVENTS_DROPPED = Metric(
    "connmon_agent_events_dropped_total",
    "counter",
    "Events lost by reason: queue_full (local queue overflow), too_large (over the event "
    "size limit), delivery_timeout, "
    "delivery_error, encode_error, producer_fatal, shutdown (undelivered at exit).",
    ("reason",),
)
DELIVERY_ERRORS = Metric(
    "connmon_agent_delivery_errors_total",
    "counter",
    "Delivery reports with an error from the Kafka producer.",
)
COLLECTOR_INFO = Metric(
    "connmon_agent_collector_info",
    "gauge",
    "1 for each collector in use: the scans' (netlink or proc) and ebpf while the kernel "
    "counts every connection's open and close.",
    ("collector",),
)
EBPF_DISABLED = Metric(
    "connmon_agent_ebpf_disabled_info",
    "gauge",
    "1 when the agent runs without its eBPF collector from the start, with the reason: off "
    "(ebpf: off, or collector: proc), no_bpftrace (not installed), not_root (bpftrace runs only "
    "as uid 0), no_capability (neither CAP_SYS_ADMIN nor CAP_BPF with CAP_PERFMON), no_btf (no "
    "kernel BTF where bpftrace looks), no_tracefs (tracefs not mounted or not readable), "
    "no_tracepoint (kernel too old). The agent's log names the details.",
    ("reason",),
)
EBPF_LOST = Metric(
    "connmon_agent_ebpf_events_lost_total",
    "counter",
    "State changes the eBPF collector missed: output the kernel's perf buffer dropped before "
    "it was read, and tracepoint runs the kernel skipped because a BPF program was already "
    "running on that CPU.",
)
LAST_SCAN = Metric(
    "connmon_agent_last_scan_timestamp_seconds",
    "gauge",
    "Unix time of the last successful scan.",
)
LAST_METADATA_REFRESH = Metric(
    "connmon_agent_last_metadata_refresh_timestamp_seconds",
    "gauge",
    "Unix time of the last successful broker metadata refresh per configured cluster.",
    ("cluster",),
)
QUEUE_LENGTH = Metric(
    "connmon_agent_queue_events",
    "gauge",
    "Events waiting in the agent's local queue and the producer's buffer.",
)
UP = Metric("connmon_agent_up", "gauge", "1 while the agent's scan loop runs.")
NETWORK_NAMESPACES = Metric(
    "connmon_agent_network_namespaces",
    "gauge",
    "Network namespaces dumped in the last scan (the host's and every pod's with a process).",
)
UNREADABLE_PROCESSES = Metric(
    "connmon_agent_unreadable_processes",
    "gauge",
    "Processes whose network namespace the agent could not read in the last scan (another "
    "user's, without CAP_SYS_PTRACE): sockets only they hold are not seen.",
)
UNREADABLE_FD_TABLES = Metric(
    "connmon_agent_unreadable_fd_tables",
    "gauge",
    "Processes whose open files (/proc/<pid>/fd) the agent could not read when it last looked "
    "(another user's, when the agent lacks CAP_SYS_PTRACE or CAP_DAC_READ_SEARCH): their "
    "sockets are reported without a process (app unknown).",
)
NAMESPACE_ERRORS = Metric(
    "connmon_agent_namespace_errors_total",
    "counter",
    "Failures per network namespace by reason: enter (setns refused, the namespace is read "
    "from /proc/<pid>/net/tcp instead), dump (sock_diag failed; retried next scan), proc (the "
    "/proc fallback failed).",
    ("reason",),
)
KUBERNETES_API_ERRORS = Metric(
    "connmon_agent_kubernetes_api_errors_total",
    "counter",
    "Failed requests to the Kubernetes API server's pod list and watch by reason: unauthorized "
    "(401), forbidden (403: the agent's ClusterRole is missing), unreachable (connect, read or "
    "timeout), tls (certificate check), http (another status, or a watch ERROR event), invalid "
    "(a response that does not parse), token (the service account token or CA file "
    "unreadable). Each is retried with backoff; meanwhile pods are named from the node's files.",
    ("reason",),
)
KUBERNETES_PODS = Metric(
    "connmon_agent_kubernetes_pods",
    "gauge",
    "Pods of this node the agent knows from the Kubernetes API server's watch (0 with the API "
    "off or not reached yet).",
)

AGENT_METRICS: tuple[Metric, ...] = (
    SCAN_DURATION,
    SOCKETS,
    EVENTS_PRODUCED,
    EVENTS_DROPPED,
    DELIVERY_ERRORS,
    COLLECTOR_INFO,
    EBPF_DISABLED,
    EBPF_LOST,
    LAST_SCAN,
    LAST_METADATA_REFRESH,
    QUEUE_LENGTH,
    UP,
    NETWORK_NAMESPACES,
    UNREADABLE_PROCESSES,
    UNREADABLE_FD_TABLES,
    NAMESPACE_ERRORS,
    KUBERNETES_API_ERRORS,
    KUBERNETES_PODS,
)
