"""This node's pods from the Kubernetes API server: a LIST, then a WATCH, in a daemon thread.

Standard library only (``http.client``, ``ssl``, ``json``). In-cluster configuration: the API
server at ``KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT``, verified with the service
account's ``ca.crt``, authenticated with its ``token``, both read again for every request so a
rotated token is picked up. Only pods bound to this node are asked for
(``fieldSelector=spec.nodeName=<node>``) and kept: cgroup pod uid -> ``PodRef`` (namespace,
name, and the labels named in ``label_keys``, bounded in number and size). A static pod's
mirror is kept under the uid its cgroup carries (the ``kubernetes.io/config.mirror`` hash).

The watch resumes from the last ``resourceVersion`` (``allowWatchBookmarks=true`` keeps it
fresh while nothing changes); 410 Gone, as a status or as an ``ERROR`` event, means it expired:
list again. Failures are logged once per reason, reported through ``on_error`` (the agent's
``connmon_agent_kubernetes_api_errors_total``) and retried with backoff; they never reach the
scan, which falls back to the kubelet's files.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import random
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from streaming import __version__
from streaming.agent.pods import PodRef
from streaming.errors import ConfigError

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API_MODES = ("auto", "on", "off")
# Reasons of connmon_agent_kubernetes_api_errors_total.
ERROR_REASONS = ("unauthorized", "forbidden", "unreachable", "tls", "http", "invalid", "token")
MAX_LABELS = 32  # per pod, of those asked for
MAX_LABEL_KEY = 317  # a 253-character prefix, "/", a 63-character name
MAX_LABEL_VALUE = 63
MAX_EVENT_BYTES = 4 << 20  # one watch event line (etcd's object limit is 1.5 MiB)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
START_WAIT_S = 5.0  # how long the agent waits for the first list before its first scan
MIN_WATCH_S = 1.0  # a watch ending sooner is followed by a short wait

MAX_LIST_BYTES = 64 << 20  # one node's pod list
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def valid_label_key(key: str) -> bool:
    """Whether ``key`` is a Kubernetes label key: ``[prefix/]name``, the prefix a DNS
    subdomain of at most 253 characters, the name at most 63."""
    prefix, sep, name = key.rpartition("/")
    if sep and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return bool(_LABEL_NAME.fullmatch(name))


@dataclass(frozen=True)
class InCluster:
    """Where the API server is and how to authenticate to it, and whose pods to watch."""

    host: str
    port: int
    token_file: str
    ca_file: str
    node_name: str


def in_cluster(
    mode: str, node_name: str | None, environ: Mapping[str, str], sa_dir: str = SA_DIR
) -> InCluster | None:
    """Resolve ``kubernetes.api``: None when off, or on ``auto`` outside a pod with a service
    account token (or without a node name); ConfigError naming the setting when ``on`` cannot
    work."""
    if mode == "off":
        return None
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    token_file, ca_file = os.path.join(sa_dir, "token"), os.path.join(sa_dir, "ca.crt")
    missing = None
    if not host:
        missing = "KUBERNETES_SERVICE_HOST is not set"
    else:
        for path in (token_file, ca_file):
            if not os.path.isfile(path):
                missing = f"{path} does not exist"
                break
    if missing:
        if mode == "on":
            raise ConfigError(f"kubernetes.api: on, but {missing} (not in a pod with a token?)")
        log.debug("kubernetes API off: %s", missing)
        return None
    node = (node_name or environ.get("NODE_NAME", "")).strip()
    if not node:
        msg = "needed to watch this node's pods (or the NODE_NAME environment variable)"
        if mode == "on":
            raise ConfigError(f"kubernetes.node_name: {msg}")
        log.warning("kubernetes API off: kubernetes.node_name %s", msg)
        return None
    port_text = environ.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(f"KUBERNETES_SERVICE_PORT: {port_text!r} is not a port")
    return InCluster(host, int(port_text), token_file, ca_file, node)


class ApiError(Exception):
    """A failed request: ``reason`` is one of ERROR_REASONS (or ``gone`` for 410)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_STATUS_REASONS = {401: "unauthorized", 403: "forbidden", 410: "gone"}


def pod_key(obj: Mapping[str, Any]) -> str | None:
    """The uid a pod's cgroup carries: the mirror hash for static pods, else metadata.uid."""
    meta = obj.get("metadata") or {}
    mirror = (meta.get("annotations") or {}).get(MIRROR_ANNOTATION)
    uid = mirror or meta.get("uid")
    return str(uid).lower() if uid else None


