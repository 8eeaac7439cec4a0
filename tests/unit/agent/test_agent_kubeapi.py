"""The pod watch (streaming/agent/kubeapi.py) against a small HTTPS server on 127.0.0.1 that
speaks the API server's list/watch protocol: a PodList with a resourceVersion, then chunked
JSON-lines watch events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR 410), bearer tokens, 403."""

from __future__ import annotations

import json
import logging
import shutil
import ssl
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from streaming.agent import config as agent_config
from streaming.agent.kubeapi import (
    MAX_LABEL_VALUE,
    MAX_LABELS,
    InCluster,
    PodWatcher,
    in_cluster,
    pod_ref,
    valid_label_key,
)
from streaming.agent.metrics import AgentMetrics
from streaming.agent.pods import PodDirectory, PodRef
from streaming.agent.procs import ProcessTable
from streaming.agent.runner import make_pod_watcher
from streaming.errors import ConfigError

NODE = "node-1"
U1 = "11111111-1111-4111-8111-111111111111"
U2 = "22222222-2222-4222-8222-222222222222"
U3 = "33333333-3333-4333-8333-333333333333"
KEYS = ("app.kubernetes.io/name", "team")


def pod(uid: str, name: str, node: str = NODE, ns: str = "shop", **labels: str) -> dict:
    return {
        "metadata": {"uid": uid, "namespace": ns, "name": name, "labels": labels},
        "spec": {"nodeName": node},
    }


class FakeApi:
    """Pods, a resourceVersion counter and the event history of a compacting store."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cond = threading.Condition()
        self.pods: dict[str, dict] = {}
        self.rv = 100
        self.history: list[tuple[int, str, dict]] = []
        self.raws: list[tuple[int, str]] = []  # (the watch it goes to, 1 = the first; line)
        self.oldest = 0  # watches from before this resourceVersion have expired
        self.expired_as_status = False  # 410 as the HTTP status instead of an ERROR event
        self.tokens = {"token-1"}
        self.forced: int | None = None  # answer every request with this status
        self.requests: list[dict[str, Any]] = []
        self.watch_epoch = 0  # bumped to end every open watch
        self.stopping = False
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                api.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # ---- what tests do to the store ----------------------------------------------------------
    def _event(self, kind: str, obj: dict) -> None:
        with self.cond:
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            self.history.append((self.rv, kind, obj))
            self.cond.notify_all()

    def add(self, obj: dict) -> None:
        self.pods[obj["metadata"]["uid"]] = obj
        self._event("ADDED", obj)

    def modify(self, obj: dict) -> None:
        self.pods[obj["metadata"]["uid"]] = obj
        self._event("MODIFIED", obj)

    def delete(self, uid: str) -> None:
        self._event("DELETED", self.pods.pop(uid))

    def bookmark(self) -> None:
        self._event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1"})

    def raw(self, line: str) -> None:
        """A line sent as it is on the newest watch (not stored as an event)."""
        with self.cond:
            self.raws.append((len(self.watches()), line))
            self.cond.notify_all()

    def end_watches(self) -> None:
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget the history (etcd compaction) and end the open watches: resuming expires."""
        with self.cond:
            self.rv += 1  # a write elsewhere (another node's pod): every watcher is behind
            self.oldest = self.rv
            self.history.clear()
        self.end_watches()

    def watches(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["query"].get("watch") == "1"]

    # ---- the protocol -------------------------------------------------------------------------
    def handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        auth = h.headers.get("Authorization", "")
        self.requests.append({"path": url.path, "query": query, "auth": auth})
        if auth.removeprefix("Bearer ") not in self.tokens:
            return self.status(h, 401, "Unauthorized")
        if self.forced is not None:
            return self.status(h, self.forced, "pods is forbidden: cannot list resource pods")
        assert url.path == "/api/v1/pods"
        node = query["fieldSelector"].removeprefix("spec.nodeName=")
        if query.get("watch") != "1":
            with self.cond:
                items = [p for p in self.pods.values() if p["spec"]["nodeName"] == node]
                body = {"kind": "PodList", "metadata": {"resourceVersion": str(self.rv)}}
                body["items"] = items
            return self.send(h, 200, json.dumps(body).encode())
        since = int(query["resourceVersion"])
        if since < self.oldest and self.expired_as_status:
            return self.status(h, 410, "too old resource version")
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()
        if since < self.oldest:
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            self.chunk(h, {"type": "ERROR", "object": gone})
            return self.chunk(h, None)
        deadline = time.monotonic() + int(query["timeoutSeconds"])
        with self.cond:
            epoch = self.watch_epoch
            mine = len(self.watches())
        while True:
            with self.cond:
                todo = [e for e in self.history if e[0] > since]
                todo += [(since, "RAW", {"line": ln}) for n, ln in self.raws if n == mine]
                self.raws = [(n, ln) for n, ln in self.raws if n != mine]
                if not todo:
                    if self.stopping or self.watch_epoch != epoch or time.monotonic() > deadline:
                        break
                    self.cond.wait(0.05)
                    continue
            for rv, kind, obj in todo:
                node_of = obj.get("spec", {}).get("nodeName")
                if kind == "RAW":
                    data = obj["line"].encode() + b"\n"
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    h.wfile.flush()
                elif kind == "BOOKMARK" or node_of == node:
                    self.chunk(h, {"type": kind, "object": obj})
                since = rv
        self.chunk(h, None)

    @staticmethod
    def chunk(h: BaseHTTPRequestHandler, event: dict | None) -> None:
        data = b"" if event is None else json.dumps(event).encode() + b"\n"
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()

    @staticmethod
    def send(h: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(body)

    def status(self, h: BaseHTTPRequestHandler, code: int, message: str) -> None:
        body = {"kind": "Status", "status": "Failure", "message": message, "code": code}
        self.send(h, code, json.dumps(body).encode())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test server's certificate")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "ca.crt", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True,
    )  # fmt: skip
    return crt, key


