"""Tables of aggregates -> findings for each detector, including the no-finding cases."""

from __future__ import annotations

import dataclasses
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
    resolve_windows,
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
def _dup(**fields: Any) -> Aggregate:
    base = {"sockets": {"ESTABLISHED": 2}, "dup_processes": 1}
    return make_agg(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # no process with more than one connection
        ({"dup_processes": 0}, []),
        # consumer: data + coordinator connection, both busy
        ({"dup_max_idle_s": 2.5, "dup_used_max_idle_s": 2.5, "dup_used_active_idle_s": 0.1}, []),
        # a Java client's bootstrap leftover: unused since it opened -> counted, no finding
        ({"dup_max_idle_s": 300.0, "dup_unused_processes": 1}, []),
        # a second client, used, idle just below / at the threshold, the process busy
        ({"dup_used_max_idle_s": 119.0, "dup_used_active_idle_s": 0.2}, []),
        ({"dup_used_max_idle_s": 120.0, "dup_used_active_idle_s": 0.2}, ["info"]),
        ({"dup_used_max_idle_s": 900.0, "dup_used_active_idle_s": 1.0}, ["info"]),
        # every connection of the process idle: stalled or leaking, not a second client
        ({"dup_used_max_idle_s": 900.0, "dup_used_active_idle_s": 400.0}, []),
        ({"dup_used_max_idle_s": 900.0, "dup_used_active_idle_s": None}, []),
        # CLOSE_WAIT toward the broker: close_wait_buildup owns it
        (
            {
                "dup_used_max_idle_s": 900.0,
                "dup_used_active_idle_s": 1.0,
                "close_wait_count": 2,
            },
            [],
        ),
        # Kafka's own processes run several clients by design
        *[
            (
                {"dup_used_max_idle_s": 900.0, "dup_used_active_idle_s": 1.0, "process_role": r},
                [],
            )
            for r in ("broker", "controller", "connect", "mirrormaker", "streams")
        ],
        # broker side: every socket belongs to the broker process
        (
            {
                "side": "broker",
                "peer_host": "c",
                "dup_used_max_idle_s": 900.0,
                "dup_used_active_idle_s": 1.0,
            },
            [],
        ),
    ],
)
def test_duplicate_table(fields, expected):
    assert _sev(duplicate_connections.detect(_dup(**fields), CFG)) == expected


def test_duplicate_names_the_idle_extra_socket_and_blames_no_library():
    agg = _dup(
        dup_max_idle_s=300.0,
        dup_used_max_idle_s=300.0,
        dup_used_active_idle_s=0.5,
        dup_conn="10.0.1.5:40001->10.0.0.12:9092",
    )
    (f,) = duplicate_connections.detect(agg, CFG)
    assert "10.0.1.5:40001->10.0.0.12:9092" in f.summary
    assert "more than one Kafka client" in f.summary
    assert "bootstrap" not in f.recommendation
    assert "one producer per process" in f.recommendation


def test_duplicate_resolves_only_after_its_own_quiet_time():
    cfg = CFG.replace(window_s=60.0, duplicate_resolve_after_s=660.0, resolve_after_windows=2)
    assert resolve_windows("duplicate_connections", cfg) == 11
    assert resolve_windows("close_wait_buildup", cfg) == 2
    assert resolve_windows("duplicate_connections", cfg.replace(duplicate_resolve_after_s=0)) == 2


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
        # eBPF: nearly every connect refused (a stopped broker, a wrong port).
        ({"opens": 300, "short_lived": 300, "closes_unknown": 290, "closes_local": 10,
          "connects_failed": 290, "connects_refused": 290}, "refused", "nothing listens",
         "reuse"),
        # eBPF: connects that fail without an answer or that the client gives up on.
        ({"opens": 60, "short_lived": 60, "closes_unknown": 60, "connects_failed": 60,
          "connects_refused": 5}, "failed", "unreachable", "reuse"),
        # A few refused connects among a client-per-request pattern do not change the cause.
        ({"opens": 120, "short_lived": 118, "closes_local": 110, "closes_unknown": 8,
          "connects_failed": 8, "connects_refused": 8}, "client_closes", "reuse", "refused"),
    ],
)  # fmt: skip
def test_storm_advice_follows_the_evidence(fields, cause, says, never):
    agg = make_agg(**fields)
    assert connection_storm.cause(agg, CFG) == cause
    (f,) = connection_storm.detect(agg, CFG)
    assert says in f.recommendation and never not in f.recommendation
    assert f.evidence["closes_local"] == fields.get("closes_local", 0)
    per_min = 60.0 / agg.window_s
    assert f.evidence["connects_failed_per_min"] == fields.get("connects_failed", 0) * per_min
    assert ("(refused)" in f.summary) == (cause == "refused")


