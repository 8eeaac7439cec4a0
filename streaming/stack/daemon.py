"""Starting a local server process (Prometheus, Alertmanager, the webhook receiver) detached,
with its output in a log file, and waiting until it answers its readiness URL."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Self

from streaming.stack.kafka import _alive, _terminate


class DaemonError(RuntimeError):
    """A server exited or did not answer during its start; the message has its log's tail."""


def start_ready(
    name: str,
    argv: list[str],
    log: Path,
    ready_url: str,
    timeout_s: float = 60.0,
    context: ssl.SSLContext | None = None,
) -> int:
    """Start ``argv`` in a session of its own, its output appended to ``log``; return its pid
    once ``ready_url`` answers 200 (the process is stopped again when it does not); an https
    URL is verified with ``context``."""
    out = open(log, "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    out.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(proc.pid):
            raise DaemonError(f"{name} exited during start:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(ready_url, timeout=2, context=context) as r:
                if r.status == 200:
                    return proc.pid
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    _terminate(proc.pid, 15.0)
    raise DaemonError(f"{name} did not become ready within {timeout_s:.0f}s:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-1500:] if log.exists() else ""


class Server:
    """Stop and context management for a server dataclass with ``pid``, ``base_dir`` (its
    files, deleted at stop unless ``keep_dir``) and a ``start()`` returning itself."""

    pid: int | None
    base_dir: str | None
    keep_dir: bool

    def start(self, timeout_s: float = 60.0) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        _terminate(self.pid, 15.0)
        self.pid = None
        if self.base_dir and not self.keep_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start() if self.pid is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