@pytest.fixture
def server(certificate: tuple[Path, Path]) -> Iterator[FakeApi]:
    api = FakeApi(*certificate)
    api.pods = {
        U1: pod(U1, "orders-7d9c8b6f5d-x7k2p", **{"app.kubernetes.io/name": "orders"}),
        U2: pod(U2, "billing-0", team="payments", other="not kept"),
        U3: pod(U3, "elsewhere", node="node-2"),
    }
    yield api
    api.close()


@pytest.fixture
def sa_dir(tmp_path: Path, certificate: tuple[Path, Path]) -> Path:
    """A service account folder: token and ca.crt."""
    (tmp_path / "token").write_text("token-1\n")
    shutil.copy(certificate[0], tmp_path / "ca.crt")
    return tmp_path


def counting(errors: Counter) -> Callable[[str], None]:
    """An ``on_error`` that counts reasons."""
    return lambda reason: errors.update([reason])


def wait_for(cond: Callable[[], Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def watch(server: FakeApi, sa_dir: Path) -> Iterator[Callable[..., tuple[PodWatcher, Counter]]]:
    started: list[PodWatcher] = []

    def make(**kw: Any) -> tuple[PodWatcher, Counter]:
        errors: Counter = Counter()
        api = InCluster(
            "127.0.0.1", server.port, str(sa_dir / "token"), str(sa_dir / "ca.crt"), NODE
        )
        w = PodWatcher(api, KEYS, counting(errors), backoff_s=(0.05, 0.2), **kw)
        started.append(w.start())
        return w, errors

    yield make
    for w in started:
        w.stop()


# ---- list and watch -------------------------------------------------------------------------
def test_initial_list_keeps_this_nodes_pods_and_the_labels_rules_name(watch, server) -> None:
    w, errors = watch()
    assert w.wait_synced(10)
    assert len(w) == 2 and w.lookup(U3) is None  # node-2's pod: not asked for, not kept
    assert w.lookup(U1) == PodRef(
        U1, "shop", "orders-7d9c8b6f5d-x7k2p", (("app.kubernetes.io/name", "orders"),)
    )
    assert w.lookup(U2).labels == (("team", "payments"),)  # "other" is named by no rule
    first = server.requests[0]
    assert first["query"] == {"fieldSelector": f"spec.nodeName={NODE}", "resourceVersion": "0"}
    assert first["auth"] == "Bearer token-1"
    wait_for(lambda: server.watches())
    q = server.watches()[0]["query"]
    assert q["resourceVersion"] == "100" and q["allowWatchBookmarks"] == "true"
    assert q["fieldSelector"] == f"spec.nodeName={NODE}"
    assert not errors


def test_added_modified_deleted_and_bookmarks(watch, server) -> None:
    w, errors = watch()
    assert w.wait_synced(10)
    wait_for(lambda: server.watches())
    server.add(pod(U3, "worker-abcde", team="data"))
    wait_for(lambda: w.lookup(U3) is not None)
    assert w.lookup(U3) == PodRef(U3, "shop", "worker-abcde", (("team", "data"),))
    server.modify(pod(U3, "worker-abcde", team="platform"))
    wait_for(lambda: w.lookup(U3).labels == (("team", "platform"),))
    server.delete(U1)
    wait_for(lambda: w.lookup(U1) is None)
    other = "44444444-4444-4444-8444-444444444444"
    server.add(pod(other, "not-here", node="node-2"))
    server.bookmark()
    bookmark_rv = server.rv
    # The server ends the watch (its timeout): the next one resumes from the bookmark.
    server.end_watches()
    wait_for(lambda: len(server.watches()) >= 2)
    assert server.watches()[1]["query"]["resourceVersion"] == str(bookmark_rv)
    assert w.lookup(other) is None and len(w) == 2
    assert w.relists == 0 and not errors


@pytest.mark.parametrize("as_status", [False, True], ids=["error-event", "http-status"])
def test_expired_resource_version_lists_again(watch, server, as_status: bool) -> None:
    server.expired_as_status = as_status
    w, errors = watch()
    assert w.wait_synced(10)
    wait_for(lambda: server.watches())
    # While the agent is away, a pod goes and its event is compacted away with the history.
    server.delete(U2)
    server.pods[U3]["spec"]["nodeName"] = NODE
    server.compact()
    wait_for(lambda: w.relists == 1 and len(server.watches()) >= 3)
    assert w.relists == 1  # and then it watches from the new list on
    assert w.lookup(U2) is None and w.lookup(U3) is not None
    lists = [r for r in server.requests if r["query"].get("watch") != "1"]
    assert "resourceVersion" not in lists[-1]["query"]  # the latest, not the cache's
    assert not errors  # an expiry is not an error


def test_bad_watch_events_are_counted_and_the_watch_resumes(watch, server) -> None:
    w, errors = watch()
    assert w.wait_synced(10)
    wait_for(lambda: server.watches())
    server.raw("{not json")
    wait_for(lambda: errors["invalid"] == 1)
    wait_for(lambda: len(server.watches()) >= 2)
    server.raw(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 500}}))
    wait_for(lambda: errors["http"] == 1)
    server.add(pod(U3, "after-the-errors"))
    wait_for(lambda: w.lookup(U3) is not None)
    assert w.relists == 0  # resumed from the last resourceVersion, no list again
    assert [r["query"]["resourceVersion"] for r in server.watches()[:3]] == ["100"] * 3


