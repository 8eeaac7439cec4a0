"""The HTTP server behind every connmon /metrics endpoint: a threaded WSGI server, optionally
behind TLS (1.2 or later) and HTTP basic auth, and the check of those settings at start."""

from __future__ import annotations

import base64
import hmac
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from streaming.errors import ConfigError

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]

# Seconds a client may stay silent (TLS handshake, request line, headers) before it is dropped.
CLIENT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class EndpointSecurity:
    """Checked TLS and basic-auth settings of one endpoint; all None: plain HTTP, no auth."""

    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password: str | None = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert_file else "http"

    @property
    def auth(self) -> tuple[str, str] | None:
        """(user, password) when basic auth is on."""
        if self.basic_auth_user and self.basic_auth_password:
            return self.basic_auth_user, self.basic_auth_password
        return None


def check_security(
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    basic_auth_user: str | None = None,
    basic_auth_password_file: str | None = None,
    sep: str = "-",
) -> EndpointSecurity:
    """Validate the settings and read the password; a ``ConfigError`` names the wrong setting.

    Settings are named with ``sep`` between words: ``-`` as flags (``tls-cert-file``), ``_`` as
    config-file keys (``tls_cert_file``).
    """

    def name(setting: str) -> str:
        return setting.replace("_", sep)

    cert, key = tls_cert_file or None, tls_key_file or None
    if bool(cert) != bool(key):
        raise ConfigError(f"{name('tls_cert_file')}/{name('tls_key_file')}: give both or neither")
    for setting, path in (("tls_cert_file", cert), ("tls_key_file", key)):
        if path and not Path(path).is_file():
            raise ConfigError(f"{name(setting)}: {path} does not exist")
    if cert and key:
        try:
            server_context(cert, key)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{name('tls_cert_file')}/{name('tls_key_file')}: cannot load {cert}, {key}: {exc}"
            ) from None
    user, pw_file = basic_auth_user or None, basic_auth_password_file or None
    if bool(user) != bool(pw_file):
        raise ConfigError(
            f"{name('basic_auth_user')}/{name('basic_auth_password_file')}: give both or neither"
        )
    password = None
    if pw_file:
        p = Path(pw_file)
        if not p.is_file():
            raise ConfigError(f"{name('basic_auth_password_file')}: {p} does not exist")
        try:
            password = p.read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(
                f"{name('basic_auth_password_file')}: cannot read {p}: {exc.strerror}"
            ) from None
        if not password:
            raise ConfigError(f"{name('basic_auth_password_file')}: {p} is empty")
    return EndpointSecurity(cert, key, user, password)


def server_context(certfile: str, keyfile: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or later) with this certificate chain and key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    return ctx


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


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def finish_request(self, request: socket.socket, client_address: object) -> None:
        # The TLS handshake runs here, on the request's own thread: done in accept() it would
        # let one silent client stall every other scrape.
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(CLIENT_TIMEOUT_S)
            try:
                request.do_handshake()
            except OSError:  # plain HTTP, a port scan, a client giving up: nothing to answer
                return
        super().finish_request(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = CLIENT_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve(
    app: WSGIApp,
    host: str,
    port: int,
    certfile: str | None = None,
    keyfile: str | None = None,
    auth: tuple[str, str] | None = None,
    thread_name: str = "connmon-http",
) -> tuple[WSGIServer, threading.Thread]:
    """Start serving on a daemon thread; returns the server (``shutdown()`` stops it) and the
    thread. ``certfile`` and ``keyfile`` turn on TLS, ``auth`` (user, password) basic auth."""
    if auth is not None:
        app = basic_auth(app, *auth)
    server_class = _Server6 if ":" in host else _Server
    httpd = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    if certfile:
        try:
            ctx = server_context(certfile, keyfile)
            httpd.socket = ctx.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        except BaseException:
            httpd.server_close()
            raise
    thread = threading.Thread(target=httpd.serve_forever, name=thread_name, daemon=True)
    thread.start()
    return httpd, thread


def serve_endpoint(
    app: WSGIApp,
    host: str,
    port: int,
    security: EndpointSecurity | None = None,
    thread_name: str = "connmon-http",
) -> tuple[WSGIServer, threading.Thread]:
    """``serve`` with checked settings (``check_security``)."""
    sec = security or EndpointSecurity()
    return serve(app, host, port, sec.tls_cert_file, sec.tls_key_file, sec.auth, thread_name)
