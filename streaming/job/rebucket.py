"""A saved bucket taken apart by series, and series put together into a bucket: what moving a
job's state to another number of state buckets needs (``migrate``). Pure Python.

A series' state is its open windows, its detector history, its hysteresis memory (``held``)
and its firing findings; it is named by the partial rows' series fields, whose hash picks its
bucket (``buckets.bucket_column``). The host-level series of a host's failed connects is named
by the host's heartbeat rows (side, app and broker null), which is where its input comes from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from streaming.detectors.config import DetectorConfig
from streaming.job.buckets import Bucket, compress, wall_clock
from streaming.job.open_windows import SERIES, WINDOW_FIELDS
from streaming.job.sinks import dumps
from streaming.schema.aggregates import HOST_SERIES, series_key

Fields = tuple[str | None, ...]  # a series, as ``SERIES``: (side, host, app, cluster, broker, peer)
_AT = [WINDOW_FIELDS.index(k) for k in SERIES]


def _fields(x: Any, heartbeat: dict[str, Fields]) -> Fields:
    """The series fields of an ``Aggregate`` or a ``Finding``; of the host-level series, those
    of the host's heartbeat rows."""
    if x.app == HOST_SERIES and x.broker == HOST_SERIES:
        return heartbeat.get(x.host, (None, x.host, None, None, None, None))
    return (x.side, x.host, x.app, x.cluster, x.broker, x.peer_host)


def split(blob: bytes, cfg: DetectorConfig) -> list[tuple[Fields, bytes]]:
    """A saved bucket as one part per series: (its series fields, its state as JSON)."""
    whole = Bucket.load(blob, cfg, wall_clock)
    parts: dict[Fields, Bucket] = {}

    def part(fields: Fields) -> Bucket:
        b = parts.get(fields)
        if b is None:
            b = parts[fields] = Bucket(cfg, wall_clock)
            b.windows.max_event_s = whole.windows.max_event_s
            b.tracker.max_window_end = whole.tracker.max_window_end
        return b

    heartbeat: dict[str, Fields] = {}
    for key, row in whole.windows.open.items():
        fields = tuple(row[i] for i in _AT)
        if fields[0] is None:
            heartbeat[row[_AT[1]]] = fields
        part(fields).windows.open[key] = row
    named: dict[str, Fields] = {}
    t = whole.tracker
    for s, windows in t.history.items():
        named[s] = _fields(windows[-1], heartbeat)
        part(named[s]).tracker.history[s] = windows
    for k, f in t.findings.items():
        fields = _fields(f, heartbeat)
        named.setdefault(
            series_key(f.side, f.host, f.app, f.cluster, f.broker, f.peer_host), fields
        )
        part(fields).tracker.findings[k] = f
    for s, held in t.held.items():
        if s in named:  # a series with neither history nor findings holds nothing to keep
            part(named[s]).tracker.held[s] = held
    return [(fields, orjson.dumps(_doc(b))) for fields, b in parts.items()]


def _doc(b: Bucket) -> dict[str, Any]:
    return {"windows": b.windows.to_state(), "tracker": b.tracker.to_state()}


def merge(parts: Iterable[bytes]) -> bytes:
    """Series' parts (``split``) as one saved bucket, with no ingest batch applied yet and no
    timer set (the state query sets it when it first holds the bucket)."""
    docs = [orjson.loads(p) for p in parts]
    if not docs:
        raise ValueError("merge: no parts")
    w = dict(docs[0]["windows"], open_keys=[], open_rows=[])
    t = dict(docs[0]["tracker"], history={}, held={}, findings={})
    for d in docs:
        w["open_keys"] += d["windows"]["open_keys"]
        w["open_rows"] += d["windows"]["open_rows"]
        w["max_event_s"] = _newest(w["max_event_s"], d["windows"]["max_event_s"])
        for name in ("history", "held", "findings"):
            t[name].update(d["tracker"][name])
        t["max_window_end"] = _newest(t["max_window_end"], d["tracker"]["max_window_end"])
    doc = {"windows": w, "tracker": t, "applied": None, "timer_ms": None}
    return compress(orjson.dumps(doc))


def _newest(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def resolved_findings(blob: bytes, cfg: DetectorConfig, now: str) -> list[tuple[str, str]]:
    """The firing findings of a saved bucket as resolved records (key, JSON value) stamped
    ``now``: for a job that starts over without this state, so that none is left firing."""
    b = Bucket.load(blob, cfg, wall_clock)
    out = []
    for key, f in b.tracker.findings.items():
        out.append((key, dumps(f.resolved(f.window_start, f.window_end, now).to_dict())))
    return out


def series_in(blob: bytes, cfg: DetectorConfig) -> Sequence[Fields]:
    """The series a saved bucket holds state for."""
    return [fields for fields, _ in split(blob, cfg)]
