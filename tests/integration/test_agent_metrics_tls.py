"""The agent command serves its /metrics over TLS with basic auth (the exporter's server), with a
self-signed certificate made by openssl for this test (``tls_cert`` in conftest.py)."""

from __future__ import annotations

import base64
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from streaming.stack.ports import free_port

REPO = Path(__file__).parents[2]


def _get(url: str, ctx: ssl.SSLContext | None, password: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if password is not None:
        token = base64.b64encode(f"prom:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def agent(tmp_path: Path, tls_cert: tuple[Path, Path]) -> Iterator[tuple[str, ssl.SSLContext]]:
    """The real ``connmon agent`` (events to a file, no Kafka); yields its /metrics URL and a
    client TLS context trusting its certificate."""
    crt, key = tls_cert
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    config = tmp_path / "agent.yaml"
    # A cluster known by its listener port only: no metadata client, so no Kafka at all.
    config.write_text(f"clusters:\n  - {{name: local, listener_ports: [{free_port()}]}}\n")
    port = free_port()
    argv = [
        sys.executable, "-m", "streaming", "agent", "--config", str(config),
        "--output", str(tmp_path / "events.jsonl"), "--interval", "0.2",
        "--metrics-address", f"127.0.0.1:{port}",
        "--tls-cert-file", str(crt), "--tls-key-file", str(key),
        "--basic-auth-user", "prom", "--basic-auth-password-file", str(password),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"https://127.0.0.1:{port}/metrics"
    ctx = ssl.create_default_context(cafile=str(crt))
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, f"agent exited {proc.returncode}: {proc.stdout.read()}"
            try:
                _get(url, ctx, None)
                break
            except OSError:
                assert time.monotonic() < deadline, "agent /metrics did not come up"
                time.sleep(0.1)
        yield url, ctx
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()


def test_agent_metrics_over_tls_with_basic_auth(agent: tuple[str, ssl.SSLContext]) -> None:
    url, ctx = agent
    # A client that connects and says nothing does not hold up the others.
    with socket.create_connection(("127.0.0.1", urlsplit(url).port)):
        code, body = _get(url, ctx, "s3cret")
    assert code == 200
    assert b"connmon_agent_up 1.0" in body
    assert b"connmon_agent_scan_duration_seconds_count" in body
    assert _get(url, ctx, "wrong")[0] == 401
    assert _get(url, ctx, None)[0] == 401
    # The certificate is checked: without its CA the client refuses the server.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(url, ssl.create_default_context(), "s3cret")
    # Plain HTTP against the TLS port gets no metrics.
    with pytest.raises(OSError):
        _get(url.replace("https://", "http://"), None, "s3cret")
