"""Argument and signal handling shared by the workload processes."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from datetime import UTC, datetime

STOP = threading.Event()


def parse_props(items: list[str]) -> dict[str, str]:
    """``key=value`` strings -> dict; a malformed item exits with its text."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--prop {item!r}: expected key=value")
        out[key] = value
    return out


def base_parser(description: str, modes: tuple[str, ...]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mode", required=True, choices=modes)
    p.add_argument("--app", required=True, help="marker naming this workload in argv")
    p.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    p.add_argument("--interval-ms", type=int, default=None)
    return p


def install_signal_handlers() -> None:
    """SIGTERM/SIGINT set STOP so loops end and clients close cleanly."""

    def handler(signum: int, frame: object) -> None:
        STOP.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def status(app: str, what: str) -> None:
    now = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
    print(f"{now} {app}: {what}", flush=True)


def sleep_until_stopped(seconds: float) -> bool:
    """Sleep; True when a stop was requested meanwhile."""
    return STOP.wait(max(0.0, seconds))


def die(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(2)
