"""The contracts' time format: ``iso``, ``epoch`` and the current time."""

from __future__ import annotations

import math
import time

from streaming.schema import times
from streaming.schema.times import epoch, iso, iso_now


def test_iso_and_epoch_round_trip_to_the_millisecond():
    assert iso(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso(1795000000.1239) == "2026-11-18T11:06:40.123Z"
    assert epoch("2026-11-18T11:06:40.123Z") == 1795000000.123


def test_now_is_the_current_millisecond_without_filling_the_bounds_cache():
    before_size = times._iso_epoch.cache_info().currsize
    for _ in range(3):
        lo = iso(math.floor(time.time() * 1000) / 1000)
        now = iso_now()
        hi = iso(time.time())
        assert lo <= now <= hi  # one format: text order is time order
        time.sleep(0.002)
    assert times._iso_epoch.cache_info().currsize <= before_size + 6  # lo and hi only