def test_rotated_token_is_read_again(watch, server, sa_dir: Path) -> None:
    w, errors = watch()
    assert w.wait_synced(10)
    wait_for(lambda: server.watches())
    # The kubelet writes a new token; the API server stops accepting the old one.
    (sa_dir / "token").write_text("token-2\n")
    server.tokens = {"token-2"}
    server.end_watches()
    wait_for(lambda: len(server.watches()) >= 2)
    assert server.watches()[-1]["auth"] == "Bearer token-2"
    server.add(pod(U3, "late-pod", node=NODE))
    wait_for(lambda: w.lookup(U3) is not None)
    assert not errors


def test_unauthorized_until_the_token_rotates(watch, server, sa_dir: Path) -> None:
    server.tokens = {"token-2"}
    w, errors = watch()
    wait_for(lambda: errors["unauthorized"] >= 2)
    assert not w.synced.is_set() and w.lookup(U1) is None
    (sa_dir / "token").write_text("token-2")
    assert w.wait_synced(10)
    assert w.lookup(U1) is not None


def test_forbidden_is_counted_logged_once_and_recovers(watch, server, caplog) -> None:
    server.forced = 403
    with caplog.at_level(logging.WARNING, logger="streaming.agent.kubeapi"):
        w, errors = watch()
        wait_for(lambda: errors["forbidden"] >= 3)
    warnings = [r for r in caplog.records if "forbidden" in r.getMessage()]
    assert len(warnings) == 1
    assert "cannot list resource pods" in warnings[0].getMessage()
    assert w.lookup(U1) is None
    server.forced = None
    assert w.wait_synced(10) and w.lookup(U1) is not None
    assert set(errors) == {"forbidden"}


