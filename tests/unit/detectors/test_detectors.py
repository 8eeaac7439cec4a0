"""Tables of aggregates -> findings for each detector, including the no-finding cases."""

from __future__ import annotations

from typing import Any

import pytest

from streaming.detectors import (
    DETECTORS,
    close_wait_buildup,
    connection_storm,
    detect_all,
    duplicate_connections,
    idle_churn,
    idle_zombie,
    time_wait_pileup,
)
from streaming.detectors.config import DEFAULT, DetectorConfig
from streaming.schema.aggregates import Aggregate
from streaming.schema.findings import KINDS

CFG = DetectorConfig()


def make_agg(minute: int = 0, **fields: Any) -> Aggregate:
    """A client-side window ``minute`` minutes after 05:00 UTC."""
    base: dict[str, Any] = {
        "side": "client",
        "host": "web-1",
        "app": "orders",
        "broker": "2",
        "broker_id": 2,
        "broker_endpoint": "10.0.0.12:9092",
        "window_start": f"2026-11-21T05:{minute:02d}:00.000Z",
        "window_end": f"2026-11-21T05:{minute + 1:02d}:00.000Z",
        "sockets": {"ESTABLISHED": 1},
    }
    base.update(fields)
    return Aggregate(**base)


def _sev(findings):
    return [f.severity for f in findings]


def test_every_kind_has_one_detector():
    assert tuple(DETECTORS) == KINDS


# ---- close_wait_buildup ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, []),
        ({"close_wait_count": 3, "close_wait_oldest_age_s": 0.02}, []),  # healthy: ms-lived
        ({"close_wait_count": 1, "close_wait_oldest_age_s": 29.9}, []),  # within grace
        ({"close_wait_count": 1, "close_wait_oldest_age_s": 30.0}, ["warning"]),
        ({"close_wait_count": 19, "close_wait_oldest_age_s": 400.0}, ["warning"]),
        ({"close_wait_count": 20, "close_wait_oldest_age_s": 400.0}, ["critical"]),
        (
            {
                "close_wait_count": 2,
                "close_wait_oldest_age_s": 90.0,
                "close_wait_slope_per_s": 0.06,
            },
            ["critical"],
        ),
        (
            {
                "close_wait_count": 2,
                "close_wait_oldest_age_s": 90.0,
                "close_wait_slope_per_s": 0.01,
            },
            ["warning"],
        ),
    ],
)
def test_close_wait_table(fields, expected):
    assert _sev(close_wait_buildup.detect(make_agg(**fields), CFG)) == expected


def test_close_wait_finding_names_the_leak_and_the_settings():
    (f,) = close_wait_buildup.detect(
        make_agg(close_wait_count=7, close_wait_oldest_age_s=512.0), CFG
    )
    assert f.kind == "close_wait_buildup" and f.status == "firing"
    assert f.evidence["close_wait_count"] == 7
    assert f.evidence["close_wait_oldest_age_s"] == 512.0
    assert "7 socket(s) in CLOSE_WAIT toward broker 2" in f.summary
    assert "Sarama" in f.recommendation and "poll()" in f.recommendation
    assert "connections.max.idle.ms" in f.recommendation
    assert f.key == "close_wait_buildup|client:web-1:orders||2"


def test_close_wait_trend_across_windows_makes_it_critical():
    history = [
        make_agg(m, close_wait_count=m * 5, close_wait_oldest_age_s=60.0 * m) for m in range(1, 5)
    ]
    now = make_agg(5, close_wait_count=25 - 6, close_wait_oldest_age_s=300.0)
    assert close_wait_buildup.trend(now, history) == pytest.approx(
        3.8 / 60
    )  # least squares: 3.8 sockets per minute
    assert _sev(close_wait_buildup.detect(now, CFG, history)) == ["critical"]
    assert _sev(close_wait_buildup.detect(now, CFG, [])) == ["warning"]


def test_close_wait_broker_side_recommendation_is_about_the_broker():
    agg = make_agg(
        side="broker",
        app="kafka-broker",
        peer_host="10.0.1.5",
        close_wait_count=4,
        close_wait_oldest_age_s=100.0,
    )
    (f,) = close_wait_buildup.detect(agg, CFG)
    assert "10.0.1.5" in f.summary and "num.network.threads" in f.recommendation
    assert f.key == "close_wait_buildup|broker:web-1:kafka-broker:10.0.1.5||2"