def test_host_level_storm_is_worded_host_wide_and_names_no_broker():
    agg = make_agg(host_attempt_fails_per_min=400.0, app="*", broker="*")
    (f,) = connection_storm.detect(agg, CFG)
    assert "every process and every port" in f.summary
    assert "broker *" not in f.summary and "names no process and no broker" in f.recommendation


def _at(minute: int, second: float, **fields: Any) -> Aggregate:
    """``make_agg`` whose newest event came ``second`` seconds into its window."""
    return make_agg(minute, last_event_time=f"2026-11-21T05:{minute:02d}:{second:06.3f}Z", **fields)


def test_a_storms_rate_is_over_the_last_window_of_event_time():
    """20 s into a window, the span takes two thirds of the window before: 90 opens there
    and 30 here are 90/min, as 90/min the whole time would be."""
    before = make_agg(0, opens=90, short_lived=90, closes_local=90)
    now = _at(1, 20.0, opens=30, short_lived=30, closes_local=30)
    assert connection_storm.rates(now, [before])["opens_per_min"] == pytest.approx(90.0)
    assert connection_storm.rates(now)["opens_per_min"] == pytest.approx(30.0)  # nothing before
    # The cause is the span's too: a second in, none closed yet in this window.
    early = _at(1, 1.0, opens=2)
    assert connection_storm.cause(early, CFG, [before]) == connection_storm.CLIENT_CLOSES
    (f,) = connection_storm.detect(early, CFG, [before])
    assert "new client per request" in f.summary
    # Once the newest event reached the window's end, the window before is out of the span.
    full = _at(1, 59.999, opens=30)
    assert connection_storm.rates(full, [before])["opens_per_min"] == pytest.approx(30.0, abs=0.1)


def test_a_burst_counts_once_and_is_never_extrapolated():
    """Twenty connections in a window's first second: 20 in the last minute, not 1,200/min."""
    burst = _at(0, 1.0, opens=20, short_lived=20, closes_local=20)
    assert connection_storm.rates(burst)["opens_per_min"] == pytest.approx(20.0)
    assert connection_storm.detect(burst, CFG) == []
    # ... nor counted twice in the window after it.
    after = _at(1, 30.0, opens=0)
    assert connection_storm.rates(after, [burst])["opens_per_min"] == pytest.approx(10.0)


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
def _cycle(minute, reopens=1, idle=540.0, hi=None, by="local", **fields):
    return make_agg(
        minute,
        closes_after_idle=reopens,
        closes_after_idle_local=reopens if by == "local" else 0,
        closes_after_idle_peer=reopens if by == "peer" else 0,
        opens=reopens,
        reopens_after_idle=reopens,
        reopen_idle_min_s=idle,
        reopen_idle_max_s=idle if hi is None else hi,
        idle_at_close_max_s=idle if hi is None else hi,
        **fields,
    )


def test_idle_churn_counts_reopens_of_one_timer():
    cycles = idle_churn.timer_cycles
    assert cycles([_cycle(0), _cycle(11)], CFG) == (2, 540.0, 540.0)
    # the agent samples idle every few seconds: one timer reads a few seconds apart
    assert cycles([_cycle(0, idle=538.0), _cycle(11, idle=545.0)], CFG)[0] == 2
    # closes at unrelated idle times (a restart, a fault) are not one timer
    assert cycles([_cycle(0, idle=250.0), _cycle(11, idle=540.0)], CFG)[0] == 1
    # the largest agreeing set wins; a window mixing both is left out
    ws = [_cycle(0), _cycle(5, idle=300.0), _cycle(11), _cycle(20, idle=300.0, hi=541.0)]
    assert cycles(ws, CFG) == (2, 540.0, 540.0)
    assert cycles([make_agg(0, opens=3, closes_after_idle=3)], CFG) == (0, None, None)


@pytest.mark.parametrize(
    ("history", "now", "expected"),
    [
        ([_cycle(0)], _cycle(11), ["warning"]),
        ([], _cycle(11), []),  # one cycle only
        ([], _cycle(11, reopens=2), ["warning"]),  # two connections of one client
        # opens and idle closes that the agent did not pair (another process re-opened: a
        # redeploy; or a re-open after a broker drop): no cycle
        (
            [make_agg(0, closes_after_idle=1, opens=1)],
            make_agg(11, closes_after_idle=1, opens=1),
            [],
        ),
        # a broker restarting twice: closes at whatever idle the restarts found
        ([_cycle(0, idle=130.0)], _cycle(11, idle=410.0), []),
    ],
)
def test_idle_churn_table(history, now, expected):
    assert _sev(idle_churn.detect(now, CFG, history)) == expected


