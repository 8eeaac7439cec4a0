"""A local Alertmanager on 127.0.0.1 running connmon's shipped configuration
(``deploy/alertmanager/alertmanager.yml`` as committed), its receivers pointed at a local
webhook receiver.

The binary comes from Debian's ``prometheus-alertmanager`` package (``streaming.prometheus_bin``).
"""

from __future__ import annotations

import json
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from streaming.mixin.build import ALERTMANAGER_FILE, ROOT
from streaming.prometheus_bin import PrometheusError, alertmanager_bin
from streaming.stack.daemon import DaemonError, Server, start_ready
from streaming.stack.ports import free_port


def local_config(
    webhook_url: str,
    group_wait: str | None = None,
    group_interval: str | None = None,
    source: Path = ROOT / ALERTMANAGER_FILE,
) -> dict[str, Any]:
    """The shipped Alertmanager configuration with each receiver's webhooks posting to
    ``webhook_url`` plus the last segment of its shipped URL (``/critical``, ``/warning``,
    ``/info``). Routes, grouping, repeats and inhibitions stay as shipped; ``group_wait`` and
    ``group_interval`` replace the root route's only when given (a demo lasts minutes)."""
    config = yaml.safe_load(source.read_text())
    base = webhook_url.rstrip("/")
    for receiver in config.get("receivers", []):
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{base}/{hook['url'].rstrip('/').rsplit('/', 1)[-1]}"
    for key, value in (("group_wait", group_wait), ("group_interval", group_interval)):
        if value is not None:
            config["route"][key] = value
    return config


@dataclass
class AlertmanagerServer(Server):
    """One Alertmanager process (no cluster peers); ``start()`` returns when it is ready."""

    config: dict[str, Any]
    port: int | None = None
    base_dir: str | None = None
    pid: int | None = None
    keep_dir: bool = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self, timeout_s: float = 60.0) -> AlertmanagerServer:
        binary = alertmanager_bin()
        self.port = self.port or free_port()
        if self.base_dir is None:
            self.base_dir = tempfile.mkdtemp(prefix="connmon-alertmanager-")
        d = Path(self.base_dir)
        d.mkdir(parents=True, exist_ok=True)
        cfg = d / "alertmanager.yml"
        cfg.write_text(json.dumps(self.config, indent=2) + "\n")  # JSON is YAML
        argv = [
            binary,
            f"--config.file={cfg}",
            f"--storage.path={d / 'data'}",
            f"--web.listen-address={self.address}",
            "--cluster.listen-address=",  # no gossip port: one instance
        ]
        try:
            self.pid = start_ready(
                "alertmanager", argv, d / "alertmanager.log", f"{self.url}/-/ready", timeout_s
            )
        except DaemonError as exc:
            self.stop()
            raise PrometheusError(str(exc)) from None
        return self

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts it holds (API v2), with their inhibition and silence status."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as r:
            return json.load(r)
