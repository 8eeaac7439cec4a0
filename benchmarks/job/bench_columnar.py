"""Benchmark: a columnar bucket prototype against the state query's Python work per batch.

    .venv/bin/python benchmarks/job/bench_columnar.py --series 20000 --buckets 256 --batches 16

The load is ``bench_state.py``'s (every series reports a summary every 10 s of event time, a
batch every 5 s, one series in 50 leaks CLOSE_WAIT sockets). Three ways to do a batch's work,
timed in turns in one run, all in one process on one core:

- ``objects``: the shipped ``Bucket`` (restore, process, save, output rows), as bench_state.py.
- ``columnar``: a prototype of the layout the job could move to. Per bucket, the numeric slots
  of its open windows and the last finished window of each series are numpy arrays; restoring
  and saving is one buffer per array. A batch parses its partial rows, merges them into the
  arrays (sums, maxima, minima, latest summaries by time), finishes the touched windows as
  columns, and runs every detector's numeric precondition (a "gate") over the whole bucket at
  once. A series whose gate opens, or which has a firing finding, is handed to the object path
  (the shipped ``Bucket``, kept beside the arrays); the others never become Python objects
  beyond their published aggregate (a dict built from a row of the arrays, then JSON).
- ``io floor``: only what any design must do per batch with these inputs and outputs: parse
  the partial rows (JSON lines, as the partials topic holds them), serialise each updated
  series' aggregate (JSON, as the aggregates topic holds it), and restore and save the state's
  bytes (zstd), with no merging or detection at all.

The prototype is not the product: it keeps two open windows per series, takes the client
library and the other text fields as absent (as in this load), and its gates are the
detectors' first conditions, not a proof that a detector stays quiet. It measures what such a
layout costs, to choose before building it. Prints one JSON summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_state import T0, TOPICS, batch_rows  # noqa: E402

from streaming.detectors.config import DetectorConfig  # noqa: E402
from streaming.job import buckets  # noqa: E402
from streaming.job.buckets import Bucket, Record, output_rows, window_end_clock  # noqa: E402
from streaming.job.open_windows import MAX_FIELDS, MIN_FIELDS, SUM_FIELDS, flat_col  # noqa: E402
from streaming.job.sinks import dumps  # noqa: E402
from streaming.schema.aggregates import SERIES_FIELDS, Aggregate, series_key  # noqa: E402
from streaming.schema.times import iso  # noqa: E402

NAN = math.nan
# Latest-summary slots kept per state: (state, fields), the first is the summary's time.
STATES = (
    ("ESTABLISHED", ("t", "count", "max_idle_s", "dup_used_max_idle_s", "fds_open", "fds_limit")),
    ("CLOSE_WAIT", ("t", "count", "oldest_state_age_s", "fds_open", "fds_limit")),
    ("TIME_WAIT", ("t", "count")),
    ("SYN_SENT", ("t", "count")),
)
NUMERIC_MAX = tuple(f for f in MAX_FIELDS if f not in ("broker_endpoint", "paused_how"))
COLUMNS = (
    *SUM_FIELDS,
    *NUMERIC_MAX,
    *MIN_FIELDS,
    *(flat_col(s, n) for s, names in STATES for n in names),
)
AT = {c: i for i, c in enumerate(COLUMNS)}
SUMS = np.array([AT[f] for f in SUM_FIELDS])
MAXES = np.array([AT[f] for f in NUMERIC_MAX])
MINS = np.array([AT[f] for f in MIN_FIELDS])
STATE_AT = tuple((s, np.array([AT[flat_col(s, n)] for n in names])) for s, names in STATES)
# The published aggregate's numeric fields: those a window's slots hold as they are (its
# sums that are aggregate fields, and some maxima and minima), then those finished from them.
_AGGREGATE_FIELDS = {f.name for f in dataclasses.fields(Aggregate)}
OUT_COPIED = (
    *(f for f in SUM_FIELDS if f in _AGGREGATE_FIELDS),
    "paused_processes",
    "idle_at_close_max_s",
    "lifetime_max_s",
    "reopen_idle_min_s",
    "reopen_idle_max_s",
)
OUT_NUMERIC = (
    *OUT_COPIED,
    "close_wait_count",
    "close_wait_oldest_age_s",
    "close_wait_slope_per_s",
    "time_wait_count",
    "syn_sent_count",
    "max_idle_s",
    "dup_used_max_idle_s",
    "lifetime_avg_s",
    "fds_open",
    "fds_limit",
)
# Of those, the integers (the arrays hold floats; a published count is an integer).
_FLOATS = {f.name for f in dataclasses.fields(Aggregate) if "float" in str(f.type)}
OUT_INT = np.array([i for i, f in enumerate(OUT_NUMERIC) if f not in _FLOATS and "fds" not in f])
OUT_FLOAT = np.array([i for i in range(len(OUT_NUMERIC)) if i not in set(OUT_INT.tolist())])
OUT_ABSENT = (
    "broker_id",
    "broker_endpoint",
    "established_processes",
    "established_max_per_process",
    "dup_max_idle_s",
    "dup_conn",
    "dup_used_active_idle_s",
    "host_attempt_fails_per_min",
    "client_library",
    "client_version",
    "client_library_evidence",
    "process_role",
    "paused_how",
)


def _z(a: np.ndarray) -> np.ndarray:
    """Counts and ages with an absent value as 0 (they are never negative)."""
    return np.fmax(a, 0.0)


_EMPTY = [NAN] * len(COLUMNS)


def _row_values(part: dict) -> list[float]:
    """A partial row's numeric slots (a row holds only the fields its events set)."""
    values = _EMPTY.copy()
    at = AT.get
    for name, v in part.items():
        i = at(name)
        if i is not None and v is not None:
            values[i] = v
    return values


