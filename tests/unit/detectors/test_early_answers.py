"""The detectors that answer "nothing" early for most series (no connect, no timer cycle)
answer exactly what their whole computation would: checked against it on random windows."""

from __future__ import annotations

import random
from typing import Any

import pytest

from streaming.detectors import connection_storm, idle_churn
from streaming.detectors.config import DetectorConfig
from streaming.schema.aggregates import HOST_SERIES, Aggregate
from streaming.schema.times import iso

T0 = 1_795_000_020.0
COUNTS = (
    "opens",
    "short_lived",
    "syn_sent_count",
    "connects_failed",
    "connects_refused",
    "closes_local",
    "closes_peer",
    "closes_after_idle",
    "closes_after_idle_local",
    "closes_after_idle_peer",
    "reopens_after_idle",
    "closes_broker_drop",
    "paused_processes",
)


def window(rng: random.Random, minute: int, app: str) -> Aggregate:
    fields: dict[str, Any] = {c: rng.choice((0, 0, 0, 1, 2, 40)) for c in COUNTS}
    if fields["reopens_after_idle"]:
        low = rng.choice((30.0, 290.0, 540.0))
        fields["reopen_idle_min_s"] = low
        fields["reopen_idle_max_s"] = low + rng.choice((0.0, 5.0, 200.0))
    start = T0 + 60 * minute
    return Aggregate(
        side=rng.choice(("client", "broker")),
        host="h",
        app=app,
        broker="1",
        peer_host="10.0.0.1",
        window_start=iso(start),
        window_end=iso(start + 60),
        last_event_time=iso(start + rng.choice((1, 30, 59))),
        host_attempt_fails_per_min=rng.choice((None, 0.0, 50.0)),
        sockets={"ESTABLISHED": rng.choice((0, 1, 40))},
        **fields,
    )


def cases(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        app = rng.choice(("orders", "orders", HOST_SERIES))
        history = [window(rng, m, app) for m in range(rng.randint(0, 4))]
        for w in history:  # one series: its windows share the identity
            w.side = history[0].side
        agg = window(rng, len(history), app)
        if history:
            agg.side = history[0].side
        for quiet in (("opens", "short_lived", "syn_sent_count"), ("reopens_after_idle",)):
            if rng.random() < 0.4:  # the usual series: none of these anywhere
                for w, name in ((w, name) for w in [*history, agg] for name in quiet):
                    setattr(w, name, 0)
        cfg = DetectorConfig().replace(
            storm_opens_per_min=rng.choice((0.0, 1.0, 30.0)),
            storm_short_lived_per_min=rng.choice((0.0, 1.0, 30.0)),
            storm_syn_sent_count=rng.choice((0, 1, 20)),
            idle_churn_min_cycles=rng.choice((1, 2)),
        )
        yield agg, cfg, history


@pytest.mark.parametrize(
    ("module", "early"), [(connection_storm, "_connects"), (idle_churn, "_reopens")]
)
def test_the_early_answer_is_the_whole_computations(module, early, monkeypatch) -> None:
    quiet = 0
    for agg, cfg, history in cases(seed=7, n=3000):
        fast = module.detect(agg, cfg, history)
        with monkeypatch.context() as m:
            m.setattr(module, early, lambda _w: True)  # never early: the whole computation
            whole = module.detect(agg, cfg, history)
        assert fast == whole, (agg, history, cfg)
        quiet += not any(map(getattr(module, early), [agg, *history]))
    assert 300 < quiet < 2700  # both ways taken often
