"""Per-socket lifecycle between scans, and per-group summaries. Pure: fed snapshots and a clock.

A socket is keyed by its network namespace and 4-tuple, which survive the step into TIME_WAIT
(where the kernel drops the inode) and orphaned FIN_WAIT. ``SocketLifecycles`` emits:

- ``opened``: a socket not seen before (``open_reason`` ``initial`` on the first scan);
- ``transition``: its state changed (with ``closed_by`` once a closing path is known);
- ``closed``: the connection is over, either because the socket left the table or because it
  entered TIME_WAIT / CLOSE (the rest of TIME_WAIT is kernel bookkeeping, seen in summaries).

Two facts for the idle-churn detector ride on these events:

- ``opened`` carries ``reopen_idle_s`` when the same process (on the broker side: the same peer
  address) closed a connection to the same broker before, with that connection's idle time at
  close: a reap-and-reconnect cycle is a re-open by the same client, not any open after any
  close (a redeployed application is a new process).
- ``closed`` carries ``broker_drop`` when the broker closed it together with a connection that
  was in use (data within ``BUSY_IDLE_S``): a broker that drops busy connections too is
  restarting or failing, not expiring idle ones. A re-open after such a close carries
  ``reopen_after_drop``.

``closed_by``: a path through CLOSE_WAIT/LAST_ACK means the peer closed first; through
FIN_WAIT1/FIN_WAIT2/CLOSING/TIME_WAIT means this side did. A socket that vanishes straight
from ESTABLISHED is counted as closed by the peer: had this side closed first, its 4-tuple would
still be in the table as TIME_WAIT (60 s on Linux), so what is left is a peer FIN that the
application answered within one scan interval (a healthy client) or a reset. Otherwise unknown.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from streaming.agent.records import (
    CLOSE,
    CLOSE_WAIT,
    CLOSING,
    ESTABLISHED,
    FIN_WAIT1,
    FIN_WAIT2,
    LAST_ACK,
    SYN_RECV,
    SYN_SENT,
    TIME_WAIT,
    SocketRecord,
)
from streaming.schema.clients import UNKNOWN_LIBRARY, version_tuple
from streaming.schema.events import TCP_STATES
from streaming.schema.fds import FdUsage, nearest_limit

PEER_CLOSE_STATES = frozenset({CLOSE_WAIT, LAST_ACK})
LOCAL_CLOSE_STATES = frozenset({FIN_WAIT1, FIN_WAIT2, CLOSING, TIME_WAIT})
CLOSING_STATES = PEER_CLOSE_STATES | LOCAL_CLOSE_STATES | {CLOSE}
# Closing states a socket can be in after its process closed it (no inode left).
ORPHAN_STATES = frozenset({FIN_WAIT1, FIN_WAIT2, CLOSING, LAST_ACK})
# States that end the connection for good: after them only kernel bookkeeping remains.
FINAL_STATES = frozenset({TIME_WAIT, CLOSE})
OPENING_STATES = frozenset({SYN_SENT, SYN_RECV, ESTABLISHED})

# A connection with data this recently before the peer closed it was in use.
BUSY_IDLE_S = 5.0
# How long a closed connection waits for its process to re-open one to the same broker.
REOPEN_HORIZON_S = 3600.0
# An extra connection that carried data only in its first seconds is unused since it opened
# (a Java client's bootstrap connection: one metadata exchange, then nothing), unless it
# re-opens one its process lost: a rarely used client that reconnects for each use.
UNUSED_AFTER_OPEN_S = 10.0
# How long a socket that left the table is remembered: the eBPF collector may report its close
# after the scan that found it gone, and that connection was the scans' to report.
GONE_MEMORY_S = 60.0


@dataclass(frozen=True, slots=True)
class Meta:
    """What a socket means: Kafka attribution and owning process."""

    cluster: str | None
    side: str
    app: str
    broker_id: int | None
    broker_endpoint: str
    peer_host: str | None = None
    bootstrap: bool = False
    pid: int | None = None
    comm: str | None = None
    container: str | None = None
    pod: str | None = None
    namespace: str | None = None
    client_library: str | None = None  # client side only
    client_version: str | None = None
    client_library_evidence: str | None = None  # streaming.schema.clients.LIBRARY_EVIDENCE
    process_role: str | None = None  # streaming.schema.clients.PROCESS_ROLES

    @property
    def broker(self) -> str:
        return str(self.broker_id) if self.broker_id is not None else self.broker_endpoint


@dataclass(slots=True)
class LostConnection:
    """A closed connection waiting for its client to re-open one to the same broker."""

    idle_s: float | None
    at: float
    dropped: bool


@dataclass(slots=True)
class Tracked:
    rec: SocketRecord
    meta: Meta
    first_seen: float
    state_since: float
    last_sample: float
    idle_s: float | None
    open_idle_s: float | None  # last idle sampled while not closing
    open_sample: float
    closed_by: str | None = None
    close_began: float | None = None
    idle_at_close_s: float | None = None
    closed_emitted: bool = False
    last_sample_before: float = 0.0
    gen: int = 0  # the last scan that saw it
    dropped: bool = False  # closed by the broker together with a busy connection
    reopened: bool = False  # its process lost a connection to this broker before
    # First seen already closing and without a process while the kernel counts connections:
    # no events of its own; ``kernel_counts`` when the kernel's report of its close is to be
    # counted (it was still open, so the dump that found it marked it as seen).
    # Silent with an inode: a new client socket whose process was not found (see ``_open``),
    # until a scan finds it open again or the kernel reports its close.
    silent: bool = False
    kernel_counts: bool = False


def meta_fields(m: Meta) -> dict[str, Any]:
    """A socket's attribution as event fields."""
    return {
        "cluster": m.cluster,
        "side": m.side,
        "app": m.app,
        "broker_id": m.broker_id,
        "broker_endpoint": m.broker_endpoint,
        "peer_host": m.peer_host,
        "bootstrap": m.bootstrap,
        "pid": m.pid,
        "comm": m.comm,
        "container": m.container,
        "pod": m.pod,
        "namespace": m.namespace,
        "client_library": m.client_library,
        "client_version": m.client_version,
        "client_library_evidence": m.client_library_evidence,
        "process_role": m.process_role,
    }