def pod_ref(obj: Mapping[str, Any], label_keys: frozenset[str]) -> PodRef | None:
    """PodRef of a pod object, with the labels in ``label_keys`` (bounded); None if malformed."""
    meta = obj.get("metadata") or {}
    uid, namespace, name = pod_key(obj), meta.get("namespace"), meta.get("name")
    if not (uid and isinstance(namespace, str) and isinstance(name, str)):
        return None
    raw = meta.get("labels") or {}
    labels = sorted(
        (k, v)
        for k, v in (raw.items() if isinstance(raw, Mapping) else ())
        if k in label_keys
        and isinstance(v, str)
        and len(k) <= MAX_LABEL_KEY
        and len(v) <= MAX_LABEL_VALUE
    )
    return PodRef(uid=uid, namespace=namespace, name=name, labels=tuple(labels[:MAX_LABELS]))


class PodWatcher:
    """uid -> PodRef of this node's pods, kept current by a LIST + WATCH in a daemon thread.

    ``lookup`` is safe from any thread. ``on_error(reason)`` is called for every failure.
    ``watch_timeout_s`` is the server-side timeout of one watch (a little randomised);
    ``backoff_s`` the first and the longest wait after a failure.
    """

    def __init__(
        self,
        api: InCluster,
        label_keys: Iterable[str] = (),
        on_error: Callable[[str], None] | None = None,
        *,
        watch_timeout_s: float = 300.0,
        backoff_s: tuple[float, float] = (1.0, 60.0),
    ) -> None:
        self.api = api
        self.label_keys = frozenset(label_keys)
        self.on_error = on_error
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.synced = threading.Event()  # set once the first list is in
        self.relists = 0  # lists after the first, for tests
        self._pods: dict[str, PodRef] = {}
        self._stop = threading.Event()
        self._conn: http.client.HTTPSConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._sock: socket.socket | None = None  # the open request's socket, for stop()
        self._thread: threading.Thread | None = None
        self._logged: set[str] = set()
        self._failing = False
        self._delay = backoff_s[0]  # the next wait after a failure

    # ---- what the agent uses ----------------------------------------------------------------
    def lookup(self, uid: str) -> PodRef | None:
        """The pod with this cgroup uid (dashed, or 32 hex for static pods), if on this node."""
        return self._pods.get(uid)

    def __len__(self) -> int:
        return len(self._pods)

    def start(self) -> PodWatcher:
        self._thread = threading.Thread(target=self._run, name="connmon-kubeapi", daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the first list; whether it came."""
        return self.synced.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):  # wakes a read blocked on the watch stream
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        rv: str | None = None  # where the watch resumes; None: list first
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                started = time.monotonic()
                try:
                    rv = self._watch(rv)
                except ApiError as exc:
                    if exc.reason != "gone":
                        raise
                    rv = None  # the resourceVersion expired: list again
                if time.monotonic() - started < MIN_WATCH_S:
                    self._stop.wait(self.backoff_s[0])  # no busy loop on a server that ends it
                continue
            except ApiError as exc:
                if self._stop.is_set():
                    break
                self._failed(exc if exc.reason != "gone" else ApiError("http", exc.detail))
            except Exception as exc:  # never let the thread die
                if self._stop.is_set():
                    break
                self._failed(ApiError("invalid", repr(exc)))
            self._stop.wait(random.uniform(self._delay / 2, self._delay))
            self._delay = min(self._delay * 2, self.backoff_s[1])

    def _failed(self, exc: ApiError) -> None:
        self._failing = True
        if self.on_error is not None:
            self.on_error(exc.reason)
        if exc.reason not in self._logged:
            self._logged.add(exc.reason)
            log.warning(
                "kubernetes API %s:%d: %s (%s); pods are named from the node's files until it "
                "answers, retrying with backoff (logged once per reason)",
                self.api.host, self.api.port, exc.reason, exc.detail,
            )  # fmt: skip
        else:
            log.debug("kubernetes API: %s", exc)

    def _list(self) -> str:
        first = not self.synced.is_set()
        # The first list may come from the API server's cache (resourceVersion=0, cheap when
        # every node's agent starts at once); one after an expiry asks for the latest.
        params = {"fieldSelector": f"spec.nodeName={self.api.node_name}"}
        if first:
            params["resourceVersion"] = "0"
        resp = self._get(params, self.watch_timeout_s)
        try:
            data = resp.read(MAX_LIST_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError("unreachable", f"pod list: {exc!r}") from None
        finally:
            self._close()
        if len(data) > MAX_LIST_BYTES:
            raise ApiError("invalid", f"pod list over {MAX_LIST_BYTES} bytes")
        try:
            body = json.loads(data)
            rv = str(body["metadata"]["resourceVersion"])
            items = body.get("items") or []
        except (ValueError, KeyError, TypeError) as exc:
            raise ApiError("invalid", f"pod list: {exc!r}") from None
        pods: dict[str, PodRef] = {}
        for obj in items:
            ref = self._ref(obj)
            if ref is not None:
                pods[ref.uid] = ref
        self._pods = pods
        if first:
            node = self.api.node_name
            log.info("kubernetes API: watching the %d pods of node %s", len(pods), node)
        else:
            self.relists += 1
        self.synced.set()
        return rv

    def _watch(self, rv: str) -> str | None:
        """Apply watch events from ``rv`` on; the resourceVersion to resume from when the
        server ends the watch, None when it expired."""
        timeout = int(self.watch_timeout_s * random.uniform(1.0, 1.2))
        params = {
            "fieldSelector": f"spec.nodeName={self.api.node_name}",
            "watch": "1",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(timeout, 1)),
        }
        resp = self._get(params, timeout + 30.0)
        try:
            while not self._stop.is_set():
                line = resp.readline(MAX_EVENT_BYTES + 1)
                if not line:
                    return rv  # the server ended the watch (timeoutSeconds): watch again
                if len(line) > MAX_EVENT_BYTES:
                    raise ApiError("invalid", f"a watch event over {MAX_EVENT_BYTES} bytes")
                if not line.strip():
                    continue
                new_rv = self._apply(line)
                if new_rv is None:
                    return None
                rv = new_rv or rv
            return rv
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError("unreachable", f"watch: {exc!r}") from None
        finally:
            self._close()

    def _apply(self, line: bytes) -> str | None:
        """One watch event; its resourceVersion ("" if none), None for 410 Gone."""
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
            if not isinstance(obj, dict):
                raise TypeError("object is not a mapping")
        except (ValueError, KeyError, TypeError) as exc:
            raise ApiError("invalid", f"watch event: {exc!r}") from None
        if kind == "ERROR":
            if obj.get("code") == 410:
                return None
            raise ApiError("http", f"watch ERROR {obj.get('code')}: {obj.get('message')}")
        if kind in ("ADDED", "MODIFIED"):
            ref = self._ref(obj)
            if ref is not None:
                self._pods[ref.uid] = ref
        elif kind == "DELETED":
            key = pod_key(obj)
            if key:
                self._pods.pop(key, None)
        # BOOKMARK (and any other type) only moves the resourceVersion on.
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")

    def _ref(self, obj: Any) -> PodRef | None:
        if not isinstance(obj, dict):
            return None
        node = (obj.get("spec") or {}).get("nodeName")
        if node != self.api.node_name:  # the selector already says so; memory stays bounded
            return None
        return pod_ref(obj, self.label_keys)

    # ---- HTTP -------------------------------------------------------------------------------
    def _get(self, params: Mapping[str, str], timeout: float) -> http.client.HTTPResponse:
        """GET /api/v1/pods with ``params``; the response when 200, else ApiError."""
        try:
            with open(self.api.token_file, encoding="utf-8") as f:
                token = f.read().strip()
            context = ssl.create_default_context(cafile=self.api.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ApiError("token", f"service account files: {exc}") from None
        if not token:
            raise ApiError("token", f"{self.api.token_file} is empty")
        conn = http.client.HTTPSConnection(
            self.api.host, self.api.port, timeout=timeout, context=context
        )
        self._conn = conn
        try:
            conn.connect()
            self._sock = conn.sock  # before the check: stop() sets the flag, then shuts it
            if self._stop.is_set():
                self._close()
                raise ApiError("unreachable", "stopping")
            conn.request(
                "GET",
                f"/api/v1/pods?{urlencode(params)}",
                headers={
                    "Authorization": f"Bearer {token}",
                    "Accept": "application/json",
                    "User-Agent": f"connmon-agent/{__version__}",
                },
            )
            resp = self._resp = conn.getresponse()
        except ssl.SSLError as exc:
            self._close()
            raise ApiError("tls", repr(exc)) from None
        except (OSError, http.client.HTTPException) as exc:
            self._close()
            raise ApiError("unreachable", repr(exc)) from None
        if resp.status == 200:
            self._delay = self.backoff_s[0]
            if self._failing:
                self._failing = False
                log.info("kubernetes API %s:%d answers again", self.api.host, self.api.port)
            return resp
        try:
            message = json.loads(resp.read(65536)).get("message", "")
        except Exception:
            message = ""
        finally:
            self._close()
        reason = _STATUS_REASONS.get(resp.status, "http")
        raise ApiError(reason, f"HTTP {resp.status} {resp.reason}: {message}".rstrip(": "))

    def _close(self) -> None:
        resp, conn = self._resp, self._conn
        self._resp = self._conn = self._sock = None
        if resp is not None:
            resp.close()  # with "Connection: close" the response holds the socket
        if conn is not None:
            conn.close()
