"""Network namespaces joined to the host by a veth pair, as a Kubernetes pod's is, for the
integration tests (root and iproute2; else the test skips)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

_nets = itertools.count(int(uuid.uuid4().hex[:2], 16))


@dataclass
class Pod:
    """A network namespace joined to the host by a veth pair: host end .1, namespace end .2,
    the default route through the host end."""

    name: str
    host_ip: str
    ns_ip: str

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *args], **kw)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def veth_pod() -> Iterator[Pod]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create network namespaces")
    tag = uuid.uuid4().hex[:6]
    name, host_if, ns_if = f"cm{tag}", f"cmh{tag}", f"cmn{tag}"
    net = 16 + next(_nets) % 200
    p = Pod(name, f"10.213.{net}.1", f"10.213.{net}.2")
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{p.host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", name, "addr", "add", f"{p.ns_ip}/30", "dev", ns_if)
        _ip("-n", name, "link", "set", ns_if, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "route", "add", "default", "via", p.host_ip)
        yield p
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def wait_line(proc: subprocess.Popen, want: str, timeout_s: float = 60.0) -> None:
    """Read ``proc``'s output until the line ``want``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == want:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before printing {want!r}")
    raise AssertionError(f"no {want!r} within {timeout_s}s")
