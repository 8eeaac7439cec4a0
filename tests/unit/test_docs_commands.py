"""Every ``connmon ...`` command line in the documentation parses with the real argument parser.

Command lines come from fenced code blocks of README.md, docs/*.md and every README.md under
deploy/, dashboards/, benchmarks/ and streaming/. A line counts when, after an optional ``$ ``
prompt, environment assignments (``NAME=value``) and ``sudo``/``exec``/``env``, its command is
``connmon`` (any path: ``.venv/bin/connmon``, ``$(BIN)/connmon``); ``make demo DEMO_ARGS="..."``
counts as ``connmon demo ...``. ``\\`` continues a line, and so does an indented line starting
with ``[`` or ``--`` below a connmon line (a synopsis); ``# ...`` ends a line; the command stops
at a shell operator (``|``, ``&&``, ``;``, ``&``, a redirection).

Placeholder rules, the only ones:

- ``[...]`` around an optional part of a synopsis is removed and the part is parsed as written,
  so every option a synopsis shows must exist and its example value must parse;
- a ``...`` standing alone ("more of the same") is dropped;
- ``<...>`` is not accepted: the line must give a concrete value.

Beyond argparse (which runs every ``type=`` conversion), the values a command checks only when
it runs are checked too where that costs nothing: ``connmon job``'s settings (without reading
its config file), ``connmon topics``' and ``connmon mixin build``'s ``--set`` values, and the
durations and scenario names of ``connmon demo``/``scenario run``.
"""

from __future__ import annotations

import argparse
import io
import re
import shlex
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from doc_blocks import ROOT, doc_files, fenced_lines, runs_connmon, unbracket

from streaming.cli import build_parser
from streaming.errors import ConfigError

_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = ("sudo", "exec", "env")
_OPERATORS = ("|", "||", "&&", ";", "&", "<")
_REDIRECT = re.compile(r"^\d*>")
_ANGLE = re.compile(r"<[^<>\s]+>")


@dataclass(frozen=True)
class CommandLine:
    """One connmon command line of the documentation: where it is, its text, its arguments
    (None when it does not split as a shell line)."""

    where: str
    text: str
    argv: tuple[str, ...] | None


def connmon_argv(line: str) -> tuple[str, ...] | None:
    """The arguments after ``connmon`` of a line that runs it, else None. ValueError when a
    line that runs connmon does not split as a shell line."""
    text = line.strip().removeprefix("$ ")
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        if runs_connmon(text):
            raise ValueError(f"does not split as a shell line: {exc}") from None
        return None
    if len(tokens) >= 2 and tokens[:2] == ["make", "demo"]:
        demo = [t.partition("=")[2] for t in tokens[2:] if t.startswith("DEMO_ARGS=")]
        return ("demo", *shlex.split(demo[0] if demo else ""))
    i = 0
    while i < len(tokens) and (_ENV.match(tokens[i]) or tokens[i] in _WRAPPERS):
        i += 1
    if i == len(tokens) or tokens[i].rsplit("/", 1)[-1] != "connmon":
        return None
    argv: list[str] = []
    for token in tokens[i + 1 :]:
        if token in _OPERATORS or _REDIRECT.match(token):
            break
        token = unbracket(token)
        if token != "...":
            argv.append(token)
    return tuple(argv)


def command_lines(paths: list[Path] | None = None) -> list[CommandLine]:
    """Every connmon command line in ``paths`` (default: the documentation)."""
    out = []
    for path in doc_files() if paths is None else paths:
        for number, line in fenced_lines(path.read_text()):
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}"
            try:
                argv = connmon_argv(line)
            except ValueError:
                out.append(CommandLine(where, line.strip(), None))
                continue
            if argv is not None:
                out.append(CommandLine(where, line.strip(), argv))
    return out


@cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def _checked_when_run(args: argparse.Namespace) -> None:
    """The checks a command makes of its values when it starts, where they cost nothing."""
    if args.command == "job":
        from streaming.job.cli import settings_from_args

        settings_from_args(argparse.Namespace(**{**vars(args), "config": None}))
    elif args.command == "demo" or getattr(args, "scenario_action", None) == "run":
        from streaming.scenarios import catalog
        from streaming.scenarios.cli import parse_duration

        if args.duration:
            parse_duration(args.duration)
        try:
            catalog.get(args.scenario or [] if args.command == "demo" else args.names)
        except KeyError as exc:
            raise ConfigError(f"scenario: {exc.args[0]}") from None
    elif args.command == "mixin" and getattr(args, "func", None).__name__ == "run_build":
        from streaming.mixin.config import DEFAULT, with_settings
        from streaming.options import parse_pairs

        with_settings(DEFAULT, parse_pairs("set", args.set))
    elif args.command == "topics" and hasattr(args, "topic_set"):
        from streaming.topics.cli import settings

        settings(argparse.Namespace(**{**vars(args), "config": None}))