def test_idle_churn_needs_min_cycles_within_the_window():
    history = [_cycle(0)]
    now = _cycle(11)
    # the earlier cycle is outside a 10-minute churn window
    assert idle_churn.detect(now, CFG.replace(idle_churn_window_s=600.0), history) == []


def test_idle_churn_other_series_do_not_count():
    assert idle_churn.detect(_cycle(11), CFG, [_cycle(0, broker="3")]) == []


def test_idle_churn_says_which_side_timer_fired():
    (client,) = idle_churn.detect(_cycle(11, by="local"), CFG, [_cycle(0, by="local")])
    assert "client's own connections.max.idle.ms" in client.recommendation
    (broker,) = idle_churn.detect(_cycle(11, by="peer"), CFG, [_cycle(0, by="peer")])
    assert "load balancer" in broker.recommendation
    assert broker.evidence["closes_after_idle_peer"] == 2


def test_idle_churn_mentions_broker_drops_it_left_out():
    (f,) = idle_churn.detect(_cycle(11, closes_broker_drop=3), CFG, [_cycle(0)])
    assert "3 close(s) by a restarting or failing broker are not counted" in f.summary
    assert f.evidence["closes_broker_drop"] == 3


def test_idle_churn_broker_side_warns_when_an_address_hides_many_clients():
    kw = {"side": "broker", "app": "kafka-broker", "peer_host": "10.0.9.1", "by": "peer"}
    (one,) = idle_churn.detect(_cycle(11, **kw), CFG, [_cycle(0, **kw)])
    assert "share" not in one.summary
    many = {**kw, "sockets": {"ESTABLISHED": 40}}
    (f,) = idle_churn.detect(_cycle(11, **many), CFG, [_cycle(0, **many)])
    assert "40 connections" in f.summary and "NAT" in f.summary
    assert "client hosts" in f.recommendation


# ---- all together ------------------------------------------------------------------------------
def test_healthy_consumer_window_has_no_finding():
    agg = make_agg(
        sockets={"ESTABLISHED": 2},
        max_idle_s=3.0,
        dup_processes=1,
        dup_max_idle_s=3.0,
        dup_used_max_idle_s=3.0,
        dup_used_active_idle_s=0.1,
        opens=0,
    )
    assert detect_all(agg, DEFAULT) == {}


@pytest.mark.parametrize(
    ("version", "closes_local", "closes_peer", "named"),
    [
        ("3.0.0", 3, 115, True),  # in 2.7.0-3.2.3, the broker closes: the known bug's storm
        ("3.0.0", 115, 3, False),  # in range, but the client closes: another cause
        ("3.3.0", 3, 115, False),  # the release that fixed it
    ],
)
def test_a_storm_names_a_known_bug_of_the_release_only_for_the_cause_it_shows(
    version, closes_local, closes_peer, named
):
    agg = make_agg(
        opens=120, short_lived=118, closes_local=closes_local, closes_peer=closes_peer,
        client_library="java", client_version=version, client_library_evidence="loaded",
    )  # fmt: skip
    f = detect_all(agg, DEFAULT)["connection_storm"]
    assert ("https://issues.apache.org/jira/browse/KAFKA-13879" in f.recommendation) == named
    # The known bug, with its fix, is what to read first; the storm's own advice follows.
    assert f.recommendation.startswith("Known issue in ") == named


def test_detect_all_maps_each_kind_to_its_finding():
    agg = make_agg(close_wait_count=25, close_wait_oldest_age_s=400.0, time_wait_count=250)
    found = detect_all(agg, DEFAULT)
    assert list(found) == ["close_wait_buildup", "time_wait_pileup"]
    assert all(f.kind == kind for kind, f in found.items())


def test_a_known_librarys_advice_is_carried_and_ends_the_recommendation():
    fields = {"sockets": {"ESTABLISHED": 1}, "max_idle_s": 4000.0}
    plain = detect_all(make_agg(**fields), DEFAULT)["idle_zombie"]
    java = make_agg(client_library="java", client_version="4.1.0", **fields)
    f = detect_all(java, DEFAULT)["idle_zombie"]
    assert f.recommendation.startswith(plain.recommendation)
    assert len(f.recommendation) > len(plain.recommendation)
    assert (f.client_library, f.client_version) == ("java", "4.1.0")
    assert f.to_dict()["client_library"] == "java"
    unknown = make_agg(client_library="unknown", **fields)
    assert detect_all(unknown, DEFAULT)["idle_zombie"].recommendation == plain.recommendation