# ---- idle_zombie -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_idle_s": None}, []),
        ({"max_idle_s": 539.0}, []),  # a Java client's idle expiry will close it
        ({"max_idle_s": 1799.0}, []),
        ({"max_idle_s": 1800.0}, ["warning"]),
        ({"max_idle_s": 90000.0, "sockets": {"CLOSE_WAIT": 1}}, []),  # not ESTABLISHED
    ],
)
def test_idle_zombie_table(fields, expected):
    assert _sev(idle_zombie.detect(make_agg(**fields), CFG)) == expected


def test_idle_zombie_recommends_finite_idle_expiry():
    (f,) = idle_zombie.detect(make_agg(max_idle_s=4000.0), CFG)
    assert "connections.max.idle.ms" in f.recommendation and "librdkafka" in f.recommendation
    assert f.evidence["max_idle_s"] == 4000.0


# ---- duplicate_connections ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # consumer: data + coordinator connection, both busy -> expected, no finding
        ({"sockets": {"ESTABLISHED": 2}, "dup_processes": 1, "dup_max_idle_s": 2.5}, []),
        ({"sockets": {"ESTABLISHED": 2}, "dup_processes": 0, "dup_max_idle_s": None}, []),
        ({"sockets": {"ESTABLISHED": 2}, "dup_processes": 1, "dup_max_idle_s": 119.0}, []),
        # bootstrap leftover: idle, will be reaped by the client's idle expiry
        ({"sockets": {"ESTABLISHED": 2}, "dup_processes": 1, "dup_max_idle_s": 200.0}, ["info"]),
        # beyond the client's idle expiry: nothing reaps it
        ({"sockets": {"ESTABLISHED": 3}, "dup_processes": 1, "dup_max_idle_s": 900.0}, ["warning"]),
        # broker side: every socket belongs to the broker process
        (
            {"side": "broker", "peer_host": "c", "dup_processes": 1, "dup_max_idle_s": 900.0},
            [],
        ),
    ],
)
def test_duplicate_table(fields, expected):
    assert _sev(duplicate_connections.detect(make_agg(**fields), CFG)) == expected


def test_duplicate_identifies_the_idle_extra_socket():
    agg = make_agg(
        sockets={"ESTABLISHED": 2},
        dup_processes=1,
        dup_max_idle_s=300.0,
        dup_conn="10.0.1.5:40001->10.0.0.12:9092",
    )
    (f,) = duplicate_connections.detect(agg, CFG)
    assert "10.0.1.5:40001->10.0.0.12:9092" in f.summary
    assert "bootstrap" in f.recommendation


# ---- connection_storm --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"opens": 2, "short_lived": 0}, []),
        ({"opens": 29, "short_lived": 0}, []),
        ({"opens": 30}, ["warning"]),
        ({"opens": 180, "short_lived": 180}, ["critical"]),
        ({"short_lived": 40}, ["warning"]),
        ({"syn_sent_count": 12}, ["warning"]),
        ({"host_attempt_fails_per_min": 59.0, "app": "*", "broker": "*"}, []),
        ({"host_attempt_fails_per_min": 400.0, "app": "*", "broker": "*"}, ["critical"]),
        # The host's counter says nothing about one client x broker pair (healthy baseline).
        ({"host_attempt_fails_per_min": 400.0}, []),
        ({"opens": 15, "window_s": 30.0}, ["warning"]),  # per minute, not per window
    ],
)
def test_storm_table(fields, expected):
    assert _sev(connection_storm.detect(make_agg(**fields), CFG)) == expected


def test_storm_recommends_backoff_settings():
    (f,) = connection_storm.detect(make_agg(opens=200, short_lived=190), CFG)
    assert "reconnect.backoff.ms" in f.recommendation
    assert "reconnect.backoff.max.ms" in f.recommendation
    assert f.evidence["opens_per_min_x_threshold"] == pytest.approx(200 / 30, abs=0.01)
    assert "syn_sent_count_x_threshold" not in f.evidence
    assert all(v is None or isinstance(v, int | float) for v in f.evidence.values())