def _closed_by_for(state: int) -> str | None:
    if state in PEER_CLOSE_STATES:
        return "peer"
    if state in LOCAL_CLOSE_STATES:
        return "local"
    return None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(max(x, 0.0), nd)


class SocketLifecycles:
    """Feed ``update(now, observations)`` one scan at a time; it returns event field dicts."""

    def __init__(self) -> None:
        self.sockets: dict[tuple[int, str, int, str, int], Tracked] = {}
        # Keys of the tracked sockets not in TIME_WAIT: what a partial scan must account for,
        # without walking the (many) TIME_WAIT entries it did not dump.
        self._live: dict[tuple, None] = {}  # an ordered set: events keep a stable order
        self.initialized = False
        # Set while the kernel counts every connection no scan saw (the eBPF collector): a new
        # socket first seen already closed (TIME_WAIT) was counted there, so it is tracked for the
        # summaries without events of its own.
        self.counted_elsewhere = False
        self._gone: dict[tuple, float] = {}  # key -> when a scan last found it gone
        self._last_groups: dict[tuple, tuple[int | None, str]] = {}
        self._gen = 0
        self._lost: dict[tuple, LostConnection] = {}  # reopen key -> last close
        self._busy_drops: dict[tuple, float] = {}  # (cluster, broker) -> last busy peer close
        self._last_now: float | None = None
        # This scan's closes begun, closed events and new connections, for ``_pair``.
        self._began: list[Tracked] = []
        self._closed_now: list[tuple[dict, Tracked]] = []
        self._opened_now: list[tuple[dict, Tracked]] = []

    # ---- per-socket events ---------------------------------------------------------------
    def update(
        self,
        now: float,
        observations: Iterable[tuple[SocketRecord, Meta | None]],
        unchanged: Iterable[tuple[Tracked, SocketRecord]] = (),
        partial: bool = False,
        kernel_closed: Mapping[tuple, str] | None = None,
    ) -> list[dict]:
        """Apply one scan. A None meta keeps the socket's meaning; a new socket needs one.
        ``unchanged`` is the caller's fast path: tracked sockets whose state and inode did not
        change, with their new record (only the tcp_info numbers are new).

        ``partial``: the scan left TIME_WAIT out (the eBPF collector counts connections meanwhile).
        A tracked socket it did not find is closed only when ``kernel_closed`` (key -> who
        closed first, from the kernel) says it was; else it may be in TIME_WAIT or its close
        still on its way, and it is kept for the next scan."""
        events: list[dict] = []
        initial = not self.initialized
        self.initialized = True
        self._gen += 1
        gen = self._gen
        sockets, live = self.sockets, self._live
        for t, rec in unchanged:
            self._sample(t, rec, now)
            t.gen = gen
        for rec, meta in observations:
            key = rec.key
            t = sockets.get(key)
            if t is not None and self._is_reuse(t, rec):
                if not t.closed_emitted:
                    self._close(t, now, events)
                del sockets[key]
                live.pop(key, None)
                t = None
            if t is None:
                if meta is None:
                    raise ValueError(f"new socket {rec.conn} needs its Meta")
                t = self._open(key, rec, meta, now, initial, events)
            else:
                self._observe(t, rec, meta, now, events)
            t.gen = gen
            if rec.state == TIME_WAIT:
                live.pop(key, None)
            else:
                live[key] = None
        gone = self._gone
        if gone and next(iter(gone.values())) < now - GONE_MEMORY_S:
            self._gone = gone = {k: v for k, v in gone.items() if v >= now - GONE_MEMORY_S}
        if partial:  # TIME_WAIT was not dumped: those keep their last scan (see the docstring)
            unseen = [k for k in live if sockets[k].gen != gen]
        else:
            unseen = [k for k, t in sockets.items() if t.gen != gen]
        for key in unseen:
            t = sockets[key]
            if partial:
                by = (kernel_closed or {}).get(key)
                if by is None:
                    t.gen = gen
                    continue
                if t.closed_by is None and by != "unknown":
                    t.closed_by = by
            del sockets[key]
            live.pop(key, None)
            gone.pop(key, None)  # keep the dict in time order: the oldest entry first
            gone[key] = now
            if not t.closed_emitted:
                if t.closed_by is None and t.rec.state == ESTABLISHED:
                    t.closed_by = "peer"  # no TIME_WAIT left behind: see the module docstring
                self._close(t, now, events)
        self._pair(now)
        return events

    def recently_gone(self, key: tuple) -> bool:
        """Whether a scan tracked this socket until it left the table, not long ago."""
        return key in self._gone

    # ---- reap-and-reconnect pairing ------------------------------------------------------
    @staticmethod
    def _reopen_key(m: Meta) -> tuple | None:
        """Who re-opens: the process (client side) or the peer address (broker side)."""
        if m.pid is None:
            return None
        return (m.pid, m.cluster, m.side, m.broker, m.peer_host if m.side == "broker" else None)

    def _pair(self, now: float) -> None:
        """After a scan: remember the connections whose close began, mark the peer closes that
        came with a busy connection's (``broker_drop``), and pair new connections with an
        earlier close by the same client (``reopen_idle_s``)."""
        began, closed, opened = self._began, self._closed_now, self._opened_now
        self._began, self._closed_now, self._opened_now = [], [], []
        # Two closes belong together when no scan lies between them.
        tol = (now - self._last_now if self._last_now is not None else 0.0) + 1.0
        self._last_now = now
        for t in began:
            idle = t.open_idle_s  # as last sampled: a vanished socket's close time is unknown
            if t.closed_by == "peer" and idle is not None and idle < BUSY_IDLE_S:
                where = (t.meta.cluster, t.meta.broker)
                since = t.close_began or now
                self._busy_drops[where] = max(self._busy_drops.get(where, since), since)
        for t in began:
            if t.closed_by == "peer" and t.close_began is not None:
                busy = self._busy_drops.get((t.meta.cluster, t.meta.broker))
                t.dropped = busy is not None and abs(busy - t.close_began) <= tol
            key = self._reopen_key(t.meta)
            if key is not None and t.close_began is not None:
                self._remember(key, t)
        for e, t in closed:
            if t.dropped:
                e["broker_drop"] = True
        for e, t in opened:
            key = self._reopen_key(t.meta)
            lost = self._lost.pop(key, None) if key is not None else None
            if lost is not None and lost.idle_s is not None:
                t.reopened = True
                e["reopen_idle_s"] = _r(lost.idle_s)
                if lost.dropped:
                    e["reopen_after_drop"] = True
        horizon = now - REOPEN_HORIZON_S
        if any(v.at < horizon for v in self._lost.values()):
            self._lost = {k: v for k, v in self._lost.items() if v.at >= horizon}
        self._busy_drops = {k: v for k, v in self._busy_drops.items() if v >= now - 2 * tol}

    def _remember(self, key: tuple, t: Tracked) -> None:
        at = t.close_began or 0.0
        last = self._lost.get(key)
        idle, dropped = t.idle_at_close_s, t.dropped
        if last is not None and at - last.at <= BUSY_IDLE_S:
            # Closed together with another of the client's connections: the idlest one is
            # the one an idle timer would have expired.
            if last.idle_s is not None and (idle is None or last.idle_s > idle):
                idle = last.idle_s
            dropped = dropped or last.dropped
        self._lost[key] = LostConnection(idle, at, dropped)

    @staticmethod
    def _is_reuse(t: Tracked, rec: SocketRecord) -> bool:
        """Same 4-tuple, different socket: a new inode, an opening state after a closing one,
        or any other state after TIME_WAIT/CLOSE (a new connection that scans first found
        already closing, its process gone)."""
        if rec.inode and t.rec.inode and rec.inode != t.rec.inode:
            return True
        if t.rec.state in FINAL_STATES:
            return rec.state not in FINAL_STATES
        return t.rec.state in CLOSING_STATES and rec.state in OPENING_STATES

    def _open(self, key, rec, meta, now, initial, events) -> Tracked:
        idle = rec.idle_ms / 1000.0 if rec.idle_ms is not None else None
        entered = self._entered(rec, now, None)
        t = Tracked(rec, meta, min(now, entered), entered, now, idle, idle, now)
        self.sockets[key] = t
        orphan = not rec.inode and rec.state in ORPHAN_STATES
        if not initial and self.counted_elsewhere:
            if rec.state in FINAL_STATES or orphan:
                t.closed_by = _closed_by_for(rec.state)
                t.closed_emitted = t.silent = True
                t.kernel_counts = orphan
                return t
            if meta.pid is None and meta.side == "client" and rec.inode:
                # Most likely its process closed it between the dump and the owner lookup: the
                # kernel's report of the close names the process that connected. Still open at
                # the next scan, it gets its events then.
                t.closed_emitted = t.silent = t.kernel_counts = True
                return t
        self._announce(t, now, initial, events)
        cb = _closed_by_for(rec.state)
        if cb is not None:
            t.closed_by = cb
            t.close_began = entered
            if not initial:
                self._began.append(t)
        if rec.state in FINAL_STATES:
            if initial:
                # Closed before the agent started: how long it lived is unknown, so it is not
                # reported as a short-lived connection; summaries still count it.
                t.closed_emitted = True
            else:
                # Born and finished between two scans: short-lived evidence (connection storms).
                self._close(t, now, events)
        return t

    def _observe(
        self, t: Tracked, rec: SocketRecord, meta: Meta | None, now: float, events
    ) -> None:
        prev = t.rec.state
        if meta is not None and (meta.pid is not None or t.meta.pid is None):
            t.meta = meta
        self._sample(t, rec, now)
        if t.silent and t.kernel_counts and rec.inode:
            # Waited for its process and still open, so not a close the kernel reports (an
            # orphan never has an inode): the events it would have had.
            t.silent = t.kernel_counts = t.closed_emitted = False
            self._announce(t, now, False, events)
        if rec.state == prev:
            return
        if t.silent:
            t.state_since = now
            return
        t.state_since = self._entered(rec, now, t.last_sample_before)
        if t.closed_by is None:
            cb = _closed_by_for(rec.state)
            if cb is not None:
                t.closed_by = cb
                t.close_began = t.state_since
                t.idle_at_close_s = self._idle_at(t, t.state_since)
                self._began.append(t)
        events.append(self._fields(t, "transition", now, prev_state=TCP_STATES.get(prev)))
        if rec.state in FINAL_STATES and not t.closed_emitted:
            self._close(t, now, events)

    def _announce(self, t: Tracked, now: float, initial: bool, events: list[dict]) -> None:
        """The ``opened`` event of a socket; a new one waits for ``_pair``."""
        ev = self._fields(t, "opened", now, open_reason="initial" if initial else "new")
        events.append(ev)
        if not initial:
            self._opened_now.append((ev, t))

    @staticmethod
    def _sample(t: Tracked, rec: SocketRecord, now: float) -> None:
        """Take a scan's numbers: the new record, idle time and when it was sampled."""
        t.rec = rec
        if rec.idle_ms is not None:
            t.idle_s = rec.idle_ms / 1000.0
            if rec.state not in CLOSING_STATES:
                t.open_idle_s, t.open_sample = t.idle_s, now
        elif t.idle_s is not None:
            t.idle_s += now - t.last_sample  # TIME_WAIT has no tcp_info: keep counting
        t.last_sample_before, t.last_sample = t.last_sample, now

    @staticmethod
    def _entered(rec: SocketRecord, now: float, prev_sample: float | None) -> float:
        """When the socket entered its current state: now, except for CLOSE_WAIT, dated by the
        peer's FIN (tcpi_last_ack_recv), no earlier than the previous scan."""
        if rec.state == CLOSE_WAIT and rec.last_ack_recv_ms is not None:
            since = now - rec.last_ack_recv_ms / 1000.0
            return since if prev_sample is None else max(since, prev_sample)
        return now

    @staticmethod
    def _idle_at(t: Tracked, now: float) -> float | None:
        if t.open_idle_s is None:
            return None
        return t.open_idle_s + (now - t.open_sample)

    def _close(self, t: Tracked, now: float, events: list[dict]) -> None:
        if t.close_began is None:
            t.close_began = now
            t.idle_at_close_s = self._idle_at(t, now)
            self._began.append(t)
        ev = self._fields(t, "closed", now, closed_by=t.closed_by or "unknown")
        ev["lifetime_s"] = _r(t.close_began - t.first_seen)
        ev["idle_at_close_s"] = _r(t.idle_at_close_s)
        events.append(ev)
        self._closed_now.append((ev, t))
        t.closed_emitted = True

    @staticmethod
    def _fields(t: Tracked, kind: str, now: float, **extra: Any) -> dict:
        r = t.rec
        ev: dict[str, Any] = {
            "kind": kind,
            **meta_fields(t.meta),
            "conn": r.conn,
            "inode": r.inode,
            "state": TCP_STATES.get(r.state, "CLOSE"),
            "state_age_s": _r(now - t.state_since),
            "idle_s": _r(t.idle_s),
            "lifetime_s": _r(now - t.first_seen),
            "bytes_sent": r.bytes_acked,
            "bytes_received": r.bytes_received,
            "rtt_s": None if r.rtt_us is None else r.rtt_us / 1e6,
        }
        if t.closed_by is not None and kind != "opened":
            ev["closed_by"] = t.closed_by
        ev.update(extra)
        return ev

    # ---- summaries ----------------------------------------------------------------------
    def summaries(
        self,
        now: float,
        interval_s: float,
        paused: Callable[[int], str | None] | None = None,
        fds: Callable[[int], FdUsage | None] | None = None,
    ) -> list[dict]:
        """One summary per (cluster, side, app, broker, peer_host, state) group with sockets now,
        plus a zero-count summary for each group that had sockets last time (so a drop is seen).
        ``paused`` says how a pid is paused (``pause.PauseProbe.how``), ``fds`` its file
        descriptors (``fds.fd_usage``); each asked once per pid.
        """
        pause_of = functools.cache(paused) if paused is not None else None
        fds_of = functools.cache(fds) if fds is not None else None
        groups: dict[tuple, list[Tracked]] = {}
        for t in self.sockets.values():
            m = t.meta
            key = (m.cluster, m.side, m.app, m.broker, m.peer_host, t.rec.state)
            groups.setdefault(key, []).append(t)
        out: list[dict] = []
        for key, members in groups.items():
            m = members[0].meta
            out.append(
                self._summary(
                    key, members, now, interval_s, m.broker_id, m.broker_endpoint, pause_of, fds_of
                )
            )
        for key, (broker_id, endpoint) in self._last_groups.items():
            if key not in groups:
                out.append(self._summary(key, [], now, interval_s, broker_id, endpoint, None, None))
        self._last_groups = {
            k: (ms[0].meta.broker_id, ms[0].meta.broker_endpoint) for k, ms in groups.items()
        }
        return out

    @staticmethod
    def _summary(
        key: tuple,
        members: list[Tracked],
        now: float,
        interval_s: float,
        broker_id: int | None,
        broker_endpoint: str,
        pause_of: Callable[[int], str | None] | None,
        fds_of: Callable[[int], FdUsage | None] | None,
    ) -> dict:
        cluster, side, app, _broker, peer_host, state = key
        per_pid: dict[int, list[Tracked]] = {}
        for t in members:
            if t.meta.pid is not None:
                per_pid.setdefault(t.meta.pid, []).append(t)
        dup_idle: float | None = None
        dup_conn: str | None = None
        dups = [ts for ts in per_pid.values() if len(ts) > 1]
        unused = 0
        used_idle: float | None = None
        used_active: float | None = None
        for ts in dups:
            sampled = sorted(((t.idle_s, t) for t in ts if t.idle_s is not None), key=itemgetter(0))
            if not sampled:
                continue
            active = sampled[0][0]  # the process's busiest connection to this broker
            if dup_idle is None or sampled[-1][0] > dup_idle:
                dup_idle, dup_conn = sampled[-1][0], sampled[-1][1].rec.conn
            any_unused = False
            for idle, t in sampled[1:]:
                if not t.reopened and (now - t.first_seen) - idle <= UNUSED_AFTER_OPEN_S:
                    any_unused = True
                elif used_idle is None or idle > used_idle:
                    used_idle, used_active = idle, active
            unused += any_unused
        idles = [t.idle_s for t in members if t.idle_s is not None]
        library, version, evidence, role = _library_of(members)
        pauses = Counter(
            how for pid in per_pid if pause_of is not None and (how := pause_of(pid)) is not None
        )
        fds = nearest_limit(
            [u for pid in per_pid if fds_of is not None and (u := fds_of(pid)) is not None]
        )
        return {
            "kind": "summary",
            "cluster": cluster,
            "side": side,
            "app": app,
            "broker_id": broker_id,
            "broker_endpoint": broker_endpoint,
            "peer_host": peer_host,
            "state": TCP_STATES.get(state, "CLOSE"),
            "count": len(members),
            "oldest_state_age_s": _r(max((now - t.state_since for t in members), default=0.0)),
            "max_idle_s": _r(max(idles)) if idles else None,
            "processes": len(per_pid),
            "max_per_process": max((len(ts) for ts in per_pid.values()), default=0),
            "dup_processes": len(dups),
            "dup_max_idle_s": _r(dup_idle),
            "dup_conn": dup_conn,
            "dup_unused_processes": unused,
            "dup_used_max_idle_s": _r(used_idle),
            "dup_used_active_idle_s": _r(used_active),
            "interval_s": interval_s,
            "client_library": library,
            "client_version": version,
            "client_library_evidence": evidence,
            "process_role": role,
            "paused_processes": sum(pauses.values()) or None,
            "paused_how": max(pauses, key=lambda h: (pauses[h], h)) if pauses else None,
            "fds_open": fds[0] if fds else None,
            "fds_limit": fds[1] if fds else None,
        }


def _library_of(
    members: list[Tracked],
) -> tuple[str | None, str | None, str | None, str | None]:
    """The client library, version, evidence and process role most of a group's sockets
    belong to (one identification each; identified ones first: a group mixing an unidentified
    process with a known one is named by the known). A tie goes to the newer version, compared
    as numbers (in a rolling upgrade 2.10.0 is newer than 2.9.0), then by name."""
    votes = Counter(
        (
            t.meta.client_library,
            t.meta.client_version,
            t.meta.client_library_evidence,
            t.meta.process_role,
        )
        for t in members
        if t.meta.client_library is not None
    )
    if not votes:
        return None, None, None, None

    def rank(kv: tuple[tuple[str | None, ...], int]) -> tuple:
        (library, version, *rest), n = kv
        parsed = version_tuple(version)
        named = tuple(v or "" for v in (library, version, *rest))
        return (library != UNKNOWN_LIBRARY, n, parsed is not None, parsed or (), named)

    return max(votes.items(), key=rank)[0]