class ColumnarBucket:
    """Open windows and the last finished window of a bucket's healthy series as arrays."""

    def __init__(self, cfg: DetectorConfig) -> None:
        self.cfg = cfg
        self.keys: list[str] = []
        self.ident: list[list] = []
        self.index: dict[tuple, int] = {}  # series fields -> row
        self.starts = [NAN, NAN]  # window start of slot 0 (older) and slot 1 (newer)
        self.win = np.full((2, 0, len(COLUMNS)), NAN)
        self.objects = Bucket(cfg, window_end_clock)  # series whose finding may change
        self.routed: set[str] = set()

    # ---- state ----------------------------------------------------------------------------
    def dump(self) -> bytes:
        head = orjson.dumps(
            {
                "keys": self.keys,
                "ident": self.ident,
                "starts": self.starts,
                "routed": sorted(self.routed),
                "objects": self.objects.dump().hex() if self.routed else None,
            }
        )
        body = self.win.tobytes()
        return buckets.compress(len(head).to_bytes(8, "little") + head + body)

    @classmethod
    def load(cls, blob: bytes | None, cfg: DetectorConfig) -> ColumnarBucket:
        b = cls(cfg)
        if blob is None:
            return b
        raw = buckets.decompress(blob)
        n = int.from_bytes(raw[:8], "little")
        head = orjson.loads(raw[8 : 8 + n])
        b.keys, b.ident, b.starts = head["keys"], head["ident"], head["starts"]
        b.index = {tuple(ident): i for i, ident in enumerate(b.ident)}
        b.routed = set(head["routed"])
        if head["objects"] is not None:
            b.objects = Bucket.load(bytes.fromhex(head["objects"]), cfg, window_end_clock)
        win = np.frombuffer(raw[8 + n :], dtype=np.float64)
        b.win = win.reshape(2, len(b.keys), len(COLUMNS)).copy()
        return b

    # ---- a batch ----------------------------------------------------------------------------
    def _grow(self, n: int) -> None:
        if n > self.win.shape[1]:
            extra = np.full((2, n - self.win.shape[1], len(COLUMNS)), NAN)
            self.win = np.concatenate([self.win, extra], axis=1)

    def _slot(self, start: float) -> int:
        """The slot of window ``start``; a newer window moves the newer slot to the older."""
        if start == self.starts[1]:
            return 1
        if start == self.starts[0]:
            return 0
        if math.isnan(self.starts[1]) or start > self.starts[1]:
            self.win[0] = self.win[1]
            self.win[1] = NAN
            self.starts = [self.starts[1], start]
            return 1
        return 0

    def process(self, text: str | None, fleet: float, batch: int) -> list[tuple]:
        out: list[tuple] = []
        if not text:
            return out
        rows = [orjson.loads(line) for line in text.split("\n")]
        self._slot(max(r["window_start_s"] for r in rows))  # a newer window moves in first
        routed_rows = []
        idx, slots, values = [], [], []
        for r in rows:
            ident = tuple(map(r.get, SERIES_FIELDS))
            i = self.index.get(ident)
            if i is None:
                key = series_key(*ident)
                i = self.index[ident] = len(self.keys)
                self.keys.append(key)
                self.ident.append(list(ident))
            if self.keys[i] in self.routed:
                routed_rows.append(r)
                continue
            idx.append(i)
            slots.append(self._slot(r["window_start_s"]))
            values.append(_row_values(r))
        self._grow(len(self.keys))
        if idx:
            out += self._merge_and_publish(np.array(idx), np.array(slots), np.array(values))
        if routed_rows:
            text = "\n".join(orjson.dumps(r).decode() for r in routed_rows)
            em = self.objects.process([Record(batch, 0, None, fleet, text)], fleet)
            out += list(output_rows(em, TOPICS))
        return out

    def _merge_and_publish(self, idx, slots, values) -> list[tuple]:
        """Merge the rows into their windows, finish the newer window of the touched series,
        open the gates; publish the series whose gates stay closed (the others move to the
        object path, which gets their next rows)."""
        win = self.win
        for s in (0, 1):
            m = slots == s
            if not m.any():
                continue
            w, i, v = win[s], idx[m], values[m]
            sums = w[:, SUMS]
            np.add.at(sums, i, _z(v[:, SUMS]))
            w[:, SUMS] = sums
            mx = w[:, MAXES]
            np.fmax.at(mx, i, v[:, MAXES])
            w[:, MAXES] = mx
            mn = w[:, MINS]
            np.fmin.at(mn, i, v[:, MINS])
            w[:, MINS] = mn
            for _state, at in STATE_AT:
                t_new = v[:, at[0]]
                newer = ~np.isnan(t_new) & ~(w[i, at[0]] >= t_new)
                if newer.any():
                    w[np.ix_(i[newer], at)] = v[np.ix_(newer, at)]
        # Finish the touched series' newest windows as columns, gate, publish.
        touched = np.unique(idx[slots == 1])
        w = win[1, touched]
        cur = win[1]
        last_t = w[:, AT["summary_last_t"]]
        tol = np.maximum(0.5 * _z(w[:, AT["summary_interval_s"]]), 1.0)

        def current(state: str, name: str) -> np.ndarray:
            t = w[:, AT[flat_col(state, "t")]]
            ok = t >= last_t - tol
            return np.where(ok, w[:, AT[flat_col(state, name)]], NAN)

        cw = _z(current("CLOSE_WAIT", "count"))
        oldest = current("CLOSE_WAIT", "oldest_state_age_s")
        tw = _z(current("TIME_WAIT", "count"))
        syn = _z(current("SYN_SENT", "count"))
        idle = current("ESTABLISHED", "max_idle_s")
        dup = current("ESTABLISHED", "dup_used_max_idle_s")
        prev = win[0, touched]
        cfg = self.cfg
        per_min = 60.0 / cfg.window_s
        opens = (_z(w[:, AT["opens"]]) + _z(prev[:, AT["opens"]])) * per_min
        short = (_z(w[:, AT["short_lived"]]) + _z(prev[:, AT["short_lived"]])) * per_min
        reopens = _z(w[:, AT["reopens_after_idle"]]) + _z(prev[:, AT["reopens_after_idle"]])
        gate = (
            ((cw >= cfg.close_wait_warning_count) & (_z(oldest) >= cfg.close_wait_grace_s))
            | (opens >= cfg.storm_opens_per_min)
            | (short >= cfg.storm_short_lived_per_min)
            | (syn >= cfg.storm_syn_sent_count)
            | (reopens >= cfg.idle_churn_min_cycles)
            | (_z(idle) >= cfg.zombie_idle_s)
            | (_z(dup) >= cfg.duplicate_idle_s)
            | (tw >= cfg.time_wait_warning_count)
        )
        out: list[tuple] = []
        if gate.any():
            self.routed.update(self.keys[i] for i in touched[gate])
        keep = ~gate
        n = _z(cur[touched, AT["lifetime_n"]])
        life = np.where(n > 0, cur[touched, AT["lifetime_sum_s"]] / np.where(n > 0, n, 1), NAN)
        cols = np.stack(
            [
                *(w[:, AT[f]] for f in OUT_COPIED),
                cw,
                oldest,
                np.full(len(touched), NAN),  # the slope: needs two CLOSE_WAIT summaries
                tw,
                syn,
                idle,
                dup,
                life,
                current("ESTABLISHED", "fds_open"),
                current("ESTABLISHED", "fds_limit"),
            ],
            axis=1,
        )[keep]
        start = self.starts[1]
        ws, we = iso(start), iso(start + self.cfg.window_s)
        last_event = w[keep, AT["last_event_s"]]
        est = current("ESTABLISHED", "count")[keep]
        topic = TOPICS["aggregates"]
        absent = dict.fromkeys(OUT_ABSENT)
        absent.update(dup_processes=0, dup_unused_processes=0, updated_at=we)
        obj = np.empty(cols.shape, dtype=object)
        obj[:, OUT_INT] = _z(cols[:, OUT_INT]).astype(np.int64)
        floats = cols[:, OUT_FLOAT].astype(object)
        floats[np.isnan(cols[:, OUT_FLOAT])] = None
        obj[:, OUT_FLOAT] = floats
        for i, values, t, e in zip(
            touched[keep].tolist(), obj.tolist(), last_event.tolist(), est.tolist(), strict=True
        ):
            side, host, app, cluster, broker, peer = self.ident[i]
            body = {
                "schema": 1,
                "series": self.keys[i],
                "side": side,
                "host": host,
                "app": app,
                "broker": broker,
                "window_start": ws,
                "window_end": we,
                "peer_host": peer,
                "cluster": cluster,
                "window_s": self.cfg.window_s,
                "last_event_time": iso(t),
                "sockets": {} if e != e else {"ESTABLISHED": int(e)},
                **absent,
                **dict(zip(OUT_NUMERIC, values, strict=True)),
            }
            out.append((topic, self.keys[i], dumps(body)))
        return out


