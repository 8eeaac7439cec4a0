"""Endpoint maps and the pure socket classification."""

from __future__ import annotations

import pytest

from streaming.agent.kafka_meta import (
    ClusterEndpoints,
    MetadataRefresher,
    build_map,
    classify,
    split_host_port,
)
from streaming.agent.records import ESTABLISHED, SocketRecord

HOSTS = {"kafka-1": ["10.0.0.1", "fd00::1"], "kafka-2": ["10.0.0.2"], "boot": ["10.0.0.9"]}


def resolver(host: str, port: int) -> list[str]:
    return HOSTS.get(host, [host])


def sock(src: str, sport: int, dst: str, dport: int) -> SocketRecord:
    return SocketRecord(2, ESTABLISHED, src, sport, dst, dport, 1, 0)


def test_client_side_broker_ids_bootstrap_and_every_address() -> None:
    em = build_map(
        [
            ClusterEndpoints(
                "prod",
                brokers={1: "kafka-1:9092", 2: "kafka-2:9092"},
                bootstrap=("kafka-1:9092", "boot:9092"),
            )
        ],
        resolver,
    )
    c = classify(sock("10.1.1.1", 40000, "10.0.0.1", 9092), em)
    assert (c.cluster, c.side, c.broker_id, c.broker_endpoint, c.bootstrap) == (
        "prod",
        "client",
        1,
        "kafka-1:9092",
        False,
    )
    assert classify(sock("fd00::9", 40000, "fd00::1", 9092), em).broker_id == 1
    boot = classify(sock("10.1.1.1", 40001, "10.0.0.9", 9092), em)
    assert boot.bootstrap and boot.broker_id is None and boot.broker_endpoint == "boot:9092"
    assert classify(sock("10.1.1.1", 40002, "10.0.0.2", 443), em) is None
    assert em.ports() == {9092}


def test_broker_side_by_listener_port() -> None:
    em = build_map(
        [ClusterEndpoints("prod", static=((3, "10.0.0.3:9093"),), listener_ports=(9093,))],
        resolver,
    )
    c = classify(sock("10.0.0.3", 9093, "10.5.5.5", 51000), em)
    assert (c.side, c.broker_id, c.broker_endpoint, c.peer_host) == (
        "broker",
        3,
        "10.0.0.3:9093",
        "10.5.5.5",
    )
    # The broker's own outgoing connection to another broker is client side.
    em2 = build_map(
        [
            ClusterEndpoints(
                "prod", static=((4, "10.0.0.4:9093"),), listener_ports=(9093,), local_broker_id=3
            )
        ],
        resolver,
    )
    out = classify(sock("10.0.0.3", 52000, "10.0.0.4", 9093), em2)
    assert (out.side, out.broker_id) == ("client", 4)
    inbound = classify(sock("10.0.0.3", 9093, "10.0.0.4", 52001), em2)
    assert (inbound.side, inbound.broker_id, inbound.peer_host) == ("broker", 3, "10.0.0.4")


def test_several_clusters() -> None:
    em = build_map(
        [
            ClusterEndpoints("a", brokers={1: "kafka-1:9092"}),
            ClusterEndpoints("b", brokers={1: "kafka-2:9092"}),
        ],
        resolver,
    )
    assert classify(sock("1.1.1.1", 1, "10.0.0.1", 9092), em).cluster == "a"
    assert classify(sock("1.1.1.1", 1, "10.0.0.2", 9092), em).cluster == "b"


def test_split_host_port() -> None:
    assert split_host_port("[::1]:9092") == ("::1", 9092)
    assert split_host_port("SASL_SSL://kafka:9093") == ("kafka", 9093)
    with pytest.raises(ValueError, match="kafka"):
        split_host_port("kafka")


def test_refresher_keeps_old_map_when_a_cluster_is_down() -> None:
    calls: list[str] = []

    def fetch(bootstrap: str, conf, timeout_s: float) -> dict[int, str]:
        calls.append(bootstrap)
        if len(calls) > 1:
            raise RuntimeError("all brokers down")
        return {1: "127.0.0.1:9092"}

    stamps: list[str] = []
    r = MetadataRefresher(
        [ClusterEndpoints("prod", bootstrap=("127.0.0.1:9092",))],
        {"prod": "127.0.0.1:9092"},
        {},
        {"prod": 30.0},
        on_refresh=lambda name, ts: stamps.append(name),
        fetch=fetch,
    )
    assert r.current().endpoints[("127.0.0.1", 9092)].bootstrap
    assert r.refresh_due(now=0.0)
    assert r.current().endpoints[("127.0.0.1", 9092)].broker_id == 1
    assert not r.refresh_due(now=10.0)  # not due yet
    assert not r.refresh_due(now=31.0)  # due, fails: keeps the map
    assert r.current().endpoints[("127.0.0.1", 9092)].broker_id == 1
    assert stamps == ["prod"]
