"""A local Prometheus on 127.0.0.1 with a generated config (scrape targets + rule files).

The binary comes from Debian's ``prometheus`` package (``streaming.prometheus_bin``).
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.metricnames import AGENT_JOB, EXPORTER_JOB
from streaming.prometheus_bin import PrometheusError, prometheus_bin
from streaming.stack.daemon import DaemonError, Server, start_ready
from streaming.stack.ports import free_port, port_in_use


def render_config(
    scrape_jobs: Mapping[str, Sequence[str]],
    rule_files: Sequence[str | Path],
    scrape_interval_s: float,
    evaluation_interval_s: float,
    alertmanagers: Sequence[str] = (),
) -> str:
    """prometheus.yml as JSON (a YAML subset): one static scrape job per name in
    ``scrape_jobs`` with its targets, alerts sent to ``alertmanagers`` (``host:port``) if
    any."""
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": f"{scrape_interval_s:g}s",
            "evaluation_interval": f"{evaluation_interval_s:g}s",
            "scrape_timeout": f"{min(scrape_interval_s, 10):g}s",
        },
        "rule_files": [str(Path(r).resolve()) for r in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(targets)}]}
            for job, targets in scrape_jobs.items()
        ],
    }
    if alertmanagers:
        config["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]
        }
    return json.dumps(config, indent=2) + "\n"


def connmon_jobs(agents: Sequence[str] = (), exporters: Sequence[str] = ()) -> dict[str, list]:
    """Scrape jobs named as connmon's rules and dashboards select them."""
    return {AGENT_JOB: list(agents), EXPORTER_JOB: list(exporters)}


@dataclass
class PrometheusServer(Server):
    """One Prometheus process; ``start()`` returns when it is ready."""

    # Job name -> targets; connmon_jobs() names them as the rules select them.
    scrape_jobs: Mapping[str, Sequence[str]] = field(default_factory=dict)
    rule_files: Sequence[str | Path] = ()
    scrape_interval_s: float = 1.0
    evaluation_interval_s: float = 1.0
    port: int | None = None
    base_dir: str | None = None
    pid: int | None = None
    keep_dir: bool = False
    alertmanagers: Sequence[str] = ()  # host:port of Alertmanagers to send alerts to

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> PrometheusServer:
        binary = prometheus_bin()
        if self.port is None:
            self.port = free_port()
        elif port_in_use(self.port):
            raise PrometheusError(f"prometheus port {self.port} is already in use on 127.0.0.1")
        for r in self.rule_files:
            if not Path(r).exists():
                raise PrometheusError(f"rule file {r} does not exist")
        if self.base_dir is None:
            self.base_dir = tempfile.mkdtemp(prefix="connmon-prometheus-")
        d = Path(self.base_dir)
        d.mkdir(parents=True, exist_ok=True)
        cfg = d / "prometheus.yml"
        cfg.write_text(
            render_config(
                self.scrape_jobs,
                self.rule_files,
                self.scrape_interval_s,
                self.evaluation_interval_s,
                alertmanagers=self.alertmanagers,
            )
        )
        argv = [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
        ]
        try:
            self.pid = start_ready(
                "prometheus", argv, d / "prometheus.log", f"{self.url}/-/ready", timeout_s
            )
        except DaemonError as exc:
            self.stop()
            raise PrometheusError(str(exc)) from None
        return self

    # ---- HTTP API ------------------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns ``data`` or raises with Prometheus' error text."""
        qs = urllib.parse.urlencode(params)
        url = f"{self.url}/api/v1/{path}" + (f"?{qs}" if qs else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the API's ``data.result``."""
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict[str, Any]]:
        return self.api("alerts")["alerts"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def wait_for(self, expr: str, timeout_s: float = 60.0, poll_s: float = 1.0) -> list[dict]:
        """Poll an instant query until it returns a non-empty result."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(poll_s)
        raise PrometheusError(f"no result for {expr!r} within {timeout_s:.0f}s")
