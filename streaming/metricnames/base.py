"""The shape of one catalog entry: a metric name, its type, help text and labels."""

from __future__ import annotations

from dataclasses import dataclass

TYPES = ("counter", "gauge", "histogram", "summary", "info")
# Labels no connmon metric may carry: each would make cardinality unbounded.
FORBIDDEN_LABELS = frozenset({"port", "pid", "conn", "endpoint", "broker_endpoint", "inode"})


@dataclass(frozen=True)
class Metric:
    """One exported metric family (name without type suffixes, except a counter's ``_total``)."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()

    def series_names(self) -> tuple[str, ...]:
        """Every sample name the family exposes (histogram/summary suffixes included)."""
        if self.type == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        if self.type == "summary":
            return (self.name, f"{self.name}_sum", f"{self.name}_count")
        if self.type == "info" and not self.name.endswith("_info"):
            return (f"{self.name}_info",)
        return (self.name,)
