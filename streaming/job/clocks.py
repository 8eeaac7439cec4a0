"""Event time per host: one host's clock cannot move the fleet's event time, and hosts whose
clocks are off, or whose events arrive behind the watermark, are counted by name.

The fleet's event time (which closes windows and resolves stale findings) is the newest event
time of a batch *bounded by the job's clock when the batch started*: every event of a batch was
written before the batch began, so an event time beyond that instant says the agent's clock is
ahead. Without the bound, an agent 3 minutes fast would put the watermark a minute ahead of real
time and make every other host's current window late.

Per host and batch, where the series' state is (each state bucket on its executor): events, the
events that arrived behind the watermark, and the host's clock offset (its newest event time
minus the job's clock when the batch started). Only a host with late events or a clock ahead of
the job's is reported to the driver, so the driver's work grows with the hosts that misbehave,
not with the fleet. The driver keeps totals per host for the status record and forgets a host an
hour after its last report. Pure Python: no Spark, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Hosts listed in one status record, the most skewed first; the rest are summed as "others".
HOSTS_MAX = 100
# A host not reported for this long is forgotten (its counters leave the exporter).
FORGET_AFTER_S = 3600.0
# A clock offset older than this is no longer shown (the host's clock may have been fixed).
OFFSET_TTL_S = 300.0
OTHERS = "(others)"


def bounded(newest: float | None, now: float | None) -> float | None:
    """An event time as evidence of the fleet's event time: never beyond the job's clock."""
    if newest is None or now is None:
        return newest
    return min(newest, now)


@dataclass
class HostBatch:
    """One host in one batch (summed over the state buckets that hold its series)."""

    events: int = 0
    late: int = 0
    offset_s: float | None = None  # newest event time - the job's clock (None: replay)

    def add(self, events: int, late: int, offset_s: float | None) -> None:
        self.events += events
        self.late += late
        if offset_s is not None and (self.offset_s is None or offset_s > self.offset_s):
            self.offset_s = offset_s

    def merge(self, other: Mapping[str, Any]) -> None:
        self.add(int(other.get("events") or 0), int(other.get("late") or 0), other.get("offset_s"))

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.events, "late": self.late, "offset_s": self.offset_s}


def merge_hosts(into: dict[str, HostBatch], other: Mapping[str, Mapping[str, Any]]) -> None:
    for host, d in other.items():
        into.setdefault(host, HostBatch()).merge(d)


@dataclass
class HostClock:
    """What the driver keeps about one host since the job started."""

    skewed_events: int = 0  # events of batches in which the host's clock was off
    late_events: int = 0  # events that arrived behind the watermark
    offset_s: float | None = None  # newest measured clock offset (+ ahead, - behind)
    offset_at: float | None = None  # job time of that measurement
    seen_at: float = 0.0  # job time of the host's last report


@dataclass
class HostClocks:
    """The driver's per-host totals, bounded by the hosts that misbehaved in the last hour."""

    tolerance_s: float
    hosts: dict[str, HostClock] = field(default_factory=dict)

    def update(self, batch: Mapping[str, HostBatch], now: float) -> None:
        """Fold one batch's reported hosts in."""
        for host, h in batch.items():
            c = self.hosts.setdefault(host, HostClock())
            c.seen_at = now
            c.late_events += h.late
            if h.offset_s is not None and abs(h.offset_s) > self.tolerance_s:
                c.skewed_events += h.events
                c.offset_s, c.offset_at = round(h.offset_s, 3), now
        for host in [k for k, c in self.hosts.items() if now - c.seen_at > FORGET_AFTER_S]:
            del self.hosts[host]

    def snapshot(self, now: float) -> list[dict[str, Any]]:
        """The status record's ``hosts``: the most skewed first, at most ``HOSTS_MAX``, the
        rest summed under ``others``."""

        def offset(c: HostClock) -> float | None:
            fresh = c.offset_at is not None and now - c.offset_at <= OFFSET_TTL_S
            return c.offset_s if fresh else None

        def rank(item: tuple[str, HostClock]) -> tuple[float, int, str]:
            o = offset(item[1])
            return (-abs(o) if o is not None else 0.0, -item[1].late_events, item[0])

        ordered = sorted(self.hosts.items(), key=rank)
        out = [_row(host, c, offset(c)) for host, c in ordered[:HOSTS_MAX]]
        rest = [c for _h, c in ordered[HOSTS_MAX:]]
        if rest:
            others = HostClock(sum(c.skewed_events for c in rest), sum(c.late_events for c in rest))
            out.append(_row(OTHERS, others, None))
        return out


def _row(host: str, c: HostClock, offset: float | None) -> dict[str, Any]:
    return {
        "host": host,
        "clock_offset_s": offset,
        "skewed_events_total": c.skewed_events,
        "late_events_total": c.late_events,
    }
