"""The detectors' history: each series' recent windows, as the state store keeps them.

A bucket is restored and saved every batch, but a batch updates only the series that reported
in it (with summaries every 15 s and a 5 s trigger, about a third). The windows of the others
stay the rows they were saved as, and are saved again as they are: only a series the batch
reads becomes ``Aggregate`` objects.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any

from streaming.schema.aggregates import SERIES_FIELDS, Aggregate
from streaming.schema.clients import IDENTITY_FIELDS

# What detectors read from a series' earlier windows (idle_churn, the CLOSE_WAIT trend), the
# library a later window may carry forward, plus identity; the checkpointed history keeps only
# these.
HISTORY_FIELDS = (
    *SERIES_FIELDS,
    "window_start",
    "window_end",
    "window_s",
    "opens",
    "closes_after_idle",
    "closes_after_idle_local",
    "closes_after_idle_peer",
    "idle_at_close_max_s",
    "close_wait_count",
    "reopens_after_idle",
    "reopen_idle_min_s",
    "reopen_idle_max_s",
    "closes_broker_drop",
    # What tells a reconnect burst from recovery after a pause or an outage, and the counts a
    # storm's rates take from the window before (connection_storm).
    "paused_processes",
    "connects_failed",
    "connects_refused",
    "short_lived",
    "closes_local",
    "closes_peer",
    "closes_unknown",
    "syn_sent_count",
    # The fd count's own trend (close_wait_buildup's time to fd exhaustion).
    "fds_open",
    *IDENTITY_FIELDS,
)
_values = operator.attrgetter(*HISTORY_FIELDS)
_END = HISTORY_FIELDS.index("window_end")

Row = Sequence[Any]  # one window's ``HISTORY_FIELDS`` values


class History:
    """Series key -> its windows, oldest first, as a mapping. A series restored and not read
    since keeps its saved rows (``_saved``); reading it turns them into ``Aggregate``s."""

    def __init__(self) -> None:
        self._live: dict[str, list[Aggregate]] = {}
        self._saved: dict[str, list[Row]] = {}

    def load(self, names: Sequence[str], saved: dict[str, list[Row]]) -> None:
        """Series' windows as ``rows`` saved them, each a row under field list ``names``."""
        self._live, self._saved = {}, {}
        if tuple(names) == HISTORY_FIELDS:
            self._saved = saved
        else:  # saved by a version with other fields: read by name now
            self._live = {
                s: [Aggregate.from_fields(names, row) for row in rows] for s, rows in saved.items()
            }

    def rows(self) -> dict[str, list[Row]]:
        """Every series' windows as ``HISTORY_FIELDS`` rows, to save."""
        out: dict[str, list[Row]] = {
            s: [list(_values(a)) for a in ws] for s, ws in self._live.items()
        }
        out.update(self._saved)
        return out

    def newest_end(self, series: str) -> str:
        """The end of the series' newest window (ISO), without reading the series."""
        ws = self._live.get(series)
        return ws[-1].window_end if ws is not None else self._saved[series][-1][_END]

    def get(self, series: str) -> list[Aggregate] | None:
        ws = self._live.get(series)
        if ws is None and (rows := self._saved.pop(series, None)) is not None:
            ws = self._live[series] = [Aggregate.from_fields(HISTORY_FIELDS, r) for r in rows]
        return ws

    def __getitem__(self, series: str) -> list[Aggregate]:
        ws = self.get(series)
        if ws is None:
            raise KeyError(series)
        return ws

    def __setitem__(self, series: str, windows: list[Aggregate]) -> None:
        self._saved.pop(series, None)
        self._live[series] = windows

    def setdefault(self, series: str, windows: list[Aggregate]) -> list[Aggregate]:
        ws = self.get(series)
        if ws is None:
            ws = self._live[series] = windows
        return ws

    def pop(self, series: str) -> None:
        self._live.pop(series, None)
        self._saved.pop(series, None)

    def items(self) -> Iterator[tuple[str, list[Aggregate]]]:
        """Every series with its windows (each series read)."""
        for s in list(self):
            yield s, self[s]

    def __contains__(self, series: object) -> bool:
        return series in self._live or series in self._saved

    def __iter__(self) -> Iterator[str]:
        yield from self._live
        yield from self._saved

    def __len__(self) -> int:
        return len(self._live) + len(self._saved)