@pytest.mark.parametrize(
    ("fields", "cause", "says", "never"),
    [
        # A new producer per request: every connection succeeds and the client closes it.
        ({"opens": 120, "short_lived": 118, "closes_local": 118, "closes_peer": 2},
         "client_closes", "reuse", "backoff"),
        # The broker drops them: authentication or connection limits.
        ({"opens": 120, "short_lived": 118, "closes_local": 3, "closes_peer": 115},
         "peer_closes", "broker log", "reuse"),
        # Nothing answers.
        ({"opens": 60, "syn_sent_count": 25}, "unanswered", "unreachable", "reuse"),
        # Closes split between both sides: no claim about who closes.
        ({"opens": 120, "short_lived": 100, "closes_local": 50, "closes_peer": 50},
         "unknown", "find why connections fail", "reuse"),
    ],
)  # fmt: skip
def test_storm_advice_follows_the_evidence(fields, cause, says, never):
    agg = make_agg(**fields)
    assert connection_storm.cause(agg, CFG) == cause
    (f,) = connection_storm.detect(agg, CFG)
    assert says in f.recommendation and never not in f.recommendation
    assert f.evidence["closes_local"] == fields.get("closes_local", 0)


def test_host_level_storm_is_worded_host_wide_and_names_no_broker():
    agg = make_agg(host_attempt_fails_per_min=400.0, app="*", broker="*")
    (f,) = connection_storm.detect(agg, CFG)
    assert "every process and every port" in f.summary
    assert "broker *" not in f.summary and "names no process and no broker" in f.recommendation


# ---- time_wait_pileup --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("count", "expected"),
    [(0, []), (199, []), (200, ["warning"]), (1999, ["warning"]), (2000, ["critical"])],
)
def test_time_wait_table(count, expected):
    assert _sev(time_wait_pileup.detect(make_agg(time_wait_count=count), CFG)) == expected


def test_time_wait_sides_get_their_own_advice():
    (c,) = time_wait_pileup.detect(make_agg(time_wait_count=600), CFG)
    assert "per request" in c.recommendation
    b = make_agg(side="broker", app="kafka-broker", peer_host="10.0.1.5", time_wait_count=600)
    (f,) = time_wait_pileup.detect(b, CFG)
    assert "broker" in f.recommendation and "10.0.1.5" in f.summary


# ---- idle_churn --------------------------------------------------------------------------------
def _cycle(minute, closes=1, opens=1, by="local", idle=540.0):
    return make_agg(
        minute,
        closes_after_idle=closes,
        closes_after_idle_local=closes if by == "local" else 0,
        closes_after_idle_peer=closes if by == "peer" else 0,
        opens=opens,
        idle_at_close_max_s=idle,
    )


def test_idle_churn_cycles_counts_close_then_reopen():
    assert idle_churn.cycles([_cycle(0, 1, 0), _cycle(1, 0, 1)]) == 1
    assert idle_churn.cycles([_cycle(0, 0, 1), _cycle(1, 1, 0)]) == 0  # open before any close
    assert idle_churn.cycles([_cycle(0, 1, 1), _cycle(11, 1, 1)]) == 2


def test_idle_churn_needs_min_cycles_within_the_window():
    history = [_cycle(0)]
    now = _cycle(11)
    assert _sev(idle_churn.detect(now, CFG, history)) == ["warning"]
    assert idle_churn.detect(now, CFG, []) == []  # one cycle only
    # the earlier cycle is outside a 10-minute churn window
    assert idle_churn.detect(now, CFG.replace(idle_churn_window_s=600.0), history) == []


def test_idle_churn_other_series_do_not_count():
    other = make_agg(0, broker="3", closes_after_idle=1, opens=1)
    assert idle_churn.detect(_cycle(11), CFG, [other]) == []


def test_idle_churn_says_which_side_timer_fired():
    (client,) = idle_churn.detect(_cycle(11, by="local"), CFG, [_cycle(0, by="local")])
    assert "client's own connections.max.idle.ms" in client.recommendation
    (broker,) = idle_churn.detect(_cycle(11, by="peer"), CFG, [_cycle(0, by="peer", idle=240.0)])
    assert "load balancer" in broker.recommendation
    assert broker.evidence["closes_after_idle_peer"] == 2


# ---- all together ------------------------------------------------------------------------------
def test_healthy_consumer_window_has_no_finding():
    agg = make_agg(
        sockets={"ESTABLISHED": 2}, max_idle_s=3.0, dup_processes=1, dup_max_idle_s=3.0, opens=0
    )
    assert detect_all(agg, DEFAULT) == {}


def test_detect_all_maps_each_kind_to_its_finding():
    agg = make_agg(close_wait_count=25, close_wait_oldest_age_s=400.0, time_wait_count=250)
    found = detect_all(agg, DEFAULT)
    assert list(found) == ["close_wait_buildup", "time_wait_pileup"]
    assert all(f.kind == kind for kind, f in found.items())


def test_config_replace_rejects_unknown_names():
    with pytest.raises(ValueError, match="close_wait_grace"):
        DEFAULT.replace(close_wait_grace=1)