def test_unreachable_and_bad_ca_are_counted_and_stop_is_prompt(
    server, sa_dir: Path, tmp_path: Path
) -> None:
    errors: Counter = Counter()
    token, ca = str(sa_dir / "token"), str(sa_dir / "ca.crt")
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens there now
    w = PodWatcher(InCluster("127.0.0.1", port, token, ca, NODE), on_error=counting(errors),
                   backoff_s=(0.05, 0.1)).start()  # fmt: skip
    wait_for(lambda: errors["unreachable"] >= 2)
    t0 = time.monotonic()
    w.stop()
    assert time.monotonic() - t0 < 2 and not w._thread.is_alive()
    other_ca = tmp_path / "other-ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=other", "-keyout", str(tmp_path / "k.pem"),
         "-out", str(other_ca)],
        check=True, capture_output=True,
    )  # fmt: skip
    w = PodWatcher(InCluster("127.0.0.1", server.port, token, str(other_ca), NODE),
                   on_error=counting(errors), backoff_s=(0.05, 0.1)).start()  # fmt: skip
    wait_for(lambda: errors["tls"] >= 1)
    w.stop()
    (sa_dir / "token").unlink()
    w = PodWatcher(InCluster("127.0.0.1", server.port, token, ca, NODE), on_error=counting(errors),
                   backoff_s=(0.05, 0.1)).start()  # fmt: skip
    wait_for(lambda: errors["token"] >= 1)
    w.stop()


def test_a_watch_that_stops_is_stopped_at_once(watch, server) -> None:
    w, _ = watch()
    assert w.wait_synced(10)
    wait_for(lambda: server.watches())
    time.sleep(0.2)  # blocked reading the stream by now
    t0 = time.monotonic()
    w.stop()
    assert time.monotonic() - t0 < 2 and not w._thread.is_alive()


# ---- pods, labels, bounds -------------------------------------------------------------------
def test_static_pods_are_kept_under_their_cgroup_uid() -> None:
    mirror = pod(U1, "etcd-node-1", ns="kube-system", team="infra")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "645dd0f6" * 4}
    assert pod_ref(mirror, frozenset({"team"})) == PodRef(
        "645dd0f6" * 4, "kube-system", "etcd-node-1", (("team", "infra"),)
    )


def test_labels_are_bounded() -> None:
    many = {f"k{i}": "v" for i in range(3 * MAX_LABELS)}
    many["long"] = "x" * (MAX_LABEL_VALUE + 1)
    ref = pod_ref(pod(U1, "p", **many), frozenset(many))
    assert len(ref.labels) == MAX_LABELS and ("long", "x" * 64) not in ref.labels
    assert pod_ref({"metadata": {"uid": U1}}, frozenset()) is None  # no namespace, no name


@pytest.mark.parametrize(
    ("key", "ok"),
    [("app", True), ("app.kubernetes.io/name", True), ("team_1.x-y", True),
     ("Bad Key", False), ("-app", False), ("UPPER.example.com/x", False), ("a/b/c", False),
     ("x" * 64, False), ("", False), ("/name", False)],
)  # fmt: skip
def test_label_keys(key: str, ok: bool) -> None:
    assert valid_label_key(key) is ok


# ---- in-cluster configuration ---------------------------------------------------------------
def test_in_cluster_resolution(sa_dir: Path, caplog) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster("off", "n", env, str(sa_dir)) is None
    assert in_cluster("auto", "n", {}, str(sa_dir)) is None  # not in a pod
    assert in_cluster("auto", "n", env, str(sa_dir / "missing")) is None  # no token
    with pytest.raises(ConfigError, match="^kubernetes.api: on, but KUBERNETES_SERVICE_HOST"):
        in_cluster("on", "n", {}, str(sa_dir))
    with pytest.raises(ConfigError, match="^kubernetes.api: on, but .*token does not exist"):
        in_cluster("on", "n", env, str(sa_dir / "missing"))
    api = in_cluster("auto", None, {**env, "NODE_NAME": "node-7"}, str(sa_dir))
    assert api == InCluster(
        "10.96.0.1", 443, str(sa_dir / "token"), str(sa_dir / "ca.crt"), "node-7"
    )
    assert in_cluster("on", "node-8", {**env, "NODE_NAME": "node-7"}, str(sa_dir)).node_name == (
        "node-8"
    )
    with caplog.at_level(logging.WARNING):
        assert in_cluster("auto", None, env, str(sa_dir)) is None
    assert "kubernetes.node_name" in caplog.text
    with pytest.raises(ConfigError, match="^kubernetes.node_name:"):
        in_cluster("on", None, env, str(sa_dir))
    with pytest.raises(ConfigError, match="^KUBERNETES_SERVICE_PORT:"):
        in_cluster("on", "n", {**env, "KUBERNETES_SERVICE_PORT": "https"}, str(sa_dir))


BASE = {"clusters": [{"name": "ok", "bootstrap_servers": "h:1"}]}


