"""The /metrics endpoint (the fast renderer over the store), optionally behind TLS and basic
auth; gzip when the scraper asks for it, as Prometheus does."""

from __future__ import annotations

import base64
import hmac
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from streaming.exporter.gzipjoin import gzip_chunks
from streaming.exporter.render import CONTENT_TYPE, Renderer
from streaming.exporter.store import Store

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    import socket as _socket

    address_family = _socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def basic_auth(app: WSGIApp, user: str, password: str) -> WSGIApp:
    """Wrap ``app`` so it answers 401 unless the request carries these credentials."""
    expected = ("Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()).encode()

    def wrapped(environ: dict, start_response: Callable) -> Iterable[bytes]:
        got = environ.get("HTTP_AUTHORIZATION", "").encode()
        if not hmac.compare_digest(got, expected):
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="connmon"'), ("Content-Type", "text/plain")],
            )
            return [b"unauthorized\n"]
        return app(environ, start_response)

    return wrapped


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


def serve(
    app: WSGIApp,
    host: str,
    port: int,
    certfile: str | None = None,
    keyfile: str | None = None,
    auth: tuple[str, str] | None = None,
) -> tuple[WSGIServer, threading.Thread]:
    """Start serving on a daemon thread; returns the server (``shutdown()`` stops it)."""
    if auth is not None:
        app = basic_auth(app, *auth)
    server_class = _Server6 if ":" in host else _Server
    httpd = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    if certfile:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(certfile, keyfile)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, name="connmon-exporter-http", daemon=True)
    thread.start()
    return httpd, thread
