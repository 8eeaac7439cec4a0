"""The demo's live terminal view: URLs, then active findings per client x broker, redrawn
every couple of seconds (on a terminal) or printed when they change (in a log)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from streaming.scenarios.findings import FindingsReader
from streaming.stack.webhook import describe

CLEAR = "\x1b[H\x1b[2J"


def findings_table(active: list[dict[str, Any]], width: int = 120) -> str:
    """Active findings, one line each: app, broker, kind, severity and the summary."""
    if not active:
        return "  (no active findings)"
    lines = [f"  {'app':<28} {'side':<6} {'broker':<8} {'kind':<22} {'sev':<8} summary"]
    for f in active:
        broker = f.get("broker_id")
        broker = broker if broker is not None else f.get("broker_endpoint", "?")
        line = (
            f"  {str(f.get('app'))[:28]:<28} {str(f.get('side'))[:6]:<6} {str(broker)[:8]:<8} "
            f"{f['kind'][:22]:<22} {str(f.get('severity'))[:8]:<8} {f.get('summary', '')}"
        )
        lines.append(line[:width])
    return "\n".join(lines)


class LiveView:
    """Runs the session for ``duration`` seconds while showing what connmon finds."""

    def __init__(self, session: Any, out: TextIO = sys.stdout, every_s: float = 2.0) -> None:
        self.session, self.out, self.every_s = session, out, every_s
        self.tty = out.isatty()
        self.reader: FindingsReader | None = None  # started by the session on first use
        self._last = ""

    def header(self, duration: float) -> str:
        s = self.session
        lines = [
            f"connmon demo: {s.elapsed():.0f}s of {duration:.0f}s   (Ctrl-C stops everything)",
            "scenarios: " + ", ".join(sc.name for sc in s.scenarios),
        ]
        for name, c in s.clusters.items():
            up = sum(1 for b in c.status() if b["up"])
            lines.append(f"kafka {name:<7} {c.bootstrap_servers}  ({up}/{len(c.nodes)} up)")
        if s.components is not None:
            lines += [f"{k:<18} {v}" for k, v in s.components.urls().items()]
            dead = [p.name for p in s.components.dead()]
            if dead:
                lines.append(f"!! connmon component(s) exited: {', '.join(dead)} (see run dir)")
        dead_w = [p.name for p in s.dead_workloads()]
        if dead_w:
            lines.append(f"!! workload(s) exited: {', '.join(dead_w)}")
        lines.append(f"run dir: {s.run_dir}")
        return "\n".join(lines)

    def render(self, duration: float) -> str:
        active = self.reader.active() if self.reader else []
        return (
            f"{self.header(duration)}\n\nactive findings ({len(active)}):\n"
            + findings_table(active)
            + "\n\n"
            + self.notifications()
        )

    def notifications(self, last: int = 8) -> str:
        """What Alertmanager delivered so far: what a person on call would have received."""
        hook = self.session.components.webhook if self.session.components else None
        sent = hook.notifications() if hook is not None else []
        lines = [f"notifications delivered ({len(sent)}):"]
        lines += [f"  {describe(n)}" for n in sent[-last:]] or ["  (none yet)"]
        return "\n".join(lines)

    def _draw(self, duration: float) -> None:
        if self.tty:
            self.out.write(CLEAR + self.render(duration) + "\n")
        else:
            # In a log: print the table only when the set of findings changes (not the numbers).
            active = self.reader.active() if self.reader else []
            sig = repr(
                sorted(
                    (str(f.get("app")), str(f.get("broker_id")), f["kind"], str(f.get("severity")))
                    for f in active
                )
            )
            if sig != self._last:
                t = self.session.elapsed()
                self.out.write(f"\n[{t:.0f}s] active findings ({len(active)}):\n")
                self.out.write(findings_table(active) + "\n")
            self._last = sig
        self.out.flush()

    def run(self, duration: float) -> None:
        s = self.session
        self.reader = s.read_findings()
        if not self.tty:
            self.out.write(self.header(duration) + "\n")
        try:
            next_draw = 0.0
            while s.elapsed() < duration:
                s.tick()
                if time.monotonic() >= next_draw:
                    self._draw(duration)
                    next_draw = time.monotonic() + self.every_s
                time.sleep(0.5)
        finally:
            self._draw(duration)
