"""The live-fleet benchmark's load generator and prober, one process of its own (so the job's
driver is measured alone); ``bench_fleet.py`` runs it.

    .venv/bin/python benchmarks/job/fleet_load.py --bootstrap HOST:PORT --topic T \\
        --findings-topic F --series 10000 [--probe-from EPOCH --probe-until EPOCH]

Load: ``--series`` series, each sending one agent-shaped ESTABLISHED summary every
``--interval`` seconds (event time = now), spread evenly over the interval; a series is one
(host, broker) pair: ``series / brokers`` hosts (``fleet-000123``, one app each, 12 app names)
x ``--brokers`` brokers, keyed by host with per-host ``seq`` as the agent writes them. A host's
summaries go out together, as an agent's round does. Produced at ``series / interval``
events/s on a schedule: when the producer falls behind it catches up at once and says how far
behind it was (``behind_s``).

Probes (``benchkit.Prober``): from ``--probe-from`` to ``--probe-until`` (epoch seconds), or
as a line ``probe FROM UNTIL`` on stdin says, one CLOSE_WAIT summary of a new series every
``--probe-every`` seconds, timed to its ``close_wait_buildup`` finding; findings are consumed
until the process is stopped.

Prints JSON lines on stdout: ``{"type": "stats", ...}`` every ``--report-every`` seconds,
``{"type": "probe_sent"|"probe", ...}`` per probe sent / answered, and ``{"type": "final", ...}``
when stopped (SIGTERM, SIGINT or ``--run-for``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from benchkit import Prober  # noqa: E402

from streaming.agent.producer import PRODUCER_DEFAULTS  # noqa: E402

APPS = ("orders-consumer", "payments-api", "billing-worker", "search-indexer", "audit-log",
        "inventory-sync", "notifications", "fraud-scoring", "clickstream", "ledger",
        "shipping-events", "user-profile")  # fmt: skip
CLIENT_LIBRARIES = (("librdkafka", "2.16.1"), ("kafka-clients", "3.7.1"), ("sarama", "1.43.2"))


class Fleet:
    """Pre-serialized summaries: only the event time, ``seq`` and the ages change per event."""

    def __init__(self, series: int, brokers: int, interval_s: float, started: float) -> None:
        self.series = series
        self.brokers = brokers
        self.interval_s = interval_s
        self.started = started
        ms = int(started * 1000)
        self.keys: list[bytes] = []
        self.parts: list[tuple[str, str, str, float]] = []  # mid, tail, end, oldest age at t0
        for s in range(series):
            h, b = divmod(s, brokers)
            host = f"fleet-{h:06d}"
            lib, version = CLIENT_LIBRARIES[h % len(CLIENT_LIBRARIES)]
            sockets = 1 + h % 3  # one per process, no duplicates
            mid = f'","host":"{host}","agent_id":"{host}-{ms}","seq":'
            tail = (
                f',"cluster":"prod-eu","side":"client","app":"{APPS[h % len(APPS)]}",'
                f'"broker_id":{b + 1},"broker_endpoint":"10.0.0.{11 + b}:9092",'
                f'"state":"ESTABLISHED","count":{sockets},"oldest_state_age_s":'
            )
            end = (
                f',"processes":{sockets},"max_per_process":1,"dup_processes":0,'
                f'"interval_s":{interval_s},"client_library":"{lib}","client_version":"{version}"}}'
            )
            self.keys.append(host.encode())
            # the oldest socket opened up to an hour before the agent started
            self.parts.append((mid, tail, end, 600.0 + (s * 7919) % 3000))

    def event(self, i: int, now: float, stamp: str) -> bytes:
        """The ``i``-th summary since the start (series ``i % series``, round ``i // series``)."""
        rnd, s = divmod(i, self.series)
        mid, tail, end, age0 = self.parts[s]
        seq = rnd * self.brokers + s % self.brokers
        age = round(now - self.started + age0, 3)
        idle = ((s + rnd) * 37) % 500 / 100  # 0-5 s: busy clients
        return (
            f'{{"schema":1,"kind":"summary","event_time":"{stamp}{mid}{seq}{tail}{age},'
            f'"max_idle_s":{idle}{end}'
        ).encode()


class Stamp:
    """``streaming.schema.times.iso`` for now, the seconds part formatted once per second."""

    def __init__(self) -> None:
        self._sec = -1
        self._text = ""

    def __call__(self, t: float) -> str:
        sec = int(t)
        if sec != self._sec:
            self._sec, self._text = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._text}.{int((t - sec) * 1000):03d}Z"


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"type": kind, "t": round(time.time(), 3), **fields}), flush=True)


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True, help="the events topic")
    ap.add_argument("--findings-topic", required=True)
    ap.add_argument("--series", type=int, required=True)
    ap.add_argument("--brokers", type=int, default=3, help="series per host")
    ap.add_argument("--interval", type=float, default=10.0, help="summary interval, s")
    ap.add_argument("--probe-from", type=float, default=0.0, help="epoch s")
    ap.add_argument("--probe-until", type=float, default=0.0, help="epoch s")
    ap.add_argument("--probe-every", type=float, default=5.0, help="s")
    ap.add_argument("--probe-prefix", default="probe-")
    ap.add_argument("--report-every", type=float, default=5.0, help="s")
    ap.add_argument("--run-for", type=float, default=None, help="stop after this many s")
    args = ap.parse_args()

    from confluent_kafka import Producer

    stopping = False

    def stop(_sig: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    window = [args.probe_from, args.probe_until]

    def commands() -> None:
        for line in sys.stdin:
            words = line.split()
            if len(words) == 3 and words[0] == "probe":
                window[:] = [float(words[1]), float(words[2])]

    threading.Thread(target=commands, daemon=True).start()

    errors = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    # The agent's producer settings (idempotent, acks=all, lz4), with a larger queue and a
    # shorter linger: one producer speaks for the whole fleet.
    conf = {k: v for k, v in PRODUCER_DEFAULTS.items() if k != "client.id"}
    conf.update({"bootstrap.servers": args.bootstrap, "client.id": "connmon-bench-fleet",
                 "linger.ms": 50, "queue.buffering.max.messages": 2_000_000,
                 "queue.buffering.max.kbytes": 1_048_576})  # fmt: skip
    producer = Producer(conf)
    prober = Prober(args.bootstrap, args.topic, args.findings_topic)
    t0 = time.time()
    fleet = Fleet(args.series, args.brokers, args.interval, t0)
    stamp = Stamp()
    rate = args.series / args.interval
    chunk = max(100, int(rate / 20))  # at most 50 ms of events between polls
    i = 0
    next_probe, probes = 0.0, 0
    next_report = t0 + args.report_every
    max_behind = behind_now = 0.0
    emit(
        "start", series=args.series, target_events_per_s=rate, hosts=-(-args.series // args.brokers)
    )
    cpu0 = cpu_s()
    while not stopping:
        now = time.time()
        if args.run_for is not None and now - t0 >= args.run_for:
            break
        due = int((now - t0) * rate)
        behind_now = (due - i) / rate
        max_behind = max(max_behind, behind_now)
        topic, produce, keys = args.topic, producer.produce, fleet.keys
        text = stamp(now)
        upto = min(due, i + chunk)
        while i < upto:
            try:
                produce(topic, key=keys[i % fleet.series], value=fleet.event(i, now, text),
                        on_delivery=delivered)  # fmt: skip
            except BufferError:
                producer.poll(0.05)
                continue
            i += 1
        producer.poll(0)
        if window[0] <= now < window[1] and now >= next_probe:
            host = f"{args.probe_prefix}{probes}"
            sent_t = prober.send(host)
            emit("probe_sent", host=host, sent_t=sent_t)
            probes += 1
            next_probe = max(next_probe, window[0]) + args.probe_every
        for host, lat in prober.poll(0):
            emit("probe", host=host, latency_s=round(lat, 3))
        if now >= next_report:
            emit("stats", sent=i, queued=len(producer), delivery_errors=errors,
                 behind_s=round(behind_now, 3), max_behind_s=round(max_behind, 3),
                 cpu_s=round(cpu_s() - cpu0, 2))  # fmt: skip
            max_behind = 0.0
            next_report += args.report_every
        if i >= int((time.time() - t0) * rate):
            time.sleep(0.02)
    producer.flush(10)
    elapsed = time.time() - t0
    emit("final", sent=i, queued=len(producer), delivery_errors=errors, elapsed_s=round(elapsed, 2),
         events_per_s=round(i / elapsed, 1), target_events_per_s=rate, probes_sent=probes,
         probes_answered=len(prober.latencies), other_findings=dict(prober.other),
         cpu_s=round(cpu_s() - cpu0, 2))  # fmt: skip
    prober.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
