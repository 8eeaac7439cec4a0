"""The /metrics endpoint (the fast renderer over the store), optionally behind TLS and basic
auth; gzip when the scraper asks for it, as Prometheus does."""

from __future__ import annotations

import base64
import gzip
import hmac
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

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


def metrics_app(store: Store) -> WSGIApp:
    """WSGI app serving the store's current values on /metrics."""
    renderer = Renderer()
    lock = threading.Lock()  # the renderer's label cache is not thread-safe

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found; try /metrics\n"]
        with lock:
            body = renderer.render(store.snapshot()).encode()
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

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
