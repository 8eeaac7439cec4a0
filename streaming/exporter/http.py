"""The /metrics endpoint (the fast renderer over the store); gzip when the scraper asks for it,
as Prometheus does. Served, optionally behind TLS and basic auth, by ``streaming.webserver``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from streaming.exporter.gzipjoin import gzip_chunks
from streaming.exporter.render import CONTENT_TYPE, Renderer
from streaming.exporter.store import Store
from streaming.webserver import WSGIApp


def gzip_accepted(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header allows gzip (``gzip;q=0`` refuses it)."""
    for item in accept_encoding.split(","):
        coding, *params = (p.strip() for p in item.split(";"))
        if coding.lower() not in ("gzip", "x-gzip"):
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


def metrics_app(store: Store) -> WSGIApp:
    """WSGI app serving the store's current values on /metrics."""
    renderer = Renderer()
    # The renderer's caches are not thread-safe; scrapes take turns.
    lock = threading.Lock()

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found; try /metrics\n"]
        gz = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
        with lock:
            parts = renderer.parts(store.snapshot())
            body = gzip_chunks(parts) if gz else [p.data for p in parts]
        headers = [
            ("Content-Type", CONTENT_TYPE),
            ("Content-Length", str(sum(map(len, body)))),
            ("Vary", "Accept-Encoding"),
        ]
        if gz:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return body  # sent chunk by chunk: the cached sections are never copied into one

    return app
