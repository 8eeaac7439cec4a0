"""close_wait_buildup's time to file descriptor exhaustion: the prediction, the severity it
sets, and the advice that leads with the deadline."""

from __future__ import annotations

from typing import Any

import pytest

from streaming.detectors import close_wait_buildup
from streaming.detectors.close_wait_buildup import fd_exhaustion_in_s, fd_trend, within
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import Aggregate

CFG = DetectorConfig()


def agg(minute: int = 0, side: str = "client", **fields: Any) -> Aggregate:
    base: dict[str, Any] = {
        "side": side, "host": "web-1", "app": "orders" if side == "client" else "kafka",
        "broker": "2", "broker_id": 2, "peer_host": None if side == "client" else "10.0.1.5",
        "window_start": f"2026-11-21T05:{minute:02d}:00.000Z",
        "window_end": f"2026-11-21T05:{minute + 1:02d}:00.000Z",
        "close_wait_count": 3, "close_wait_oldest_age_s": 120.0,
    }  # fmt: skip
    base.update(fields)
    return Aggregate(**base)


def leak(per_min: float, fds_at_0: int, limit: int, minutes: int = 5) -> list[Aggregate]:
    """Windows of a process whose open descriptors and CLOSE_WAIT sockets grow together."""
    return [
        agg(m, close_wait_count=1 + round(per_min * m), fds_open=fds_at_0 + round(per_min * m),
            fds_limit=limit)
        for m in range(minutes)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("per_min", "fds_at_0", "limit", "left_s"),
    [
        # 0.5/s from 100 of 1024: (1024 - 220) / 0.5 s after the last window's end.
        (30, 100, 1024, (1024 - 220) / 0.5),
        (6, 1000, 4096, (4096 - 1024) / 0.1),
        (60, 100, 256, 0.0),  # already at the limit: out now
    ],
)
def test_time_left_is_the_headroom_over_the_growth(per_min, fds_at_0, limit, left_s):
    *history, now = leak(per_min, fds_at_0, limit)
    growth = close_wait_buildup.slope(now, CFG, history)
    assert fd_exhaustion_in_s(now, history, growth) == pytest.approx(left_s, rel=0.02)


@pytest.mark.parametrize(
    ("fields", "history_fds"),
    [
        ({"fds_open": None, "fds_limit": 1024}, [10, 20, 30]),  # the count unread
        ({"fds_open": 40, "fds_limit": None}, [10, 20, 30]),  # unlimited
        ({"fds_open": 40, "fds_limit": 1024}, [40, 40, 40]),  # flat: nothing grows
        ({"fds_open": 10, "fds_limit": 1024}, [40, 30, 20]),  # falling
    ],
)
def test_no_prediction_without_both_numbers_or_without_growth(fields, history_fds):
    history = [
        agg(m, close_wait_count=3, fds_open=n, fds_limit=1024) for m, n in enumerate(history_fds)
    ]
    now = agg(len(history_fds), close_wait_count=3, **fields)
    assert fd_exhaustion_in_s(now, history, close_wait_buildup.slope(now, CFG, history)) is None


def test_the_fd_trend_sees_a_leak_this_series_does_not():
    """The process leaks toward other brokers too: its fd count climbs 1/s while this series'
    CLOSE_WAIT count stays put. The steeper of the two sets the deadline."""
    history = [agg(m, fds_open=200 + 60 * m, fds_limit=1024) for m in range(4)]
    now = agg(4, fds_open=440, fds_limit=1024)
    assert close_wait_buildup.slope(now, CFG, history) in (None, 0.0)
    assert fd_trend(now, history) == pytest.approx(1.0)
    assert fd_exhaustion_in_s(now, history, None) == pytest.approx(584.0)
    (f,) = close_wait_buildup.detect(now, CFG, history)
    assert f.severity == "critical"
    assert f.recommendation.startswith("Act within 15 minutes: orders on web-1 runs out of file")


def test_only_the_series_own_windows_make_its_trend():
    other = [agg(m, app="billing", fds_open=100 * m, fds_limit=1024) for m in range(4)]
    now = agg(4, fds_open=440, fds_limit=1024)
    assert fd_trend(now, other) is None


@pytest.mark.parametrize(
    ("per_min", "limit", "severity", "lead"),
    [
        # Three CLOSE_WAIT sockets, below every count threshold, and a slope far below the
        # critical one: only the deadline (two hours here) makes these critical.
        (1, 200, "critical", "Act within 2 hours"),  # 96 left at 1/min: 96 min
        (1, 150, "critical", "Act within an hour"),  # 46 left: 46 min
        (6, 200, "critical", "Act within 15 minutes"),  # 76 left at 0.1/s: 12.7 min
        (1, 4096, "warning", None),  # 66 hours away
    ],
)
def test_severity_and_advice_follow_the_deadline(per_min, limit, severity, lead):
    cfg = CFG.replace(close_wait_critical_slope_per_s=1.0, fd_exhaustion_critical_s=7200.0)
    history = [agg(m, fds_open=100 + per_min * m, fds_limit=limit) for m in range(4)]
    now = agg(4, fds_open=100 + per_min * 4, fds_limit=limit)
    (f,) = close_wait_buildup.detect(now, cfg, history)
    assert f.severity == severity
    assert f.evidence["fds_open"] == now.fds_open and f.evidence["fds_limit"] == limit
    if lead is None:
        assert not f.recommendation.startswith("Act")
        assert f.evidence["fd_exhaustion_in_s"] > cfg.fd_exhaustion_critical_s
    else:
        assert f.recommendation.startswith(lead + ":")
        assert "EMFILE" in f.recommendation
    assert f"{now.fds_open} of {limit} file descriptors open" in f.summary


def test_a_broker_short_of_descriptors_is_named_as_the_broker():
    history = [agg(m, side="broker", fds_open=5000 + 600 * m, fds_limit=8192) for m in range(4)]
    now = agg(4, side="broker", fds_open=7400, fds_limit=8192)
    (f,) = close_wait_buildup.detect(now, CFG, history)
    assert f.severity == "critical"
    assert f.recommendation.startswith("Act within 2 minutes: broker 2 on web-1 runs out")


def test_a_process_at_its_limit_is_out_now_whether_or_not_it_grows():
    """Flat at the limit: no trend, but every new socket fails. Critical, and said so."""
    history = [agg(m, fds_open=1024, fds_limit=1024) for m in range(3)]
    now = agg(3, fds_open=1024, fds_limit=1024)
    assert fd_exhaustion_in_s(now, history, None) == 0.0
    (f,) = close_wait_buildup.detect(now, CFG, history)
    assert f.severity == "critical" and f.evidence["fd_exhaustion_in_s"] == 0.0
    assert f.recommendation.startswith("Act now: orders on web-1 has no file descriptor left")
    assert "1024 of 1024 file descriptors open: none left." in f.summary


def test_without_fd_numbers_the_evidence_keeps_its_old_shape():
    (f,) = close_wait_buildup.detect(agg(), CFG)
    assert not {"fds_open", "fds_limit", "fd_exhaustion_in_s"} & f.evidence.keys()
    assert "file descriptors" not in f.summary


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "within a minute"), (60, "within a minute"), (61, "within 2 minutes"),
        (239, "within 4 minutes"), (400, "within 8 minutes"), (700, "within 15 minutes"),
        (1000, "within 30 minutes"), (3600, "within an hour"), (3601, "within 2 hours"),
        (5 * 3600 + 1, "within 6 hours"),
    ],
)  # fmt: skip
def test_the_deadline_in_words_rounds_up(seconds, words):
    assert within(seconds) == words
