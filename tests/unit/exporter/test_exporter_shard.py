from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from streaming.errors import ConfigError
from streaming.exporter.shard import Shard, parse_shard, series_of, shard_of
from streaming.schema.aggregates import client_id, series_key
from streaming.schema.findings import finding_key, series_of_finding_key

IDENTITIES = [
    ("client", "web-1", "orders", "prod", "2", None),
    ("client", "h:ost|1", "app%20x", "", "b-1.example", None),
    ("client", "web-1", "a:b:c", "prod", "*", None),
    ("broker", "kafka-2", "kafka-broker", "prod", "2", "10.1.2.3"),
    ("broker", "kafka-2", "kafka-broker", "prod", "2", "fe80::1%eth0"),
    ("broker", "kafka-2", "kafka-broker", None, "2", None),
]


@pytest.mark.parametrize("identity", IDENTITIES)
def test_a_finding_key_names_the_series_key_of_its_series(identity) -> None:
    side, host, app, cluster, broker, peer = identity
    key = finding_key("idle_churn", client_id(side, host, app, peer), cluster, broker)
    assert series_of_finding_key(key) == series_key(side, host, app, cluster, broker, peer)


def test_a_key_of_another_shape_names_no_series() -> None:
    assert series_of_finding_key("no-bars") is None
    assert series_of_finding_key("kind|client-without-colons|c|b") is None
    assert series_of("findings", None) is None and series_of("job_status", b"j") is None


def test_every_message_of_a_series_goes_to_exactly_one_shard_with_its_findings() -> None:
    shards = [Shard(i, 3) for i in range(3)]
    for n in range(300):
        identity = ("client", f"host-{n}", f"app-{n % 7}", "prod", str(n % 5), None)
        agg_key = series_key(*identity).encode()
        side, host, app, cluster, broker, peer = identity
        f_key = finding_key("close_wait_buildup", client_id(side, host, app, peer), cluster, broker)
        owners = [s.index for s in shards if s.owns("aggregates", agg_key)]
        assert len(owners) == 1
        assert [s.index for s in shards if s.owns("findings", f_key.encode())] == owners


def test_job_status_goes_to_every_shard_and_a_keyless_message_to_shard_zero() -> None:
    shards = [Shard(i, 4) for i in range(4)]
    assert all(s.owns("job_status", b"connmon-job|aggregates") for s in shards)
    assert [s.index for s in shards if s.owns("aggregates", None)] == [0]
    assert Shard().owns("aggregates", b"anything")


def test_shards_get_even_shares() -> None:
    shares = Counter(shard_of(f"client|host-{n}|app|prod|{n % 12}", 4) for n in range(20_000))
    assert set(shares) == {0, 1, 2, 3}
    assert max(shares.values()) / min(shares.values()) < 1.1


def test_the_split_is_the_same_in_every_process() -> None:
    keys = [f"client|host-{n}|app|prod|{n % 12}" for n in range(50)]
    code = (
        "import sys; from streaming.exporter.shard import shard_of; "
        "print([shard_of(k, 7) for k in sys.argv[1:]])"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, *keys],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert out.strip() == str([shard_of(k, 7) for k in keys])


@pytest.mark.parametrize(
    ("index", "count", "expected"),
    [("0", 1, Shard(0, 1)), ("2", 4, Shard(2, 4)), ("connmon-exporter-3", 4, Shard(3, 4))],
)
def test_shard_settings(index, count, expected) -> None:
    assert parse_shard(index, count) == expected


@pytest.mark.parametrize(
    ("index", "count", "setting"),
    [
        ("4", 4, "shard-index"),
        ("exporter", 2, "shard-index"),
        ("0", 0, "shards"),
        ("-1", 4, "shard-index"),
        ("\u00b2", 4, "shard-index"),
        ("exporter-", 4, "shard-index"),
    ],  # fmt: skip
)
def test_wrong_shard_settings_name_themselves(index, count, setting) -> None:
    with pytest.raises(ConfigError, match=f"^{setting}:"):
        parse_shard(index, count)