def test_agent_wiring_counts_errors_and_pods(server, sa_dir: Path) -> None:
    cfg = agent_config.build(
        {**BASE, "apps": [{"match": "(.+)", "name": r"\1", "on": "label:team"}]}
    )
    metrics = AgentMetrics()
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port),
           "NODE_NAME": NODE}  # fmt: skip
    w = make_pod_watcher(cfg, metrics, env, str(sa_dir))
    assert w is not None and w.label_keys == {"team"}
    w.backoff_s = (0.05, 0.1)
    server.forced = 403
    reg = metrics.registry
    sample = "connmon_agent_kubernetes_api_errors_total"
    assert reg.get_sample_value(sample, {"reason": "unreachable"}) == 0  # every reason exists
    w.start()
    try:
        wait_for(lambda: (reg.get_sample_value(sample, {"reason": "forbidden"}) or 0) >= 1)
        assert reg.get_sample_value("connmon_agent_kubernetes_pods") == 0
        server.forced = None
        assert w.wait_synced(10)
        assert reg.get_sample_value("connmon_agent_kubernetes_pods") == 2
    finally:
        w.stop()
    off = agent_config.build({**BASE, "kubernetes": {"api": "off"}})
    assert make_pod_watcher(off, AgentMetrics(), env, str(sa_dir)) is None


def test_agent_command_starts_and_stops_the_watch(server, sa_dir, monkeypatch, capsys) -> None:
    from streaming.agent import kubeapi
    from streaming.cli import main

    args = ["agent", "--once", "--output", "-", "--cluster-bootstrap", "lo=127.0.0.1:1"]
    monkeypatch.setenv("CONNMON_AGENT_METADATA_TIMEOUT_S", "0.5")  # nothing listens on port 1
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main([*args, "--kubernetes-api", "on"]) == 2
    assert "kubernetes.api: on, but KUBERNETES_SERVICE_HOST" in capsys.readouterr().err
    monkeypatch.setattr(kubeapi, "SA_DIR", str(sa_dir))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    monkeypatch.setenv("NODE_NAME", NODE)
    assert main(args) == 0
    assert server.requests[0]["query"]["fieldSelector"] == f"spec.nodeName={NODE}"
    assert not [t for t in threading.enumerate() if t.name == "connmon-kubeapi" and t.is_alive()]


# ---- pod resolution: the API first, then the node's files -----------------------------------
class Source:
    def __init__(self) -> None:
        self.pods: dict[str, PodRef] = {}

    def lookup(self, uid: str) -> PodRef | None:
        return self.pods.get(uid)


FIXTURE_NODE = Path(__file__).resolve().parents[2] / "fixtures" / "agent" / "pods" / "node"
FILE_UID = "89487173-d074-4031-8a9e-d6ad26cbcacf"  # payments/payments-api-7d9c8b6f5d-x7k2p


def test_api_is_asked_before_the_node_files(tmp_path: Path) -> None:
    source = Source()
    files = PodDirectory(
        FIXTURE_NODE / "var" / "log" / "pods", FIXTURE_NODE / "var" / "lib" / "kubelet", api=source
    )
    assert files.lookup(FILE_UID) == PodRef(FILE_UID, "payments", "payments-api-7d9c8b6f5d-x7k2p")
    labelled = PodRef(FILE_UID, "payments", "payments-api-7d9c8b6f5d-x7k2p", (("team", "pay"),))
    source.pods[FILE_UID] = labelled
    assert files.lookup(FILE_UID.replace("-", "_")) == labelled
    assert PodDirectory(tmp_path, tmp_path, api=source).lookup("no-such-uid") is None


def test_a_process_read_before_the_api_knew_its_pod_is_named_again(tmp_path: Path) -> None:
    cid = "ab" * 32
    base = tmp_path / "40"
    (base / "fd").mkdir(parents=True)
    (base / "comm").write_text("java\n")
    (base / "cmdline").write_bytes(b"java\0Main\0")
    (base / "stat").write_text("40 (java) S 1 40 40 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n")
    slice_uid = FILE_UID.replace("-", "_")
    (base / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{slice_uid}.slice/cri-containerd-{cid}.scope\n"
    )
    (base / "fd" / "3").symlink_to("socket:[4001]")
    source = Source()
    table = ProcessTable(tmp_path, PodDirectory(tmp_path, tmp_path, api=source))
    assert table.lookup({4001})[4001].pod is None  # the API's list is not in yet, no files
    ref = PodRef(FILE_UID, "payments", "payments-api-1", (("team", "pay"),))
    source.pods[FILE_UID] = ref
    assert table.lookup({4001})[4001].pod == ref
    changed = PodRef(FILE_UID, "payments", "payments-api-1", (("team", "billing"),))
    source.pods[FILE_UID] = changed
    assert table.info(40).pod == changed