@pytest.mark.parametrize("kind", ["close_wait_buildup", "idle_zombie"])
def test_a_library_only_installed_where_the_process_runs_gives_no_advice_of_its_own(kind):
    """A plain Python process with raw sockets, in a virtualenv where kafka-python is
    installed: the agent names the package, but nothing shows it is loaded."""
    fields = {
        "close_wait_count": 3,
        "close_wait_oldest_age_s": 400.0,
        "sockets": {"ESTABLISHED": 1},
        "max_idle_s": 4000.0,
    }
    installed = make_agg(
        client_library="kafka-python",
        client_version="2.0.2",
        client_library_evidence="installed",
        **fields,
    )
    loaded = dataclasses.replace(installed, client_library_evidence="loaded")
    unknown = make_agg(**fields)
    quiet = detect_all(installed, DEFAULT)[kind]
    assert "kafka-python" not in quiet.recommendation
    assert quiet.recommendation == detect_all(unknown, DEFAULT)[kind].recommendation
    assert quiet.client_library_evidence == "installed"  # the finding still says what is known
    assert "kafka-python" in detect_all(loaded, DEFAULT)[kind].recommendation


@pytest.mark.parametrize(
    ("library", "version", "says", "never"),
    [
        (None, None, "a known leak in Sarama and kafka-rust", ""),
        ("unknown", None, "a known leak in Sarama and kafka-rust", ""),
        ("sarama", "1.40.1", "lacks the leak fixes", "kafka-rust"),
        ("java", "4.1.0", "stops calling poll()", "Sarama"),
        ("librdkafka", "2.6.0", "is not expected", "Sarama"),
        ("kafka-go", "0.4.47", "kafka.Conn", "Sarama"),
    ],
)
def test_close_wait_advice_leads_with_the_identified_librarys_cause(library, version, says, never):
    agg = make_agg(
        client_library=library,
        client_version=version,
        close_wait_count=25,
        close_wait_oldest_age_s=400.0,
    )
    advice = detect_all(agg, DEFAULT)["close_wait_buildup"].recommendation
    first, _, rest = advice.partition("Restarting the process releases the sockets.")
    assert rest, advice  # the cause, then what releases the sockets
    assert says in first, advice
    assert not never or never not in advice
    assert advice.count(says) == 1


@pytest.mark.parametrize(
    ("library", "version", "per_process", "fires"),
    [
        (None, None, 2, True),  # unknown library: an idle used extra is a second client
        ("java", "4.3.1", 2, True),
        ("kafkajs", "2.2.4", 2, False),  # Fetch + the rest: one client
        ("kafkajs", "2.2.4", 3, True),
        ("kafkajs", "1.16.0", 2, True),  # one connection per broker before 2.0.0
        ("franz-go", "1.22.2", 5, False),  # one per request type
        ("franz-go", "1.22.2", 6, True),
        ("franz-go", None, 4, False),
    ],
)
def test_libraries_with_several_connections_per_client_are_one_client(
    library, version, per_process, fires
):
    agg = make_agg(
        sockets={"ESTABLISHED": per_process},
        dup_processes=1,
        dup_used_max_idle_s=400.0,
        dup_used_active_idle_s=0.2,
        established_max_per_process=per_process,
        client_library=library,
        client_version=version,
    )
    assert bool(detect_all(agg, DEFAULT).get("duplicate_connections")) is fires


def test_config_replace_rejects_unknown_names():
    with pytest.raises(ValueError, match="close_wait_grace"):
        DEFAULT.replace(close_wait_grace=1)


# ---- paused processes --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("stopped", "stopped by a signal"),
        ("traced", "stopped by its tracer"),
        ("frozen", "frozen by its cgroup"),
    ],
)
def test_a_paused_process_is_the_cause_of_its_close_wait_not_the_library(how, says):
    agg = make_agg(
        close_wait_count=3,
        close_wait_oldest_age_s=300.0,
        paused_processes=1,
        paused_how=how,
        client_library="sarama",
        client_version="1.40.0",
        client_library_evidence="loaded",
    )
    (f,) = detect_all(agg, CFG).values()
    assert f.kind == "close_wait_buildup"
    assert says in f.recommendation.replace("held stopped", "stopped")
    assert f.recommendation.startswith("The client process was paused")
    assert "Sarama" not in f.recommendation and "never closed its end" not in f.recommendation
    assert f.summary.endswith(
        f"Its process was {how.replace('traced', 'stopped by a tracer')} in this window."
    )
    assert f.evidence["paused_processes"] == 1
    running = dataclasses.replace(agg, paused_processes=0, paused_how=None)
    (g,) = detect_all(running, CFG).values()
    assert "Sarama" in g.recommendation and "paused" not in g.recommendation


