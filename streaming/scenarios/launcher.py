"""Start and stop workload processes (each in its own process group, output in a log file)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streaming.scenarios import javadriver
from streaming.scenarios.model import Workload
from streaming.scenarios.workloads import programs


def workload_argv(w: Workload, bootstrap: str, also: str | None = None) -> list[str]:
    """The command line of one workload against ``bootstrap`` (already narrowed to one broker
    when the workload pins one); ``also``: the endpoint of the workload's second cluster."""
    if w.client == "java":
        return javadriver.command(
            w.mode,
            w.app,
            bootstrap,
            w.topic or "",
            group=w.group,
            interval_ms=w.interval_ms,
            poll_for_s=w.options.get("poll_for_s"),
            props=dict(w.props),
        )
    if w.client in programs.LIBRARIES:
        return programs.command(
            w.client,
            w.mode,
            w.app,
            bootstrap,
            w.topic or "",
            group=w.group,
            interval_ms=w.interval_ms,
            props=w.props,
        )
    module = {"rdkafka": "rdkafka", "raw": "rawsock"}[w.client]
    argv = [
        sys.executable,
        "-m",
        f"streaming.scenarios.workloads.{module}",
        "--mode",
        w.mode,
        "--app",
        w.app,
        "--bootstrap",
        bootstrap,
    ]
    if w.topic:
        argv += ["--topic", w.topic]
    if w.group:
        argv += ["--group", w.group]
    if w.interval_ms is not None:
        argv += ["--interval-ms", str(w.interval_ms)]
    if "max_connections" in w.options:
        argv += ["--max-connections", str(w.options["max_connections"])]
    if "hold_ms" in w.options:
        argv += ["--hold-ms", str(w.options["hold_ms"])]
    if "second_interval_ms" in w.options:
        argv += ["--second-interval-ms", str(w.options["second_interval_ms"])]
    for k, v in (w.options.get("second_props") or {}).items():
        argv += ["--second-prop", f"{k}={v}"]
    if also:
        argv += ["--also", also]
    for k, v in w.props.items():
        argv += ["--prop", f"{k}={v}"]
    return argv


@dataclass
class Proc:
    """A started child process and where its output goes."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self, env: dict[str, str] | None = None) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stop_all(procs: list[Proc], timeout_s: float = 45.0) -> None:
    """SIGTERM every process group at once, wait, then SIGKILL what is left. The wait covers
    the job's own stop (its running batch for up to 30 s, then Spark)."""
    live = [p for p in procs if p.alive()]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    while live and time.monotonic() < deadline:
        time.sleep(0.2)
        live = [p for p in live if p.alive()]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # type: ignore[arg-type]
    for p in procs:
        if p.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)
