"""Detector thresholds: one object, imported by the job, the detectors, the alert rules and the
dashboards, so a threshold lives in one place.

Defaults follow how Kafka clients behave (docs/kafka-connections.md: Java client idle expiry
540 s, broker 600 s, Linux TIME_WAIT 60 s). Tests compress time by overriding these values,
never with special code paths.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DetectorConfig:
    """Every detector threshold. Seconds unless the name says otherwise."""

    # close_wait_buildup: CLOSE_WAIT older than the grace period is "stuck".
    close_wait_grace_s: float = 30.0
    close_wait_warning_count: int = 1
    close_wait_critical_count: int = 20
    # A rising CLOSE_WAIT count is critical too: sockets per second, the larger of the slope
    # within the window and the trend over the series' windows of the last 15 minutes.
    close_wait_critical_slope_per_s: float = 0.05
    # ... and so is one whose process runs out of file descriptors sooner than this at the
    # rate they grow (the steeper of the CLOSE_WAIT slope and the fd count's own trend).
    fd_exhaustion_critical_s: float = 3600.0

    # idle_churn: closes after at least this much idle, then a re-open to the same broker.
    idle_churn_min_idle_s: float = 240.0
    idle_churn_min_cycles: int = 2
    idle_churn_window_s: float = 1800.0
    # One timer fires at one idle time: cycles count together when their idle-at-close times
    # lie within this (plus 5%). Two scans at the agent's default 5 s interval.
    idle_churn_timer_tolerance_s: float = 10.0

    # duplicate_connections: a process with more than one ESTABLISHED socket to one broker
    # where the extra one is idle at least this long (a coordinator connection never is).
    duplicate_idle_s: float = 120.0
    # A duplicate_connections finding resolves only after this long without holding: a
    # rarely used client's connection is idle below duplicate_idle_s after each use, and is
    # reaped at the client's idle expiry and re-opened at its next use. Default: Java's
    # client idle expiry plus duplicate_idle_s.
    duplicate_resolve_after_s: float = 660.0

    # idle_zombie: ESTABLISHED and idle longer than any sane idle timeout.
    zombie_idle_s: float = 1800.0

    # connection_storm: opens or short-lived connections per minute toward one broker.
    storm_opens_per_min: float = 30.0
    storm_short_lived_s: float = 2.0
    storm_host_attempt_fails_per_min: float = 60.0

    # time_wait_pileup: TIME_WAIT sockets toward one broker.
    time_wait_warning_count: int = 200
    time_wait_critical_count: int = 2000

    # Windows shared by the job's aggregates.
    window_s: float = 60.0
    watermark_s: float = 120.0
    # A host whose newest event time is off the fleet's (ahead of the job's clock, or behind
    # with late events) by more than this has its events counted as skewed, per host.
    clock_skew_tolerance_s: float = 10.0

    # connections.max.idle.ms defaults (Java clients 540 s, brokers 600 s), used to tell which
    # side's timer fired and to word recommendations.
    client_idle_expiry_s: float = 540.0
    broker_idle_expiry_s: float = 600.0
    # connection_storm is critical at this multiple of any of its thresholds.
    storm_critical_factor: float = 5.0
    # Short-lived connections (closed within storm_short_lived_s) per minute that make a storm.
    storm_short_lived_per_min: float = 30.0
    # SYN_SENT sockets toward one broker at one time that make a storm.
    storm_syn_sent_count: int = 10
    # A firing finding whose series produces no newer window for this long is resolved
    # (the sockets are gone: the application stopped or the agent lost sight of them).
    finding_stale_s: float = 300.0
    # A firing finding whose record did not change is published again after this much event
    # time, so a reader of the topic knows it still fires (docs/findings.md).
    finding_heartbeat_s: float = 300.0

    # Hysteresis, for every detector: a finding fires once it held in this many consecutive
    # windows of its series, and resolves once it did not hold in this many consecutive
    # windows (a window the series did not produce counts as not holding). Resolving needs two
    # by default, so a partly filled newest window does not resolve a rate-based finding.
    fire_after_windows: int = 1
    resolve_after_windows: int = 2

    # connmon's own processes (its agent, job and exporter talk to the clusters they watch) get
    # no findings unless this is on; their aggregates are published either way.
    include_connmon: bool = False

    def replace(self, **changes: Any) -> DetectorConfig:
        """A copy with some thresholds changed; unknown names fail with the name."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown detector setting(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


DEFAULT = DetectorConfig()
