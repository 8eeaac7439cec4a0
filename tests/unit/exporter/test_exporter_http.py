"""The /metrics endpoint on loopback: basic auth wrapper and the served exposition."""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.request

import pytest

from streaming.exporter.http import metrics_app
from streaming.exporter.store import Store
from streaming.stack.ports import free_port
from streaming.webserver import serve


@pytest.fixture
def server():
    app = metrics_app(Store())
    port = free_port()
    httpd, thread = serve(app, "127.0.0.1", port, auth=("prom", "pw"))
    yield f"http://127.0.0.1:{port}/metrics"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def _get(url: str, user: str | None = None, pw: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{pw}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_basic_auth(server: str) -> None:
    assert _get(server)[0] == 401
    assert _get(server, "prom", "wrong")[0] == 401
    code, body = _get(server, "prom", "pw")
    assert code == 200
    assert b"connmon_exporter_series_limit 20000.0" in body


def test_gzip_and_404(server: str) -> None:
    import gzip

    token = base64.b64encode(b"prom:pw").decode()
    req = urllib.request.Request(
        server, headers={"Authorization": f"Basic {token}", "Accept-Encoding": "gzip"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        body = r.read()
        assert int(r.headers["Content-Length"]) == len(body)
        assert b"connmon_exporter_series 0.0" in gzip.decompress(body)
    assert _get(server.replace("/metrics", "/other"), "prom", "pw")[0] == 404


def test_plain_and_gzip_bodies_match_over_http() -> None:
    import gzip

    from streaming.exporter.consumer import handle
    from streaming.exporter.samples import aggregate, finding

    store = Store()
    for i in range(50):
        handle(store, "aggregates", f"a{i}".encode(), aggregate(end=time.time(), host=f"h{i}"), "x")
        handle(store, "findings", f"f{i}".encode(), finding(updated=time.time(), host=f"h{i}"), "x")
    port = free_port()
    httpd, thread = serve(metrics_app(store), "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            plain = r.read()
            assert int(r.headers["Content-Length"]) == len(plain)
        for _ in range(2):  # the second answer reuses the compressed sections
            req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.headers["Content-Encoding"] == "gzip"
                assert gzip.decompress(r.read()) == plain
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    assert plain.count(b"connmon_finding_active{") == 50
