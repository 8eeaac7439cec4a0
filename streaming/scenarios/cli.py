"""``connmon demo`` and ``connmon scenario list|run``.

``connmon scenario run NAME... --observe-only`` runs real clients against real clusters with
only the observer (no connmon component needed): what docs/observed-client-behaviour.md is
made from. Without ``--observe-only`` (and in ``connmon demo``) the agent, the job, the
exporter and Prometheus run too.
"""

from __future__ import annotations

import argparse
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

from streaming.errors import ConfigError
from streaming.job.settings import parse_duration as duration_setting


def parse_duration(text: str) -> float:
    """A positive ``--duration`` (``90``, ``90s``, ``10m``, ``1h``: the job's duration syntax)
    -> seconds; anything else is a ConfigError naming the option."""
    seconds = duration_setting("--duration", text)
    if seconds <= 0:
        raise ConfigError(f"--duration {text!r}: must be positive")
    return seconds


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a service manager, ``timeout``) stops the run like Ctrl-C: every child we
    started lives in its own session and would otherwise outlive us."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _run_dir(base: str | None, label: str) -> Path:
    from streaming.stack import artifacts

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    root = Path(base) if base else artifacts.repo_root() / "var" / "scenarios"
    return root / f"{label}-{stamp}"


def _scenarios(names: list[str]):
    from streaming.scenarios import catalog
    from streaming.scenarios.model import ScenarioError, validate

    try:
        chosen = catalog.get(names)
        validate(chosen, catalog.CLUSTERS)
    except (KeyError, ScenarioError) as exc:
        raise ConfigError(f"scenario: {exc}") from exc
    return chosen


def cmd_list(args: argparse.Namespace) -> int:
    from streaming.scenarios import catalog

    for s in catalog.SCENARIOS.values():
        kinds = sorted({e.kind or "none" for e in s.expect if e.present}) or ["none"]
        print(f"{s.name:<12} cluster={s.cluster:<7} expects={','.join(kinds)}\n    {s.summary}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from streaming.scenarios.runner import Session

    scenarios = _scenarios(args.names)
    duration = (
        parse_duration(args.duration) if args.duration else max(s.duration_s for s in scenarios)
    )
    run_dir = _run_dir(args.run_dir, "scenario")
    session = Session(
        scenarios,
        run_dir,
        connmon=not args.observe_only,
        exporter_shards=_shards(args.exporter_shards),
    )
    _interrupt_on_sigterm()
    with session:
        print(f"run dir: {run_dir}")
        try:
            if args.observe_only:
                session.run_for(duration)
            else:
                from streaming.scenarios.live import LiveView

                LiveView(session).run(duration)
        except KeyboardInterrupt:
            print("\ninterrupted: stopping everything")
        for s in scenarios:
            text = f"== {s.name}: {s.summary}\n{session.observer_report(s)}\n"
            print(text)
            (run_dir / f"observed-{s.name}.txt").write_text(text)
        if session.actions_done:
            print("actions: " + "; ".join(session.actions_done))
        if not args.observe_only and args.report:
            _write_report(session, Path(args.report))
    return 0


def _write_report(session, path: Path) -> None:
    from streaming.scenarios.report import write_report

    write_report(session, path)
    print(f"report: {path}")


def cmd_demo(args: argparse.Namespace) -> int:
    from streaming.scenarios.live import LiveView
    from streaming.scenarios.runner import Session

    duration = parse_duration(args.duration)
    scenarios = _scenarios(args.scenario or [])
    run_dir = _run_dir(args.run_dir, "demo")
    report = Path(args.report) if args.report else run_dir / "report.html"
    session = Session(
        scenarios, run_dir, connmon=True, exporter_shards=_shards(args.exporter_shards)
    )
    _interrupt_on_sigterm()
    started = time.time()
    with session:
        try:
            LiveView(session).run(duration)
        except KeyboardInterrupt:
            print("\ninterrupted: writing the report and stopping everything")
        print(session.observer_report())
        _write_report(session, report)
    print(f"demo ran {time.time() - started:.0f}s; everything stopped")
    return 0


def _shards(n: int) -> int:
    if n < 1:
        raise ConfigError(f"exporter-shards: {n} must be at least 1")
    return n


SHARDS_HELP = "exporters splitting the series between them, each scraped by Prometheus (default 1)"


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help="run every scenario against a local 3-broker cluster with the full connmon stack",
    )
    demo.add_argument(
        "--duration", default="10m", help="how long to run (e.g. 90s, 10m; default 10m)"
    )
    demo.add_argument("--report", help="report file (default <run dir>/report.html)")
    demo.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    demo.add_argument("--run-dir", help="where logs and data go (default var/scenarios/)")
    demo.add_argument("--exporter-shards", type=int, default=1, help=SHARDS_HELP)
    demo.set_defaults(func=cmd_demo)

    sc = sub.add_parser("scenario", help="list or run the end-to-end scenarios")
    ssub = sc.add_subparsers(dest="scenario_action", metavar="ACTION", required=True)
    ls = ssub.add_parser("list", help="list the scenarios")
    ls.set_defaults(func=cmd_list)
    run = ssub.add_parser("run", help="run scenarios by name (all when none given)")
    run.add_argument("names", nargs="*", metavar="NAME")
    run.add_argument("--duration", help="override the scenarios' duration (e.g. 5m)")
    run.add_argument(
        "--observe-only",
        action="store_true",
        help="clients and clusters with the observer only (no agent, job, exporter)",
    )
    run.add_argument("--report", help="write an HTML report here (not with --observe-only)")
    run.add_argument("--run-dir", help="where logs and data go (default var/scenarios/)")
    run.add_argument("--exporter-shards", type=int, default=1, help=SHARDS_HELP)
    run.set_defaults(func=cmd_run)
