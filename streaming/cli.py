"""``connmon`` command line: one subcommand per component, each registered by its own module.

A component module exposes ``register(subparsers)`` that adds its parser and sets
``func=callable(args) -> int``. Components are imported lazily enough that ``connmon --help``
works without Spark or Kafka running.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from streaming import __version__
from streaming.errors import ConfigError

# Module paths providing register(subparsers); order is the order in --help.
COMPONENTS = (
    "streaming.stack.cli",
    "streaming.agent.cli",
    "streaming.job.cli",
    "streaming.exporter.cli",
    "streaming.topics.cli",
    "streaming.mixin.cli",
    "streaming.scenarios.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="connmon",
        description="Monitor the TCP connections between Kafka clients and Kafka brokers.",
    )
    parser.add_argument("--version", action="version", version=f"connmon {__version__}")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMPONENTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only a component that is not built yet is skipped; a broken import is an error.
            if exc.name is not None and name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"connmon: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
