"""Series, finding and window keys: unchanged for usual names, distinct for distinct series
even when names contain the separators."""

from __future__ import annotations

import itertools

from streaming.detectors.config import DetectorConfig
from streaming.job.open_windows import window_key
from streaming.job.tracker import Tracker
from streaming.schema.aggregates import Aggregate, client_id, series_key
from streaming.schema.findings import finding_key

# Names built from the separators and the escape character, so that plain joining would
# make some of them collide.
PIECES = ("a", "b", "|", ":", "%", "%7C", "%3A", "")
NAMES = sorted({"".join(p) for p in itertools.product(PIECES, repeat=2)})


def test_usual_names_give_the_documented_keys():
    assert series_key("client", "web-1", "orders", "prod", "10.0.0.11:9092", None) == (
        "client|web-1|orders|prod|10.0.0.11:9092"
    )
    assert series_key("broker", "b-1", "kafka-broker", None, "1", "2001:db8::5") == (
        "broker|b-1|kafka-broker||1|2001:db8::5"
    )
    assert client_id("broker", "b-1", "kafka-broker", "2001:db8::5") == (
        "broker:b-1:kafka-broker:2001:db8::5"
    )
    client = client_id("client", "web-1", "orders", None)
    assert finding_key("idle_churn", client, "prod", "2") == "idle_churn|client:web-1:orders|prod|2"


def test_the_same_broker_id_in_two_clusters_is_two_series():
    a, b = (series_key("client", "h", "mm2", c, "1", None) for c in ("east", "west"))
    assert a != b
    client = client_id("client", "h", "mm2", None)
    assert finding_key("idle_churn", client, "east", "1") != finding_key(
        "idle_churn", client, "west", "1"
    )


def test_distinct_series_never_share_a_key():
    series: dict[str, tuple] = {}
    findings: dict[str, tuple] = {}
    brokers = ("1", "h:9092", "x|y", "%")
    for host, app, broker in itertools.product(NAMES, NAMES, brokers):
        for peer, cluster in itertools.product((None, "10.0.0.5", "::1", "a|b"), (None, "c|1")):
            ident = ("broker", host, app, cluster, broker, peer)
            assert series.setdefault(series_key(*ident), ident) == ident
            client = client_id("broker", host, app, peer)
            key = finding_key("idle_churn", client, cluster, broker)
            assert findings.setdefault(key, ident) == ident


def test_window_keys_are_distinct_for_distinct_series():
    seen: dict[str, tuple] = {}
    for host, app in itertools.product(NAMES, NAMES):
        part = {"window_start_s": 60.0, "side": "client", "host": host, "app": app,
                "cluster": "c", "broker": "1", "peer_host": None}  # fmt: skip
        ident = (host, app)
        assert seen.setdefault(window_key(part), ident) == ident
    plain = {"window_start_s": 60.0, "side": "client", "host": "web-1", "app": "orders",
             "cluster": "prod", "broker": "1", "peer_host": None}  # fmt: skip
    assert window_key(plain) == "60.0|client|web-1|orders|prod|1|"


def _leak(host: str, app: str) -> Aggregate:
    return Aggregate(side="client", host=host, app=app, broker="2", broker_id=2,
                     window_start="2026-11-21T05:00:00.000Z",
                     window_end="2026-11-21T05:01:00.000Z", sockets={"CLOSE_WAIT": 3},
                     close_wait_count=3, close_wait_oldest_age_s=200.0)  # fmt: skip


def test_findings_of_two_series_whose_plain_keys_would_collide_are_kept_apart():
    t = Tracker(DetectorConfig(), clock=lambda a: a.window_end)
    out = t.process([_leak("web:1", "orders"), _leak("web", "1:orders")], {})
    keys = [f.key for f in out.findings if f.kind == "close_wait_buildup"]
    assert len(keys) == 2 and len(set(keys)) == 2
    assert set(t.findings) == set(keys)  # the tracker remembers them under the published keys
