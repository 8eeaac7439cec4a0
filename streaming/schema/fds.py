"""File descriptor usage as summaries and aggregates carry it: (open descriptors, soft limit)
of the one process of a group nearest its limit."""

from __future__ import annotations

from collections.abc import Iterable

FdUsage = tuple[int, int]  # (open descriptors, soft RLIMIT_NOFILE)


def nearest_limit(usages: Iterable[FdUsage]) -> FdUsage | None:
    """Of several processes' usages, the one with the highest share of its limit in use (the
    first to fail); ties go to the one with fewer descriptors left."""
    return max(usages, key=lambda u: (u[0] / u[1], u[0] - u[1]), default=None)
