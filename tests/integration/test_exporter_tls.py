"""/metrics over TLS with basic auth, with a certificate made by openssl for this test
(``tls_cert`` in conftest.py)."""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request

import pytest

from streaming.exporter.http import metrics_app
from streaming.exporter.store import Store
from streaming.stack.ports import free_port
from streaming.webserver import serve


def test_tls_and_basic_auth(tls_cert) -> None:
    crt, key = tls_cert
    app = metrics_app(Store(series_limit=7))
    port = free_port()
    httpd, thread = serve(app, "127.0.0.1", port, str(crt), str(key), ("prom", "pw"))
    try:
        ctx = ssl.create_default_context(cafile=str(crt))
        url = f"https://127.0.0.1:{port}/metrics"
        req = urllib.request.Request(url)
        req.add_header("Authorization", "Basic " + base64.b64encode(b"prom:pw").decode())
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            assert b"connmon_exporter_series_limit 7.0" in r.read()
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(url, context=ctx, timeout=5)
        assert exc.value.code == 401
        # Plain HTTP against the TLS port does not get metrics.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