def io_floor(text: str | None, saved: bytes | None, state_json: bytes, aggs: list[dict]) -> bytes:
    """Parse the rows, serialise the aggregates, restore and save the state's bytes."""
    if saved is not None:
        buckets.decompress(saved)
    if text:
        [orjson.loads(line) for line in text.split("\n")]
    [dumps(a) for a in aggs]
    return buckets.compress(state_json)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=20000)
    ap.add_argument("--buckets", type=int, default=256)
    ap.add_argument("--batches", type=int, default=16)
    args = ap.parse_args()
    gc.collect()
    gc.freeze()
    cfg = DetectorConfig()
    saved_obj: dict[int, bytes] = {}
    saved_col: dict[int, bytes] = {}
    saved_floor: dict[int, bytes] = {}
    warm = args.batches // 2
    cpu = {"objects": 0.0, "columnar": 0.0, "io_floor": 0.0}
    published = {"objects": 0, "columnar": 0}
    routed = 0
    same = compared = 0
    for b in range(args.batches):
        t = T0 + 5.0 * (b + 1)
        fleet = t - 5.0
        by_bucket: dict[int, list[str]] = {}
        for r in batch_rows(args.series, t, 10.0, 5.0):
            key = hash((r["host"], r["app"])) % args.buckets
            by_bucket.setdefault(key, []).append(json.dumps(r))
        texts = {k: "\n".join(v) for k, v in by_bucket.items()}
        last_aggs: dict[int, list[dict]] = {}
        last_obj: dict[str, str] = {}
        state_json: dict[int, bytes] = {}
        t0 = time.process_time()
        for k in range(args.buckets):
            text = texts.get(k)
            bucket = Bucket.load(saved_obj.get(k), cfg, window_end_clock)
            records = [Record(b, 0, None, fleet, text)] if text else []
            em = bucket.process(records, fleet)
            saved_obj[k] = bucket.dump()
            rows = list(output_rows(em, TOPICS))
            published["objects"] += sum(1 for r in rows if r[0] == TOPICS["aggregates"])
            if b == args.batches - 1:
                last_obj.update((r[1], r[2]) for r in rows if r[0] == TOPICS["aggregates"])
            last_aggs[k] = [a for _k, a in em.aggregates]
            state_json[k] = buckets.decompress(saved_obj[k])
        t1 = time.process_time()
        for k in range(args.buckets):
            col = ColumnarBucket.load(saved_col.get(k), cfg)
            rows = col.process(texts.get(k), fleet, b)
            saved_col[k] = col.dump()
            published["columnar"] += sum(1 for r in rows if r[0] == TOPICS["aggregates"])
            if b == args.batches - 1:
                routed += len(col.routed)
                for topic, key, value in rows:
                    if topic == TOPICS["aggregates"] and key in last_obj:
                        compared += 1
                        same += orjson.loads(value) == orjson.loads(last_obj[key])
        t2 = time.process_time()
        for k in range(args.buckets):
            saved_floor[k] = io_floor(texts.get(k), saved_floor.get(k), state_json[k], last_aggs[k])
        t3 = time.process_time()
        if b >= warm:
            cpu["objects"] += t1 - t0
            cpu["columnar"] += t2 - t1
            cpu["io_floor"] += t3 - t2
    n = args.batches - warm
    per = {k: v / n / args.series * 1e6 for k, v in cpu.items()}
    print(
        json.dumps(
            {
                "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cores",
                "series": args.series,
                "buckets": args.buckets,
                "us_per_series_batch": {k: round(v, 2) for k, v in per.items()},
                "ratio_columnar_to_objects": round(per["columnar"] / per["objects"], 3),
                "ratio_io_floor_to_objects": round(per["io_floor"] / per["objects"], 3),
                "aggregates_published": published,
                "series_on_object_path": routed,
                "last_batch_aggregates_equal_to_objects": f"{same} of {compared}",
                "state_mb": {
                    "objects": round(sum(map(len, saved_obj.values())) / 1e6, 2),
                    "columnar": round(sum(map(len, saved_col.values())) / 1e6, 2),
                },
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
