"""A webhook receiver for the local stack's Alertmanager: it keeps every notification it is
sent (Alertmanager's webhook JSON: a group of alerts with their labels and annotations), so the
demo can show what a person on call would have received and the tests can check it.

In process (``WebhookReceiver``, for tests) or as a process of its own
(``python -m streaming.stack.webhook --port N --log FILE``, for ``connmon stack up``), which
appends each notification to FILE as one JSON line and serves ``/-/ready``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from streaming.stack.ports import free_port

Notification = dict[str, Any]


def _handler(keep: Callable[[str, Notification], None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's API
            size = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(size) or b"{}")
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            keep(self.path, body)
            self.send_response(200)
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/-/ready" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


class WebhookReceiver:
    """Notifications received, by the path they were posted to (one per receiver)."""

    def __init__(self, port: int | None = None, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.received: list[tuple[float, str, Notification]] = []  # (when, path, body)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self._keep))
        self._thread: threading.Thread | None = None

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _keep(self, path: str, body: Notification) -> None:
        now = time.time()
        with self._lock:
            self.received.append((now, path, body))
            if self.log is not None:
                with self.log.open("a") as f:
                    f.write(json.dumps({"received_at": now, "path": path, **body}) + "\n")

    def notifications(self, path: str | None = None) -> list[Notification]:
        """What was posted (to ``path``, e.g. ``/critical``, when given), oldest first."""
        with self._lock:
            return [b for _t, p, b in self.received if path is None or p == path]

    def start(self) -> WebhookReceiver:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_log(path: Path) -> list[Notification]:
    """The notifications a receiver process appended to ``path``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description="keep Alertmanager's webhook notifications")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True, help="JSON-lines file the notifications go to")
    args = ap.parse_args()
    WebhookReceiver(args.port, Path(args.log))._server.serve_forever()


if __name__ == "__main__":
    main()


def describe(n: Notification) -> str:
    """One line per notification: status, receiver, group, how many alerts, the first's summary."""
    group = ", ".join(f"{k}={v}" for k, v in sorted(n.get("groupLabels", {}).items()))
    alerts = n.get("alerts") or [{}]
    summary = (alerts[0].get("annotations") or {}).get("summary", "")
    return (
        f"{n.get('status', '?'):<8} {n.get('receiver', '?'):<17} {group}  x{len(alerts)}  {summary}"
    )