def test_a_paused_process_leads_its_idle_zombie_advice():
    agg = make_agg(max_idle_s=4000.0, paused_processes=2, paused_how="frozen")
    (f,) = idle_zombie.detect(agg, CFG)
    assert f.recommendation.startswith("2 of the client's processes were paused")
    assert "connections.max.idle.ms" in f.recommendation


# ---- connection_storm: recovery ----------------------------------------------------------------
# A burst of connections the client opens and closes itself: "a new client per request" on its own.
_BURST = {"opens": 60, "short_lived": 50, "closes_local": 50}


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        # the process was paused in this window, or in the one just before
        ({}, {"paused_processes": 1, "paused_how": "stopped"}, "resumed"),
        ({"paused_processes": 1, "paused_how": "traced"}, {}, "resumed"),
        # the broker dropped busy connections, or refused connects, in the window before
        ({"closes_broker_drop": 4}, {}, "broker_back"),
        ({"opens": 30, "connects_failed": 30, "connects_refused": 30}, {}, "broker_back"),
        # a few failed connects among many (a churning client out of ephemeral ports): no outage
        ({"opens": 60, "connects_failed": 3, "short_lived": 50, "closes_local": 50}, {}, None),
        ({"syn_sent_count": 12}, {}, "broker_back"),
        ({}, {"closes_broker_drop": 2}, "broker_back"),
        # nothing before: the burst is judged by its cause
        ({}, {}, None),
        # connects still mostly refused: the outage goes on
        ({"closes_broker_drop": 4}, {"connects_failed": 60, "connects_refused": 60}, None),
    ],
)
def test_a_burst_right_after_a_pause_or_an_outage_is_recovery(before, now, expected):
    history = [make_agg(4, **before)]
    agg = make_agg(5, **{**_BURST, **now})
    assert (
        connection_storm.recovering(agg, CFG, history, connection_storm.cause(agg, CFG)) == expected
    )
    (f,) = connection_storm.detect(agg, CFG, history)
    if expected is None:
        assert f.severity != "info" and "Recovery" not in f.recommendation
    else:
        assert f.severity == "info" and f.recommendation.startswith("Recovery, not a new fault")
        assert "new client per request" not in f.summary


@pytest.mark.parametrize(
    ("signal", "now"),
    [
        ({"syn_sent_count": 12}, {}),  # the broker was slow to answer for a moment
        ({"closes_broker_drop": 3}, {}),
        ({"paused_processes": 1, "paused_how": "stopped"}, {}),
        ({}, {"closes_broker_drop": 2}),
    ],
)
def test_a_storm_that_went_on_through_a_stall_is_no_recovery(signal, now):
    """The client stormed before the stall (or the pause): the storm goes on, with its cause,
    instead of turning into a recovery for two windows."""
    history = [make_agg(3, **_BURST), make_agg(4, **{**_BURST, **signal})]
    if now:
        history = history[1:]
        history[0] = make_agg(4, **_BURST)
    agg = make_agg(5, **{**_BURST, **now})
    assert connection_storm.recovering(agg, CFG, history, connection_storm.cause(agg, CFG)) is None
    (f,) = connection_storm.detect(agg, CFG, history)
    assert f.severity == "warning" and "a new client per request" in f.summary
    # Healthy before the same stall: a recovery.
    calm = [make_agg(3), *history[-1:]] if not now else [make_agg(4)]
    assert connection_storm.recovering(agg, CFG, calm, connection_storm.cause(agg, CFG))


def test_recovery_lasts_one_window_after_the_pause():
    paused = make_agg(3, paused_processes=1, paused_how="stopped")
    history = [paused, make_agg(4)]
    (f,) = connection_storm.detect(make_agg(5, **_BURST), CFG, history)
    assert f.severity == "warning" and "a new client per request" in f.summary
    other = make_agg(4, app="billing", paused_processes=1)  # another series' pause
    (g,) = connection_storm.detect(make_agg(5, **_BURST), CFG, [other])
    assert g.severity == "warning"