def problem(cmd: CommandLine) -> str | None:
    """Why ``cmd`` would not run as written (argparse's message or the setting's), or None."""
    if cmd.argv is None:
        return "does not split as a shell line (unbalanced quotes?)"
    for token in cmd.argv:
        if _ANGLE.search(token):
            return f"placeholder {token!r}: give a concrete example value"
    err = io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            args = _parser().parse_args(list(cmd.argv))
    except SystemExit as exc:
        if exc.code in (0, None):  # --help, --version
            return None
        lines = err.getvalue().strip().splitlines()
        return lines[-1] if lines else f"argparse exited with {exc.code}"
    try:
        _checked_when_run(args)
    except ConfigError as exc:
        return f"configuration error: {exc}"
    return None


def test_the_documentation_has_connmon_command_lines() -> None:
    lines = command_lines()
    files = {c.where.split(":")[0] for c in lines}
    assert len(lines) >= 15, lines
    assert {"README.md", "docs/observed-client-behaviour.md"} <= files, files


def test_every_connmon_command_line_parses() -> None:
    failures = [f"{c.where}: {c.text}\n    -> {p}" for c in command_lines() if (p := problem(c))]
    assert not failures, "command lines that would not run:\n" + "\n".join(failures)


def _doc(tmp_path: Path, text: str) -> list[CommandLine]:
    path = tmp_path / "README.md"
    path.write_text(text)
    return command_lines([path])


def test_collects_from_fences_with_prompts_env_continuations_and_comments(tmp_path) -> None:
    text = (
        "connmon job --trigger 5s   (prose, not collected)\n"
        "```sh\n"
        "$ connmon stack status   # a comment\n"
        "CONNMON_X=1 .venv/bin/connmon job --trigger 5s \\\n"
        "    --max-event-age 1d | tee out\n"
        "kubectl -n connmon get pods\n"
        "```\n"
        "~~~\n"
        "$(BIN)/connmon topics check [--config topics.yaml] ...\n"
        "~~~\n"
        "```\n"
        'make demo DEMO_ARGS="--duration 5m"\n'
        "```\n"
    )
    got = [(c.where.split(":")[1], c.argv) for c in _doc(tmp_path, text)]
    assert got == [
        ("3", ("stack", "status")),
        ("4", ("job", "--trigger", "5s", "--max-event-age", "1d")),
        ("9", ("topics", "check", "--config", "topics.yaml")),
        ("12", ("demo", "--duration", "5m")),
    ]


def test_synopsis_brackets_are_parsed_as_written(tmp_path) -> None:
    (cmd,) = _doc(tmp_path, "```\nconnmon job [--master local[*]] [--set NAME=VALUE ...]\n```\n")
    assert cmd.argv == ("job", "--master", "local[*]", "--set", "NAME=VALUE")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("connmon job --max-event-age 1x", "argument --max-event-age: '1x' is not a duration"),
        ("connmon job --trigger soon", "configuration error: trigger: 'soon'"),
        ("connmon topics create --no-such-flag", "unrecognized arguments: --no-such-flag"),
        ("connmon nosuch", "invalid choice: 'nosuch'"),
        ("connmon job [--*-topic NAME]", "unrecognized arguments: --*-topic"),
        ("connmon scenario run close-wait --duration soon", "configuration error: --duration"),
        ("connmon scenario run no-such-scenario", "unknown scenario"),
        ("connmon mixin build --set no_such_setting=1", "configuration error: "),
        ("connmon topics check --set events.partitions=many", "configuration error: "),
        ("connmon exporter --listen <host:port>", "placeholder '<host:port>'"),
        ("connmon job --set 'unbalanced", "does not split"),
    ],
)
def test_a_wrong_line_is_reported_with_its_place_and_message(tmp_path, line, message) -> None:
    (cmd,) = _doc(tmp_path, f"text\n\n```sh\n{line}\n```\n")
    assert cmd.where.endswith("README.md:4")
    found = problem(cmd)
    assert found is not None and message in found, found


@pytest.mark.parametrize(
    "line",
    [
        "connmon job --max-event-age 1d --max-event-future off --trigger 5s",
        "connmon job --help",
        "connmon scenario run close-wait --observe-only --duration 270s",
    ],
)
def test_a_right_line_passes(tmp_path, line: str) -> None:
    (cmd,) = _doc(tmp_path, f"```\n{line}\n```\n")
    assert problem(cmd) is None
