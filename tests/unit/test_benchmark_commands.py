"""Every benchmark command line in the benchmarks' READMEs parses with its script's real argument
parser.

Command lines come from the documentation's fenced code blocks (``doc_blocks``: README.md,
docs/ and the READMEs under benchmarks/ and the other trees): a line whose command is
``.venv/bin/python benchmarks/...py`` (or ``python benchmarks/...py``). ``\\`` continues a line,
``# ...`` ends it, ``[...]`` around an optional part is removed and the part parsed as written,
and ``$(date +%F)`` stands for a date. The script is loaded from its file and
its ``main()`` run until its parser has parsed the arguments (the benchmark itself never runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import re
import shlex
import sys
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from doc_blocks import ROOT, doc_files, fenced_lines, unbracket

_COMMAND = re.compile(r"^\s*(?:\.venv/bin/)?python3?\s+(benchmarks/\S+\.py)(.*)$")
_DATE = "2026-01-01"  # for ``$(date +%F)``


def command_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, script, arguments) of each benchmark command in ``text``'s code blocks."""
    out = []
    for number, line in fenced_lines(text):
        if m := _COMMAND.match(line):
            out.append((number, m.group(1), m.group(2)))
    return out


def arguments(text: str) -> list[str]:
    """A command's arguments as its shell would pass them, placeholders resolved."""
    tokens = shlex.split(text.replace("$(date +%F)", _DATE), comments=True)
    return [t for t in map(unbracket, tokens) if t]


class _Parsed(Exception):
    """Raised once the script's parser has parsed: the benchmark is not run."""


def parse_with_script(script: Path, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed by ``script``'s own ``main()``; SystemExit with argparse's message when
    it does not parse."""
    spec = importlib.util.spec_from_file_location(f"_bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved_path, saved_argv = list(sys.path), sys.argv
    parse_args = argparse.ArgumentParser.parse_args
    parse_known = argparse.ArgumentParser.parse_known_args
    inside = []  # parse_args calls parse_known_args: that inner call returns as usual

    def parse_then_stop(self: argparse.ArgumentParser, *a: object, **kw: object) -> None:
        inside.append(True)
        try:
            parsed = parse_args(self, *a, **kw)
        finally:
            inside.pop()
        raise _Parsed(parsed)

    def parse_known_then_stop(self: argparse.ArgumentParser, *a: object, **kw: object) -> object:
        parsed = parse_known(self, *a, **kw)
        if inside:
            return parsed
        raise _Parsed(parsed[0])

    try:
        # As ``python script.py`` runs it: its folder first on the path, the module registered
        # (dataclasses look their module up there).
        sys.path.insert(0, str(script.parent))
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore[method-assign]
        argparse.ArgumentParser.parse_known_args = parse_known_then_stop  # type: ignore[method-assign]
        sys.argv = [str(script), *argv]
        module.main()
    except _Parsed as done:
        return done.args[0]
    finally:
        argparse.ArgumentParser.parse_args = parse_args  # type: ignore[method-assign]
        argparse.ArgumentParser.parse_known_args = parse_known  # type: ignore[method-assign]
        sys.path[:] = saved_path
        sys.argv = saved_argv
        sys.modules.pop(spec.name, None)
    raise AssertionError(f"{script}: main() returned without parsing its arguments")


def _documented() -> list[tuple[str, str, str]]:
    found = []
    for doc in doc_files():
        for number, script, rest in command_lines(doc.read_text()):
            found.append((f"{doc.relative_to(ROOT)}:{number}", script, rest))
    return found


DOCUMENTED = _documented()


def test_the_benchmark_readmes_have_commands() -> None:
    assert len(DOCUMENTED) >= 20, DOCUMENTED
    assert any("--ingest-only" in rest for _w, _s, rest in DOCUMENTED)


@pytest.mark.parametrize(
    ("where", "script", "rest"), DOCUMENTED, ids=[w for w, _s, _r in DOCUMENTED]
)
def test_a_documented_benchmark_command_parses(where: str, script: str, rest: str) -> None:
    path = ROOT / script
    assert path.is_file(), f"{where}: {script} does not exist"
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            parse_with_script(path, arguments(rest))
    except SystemExit as exc:
        pytest.fail(f"{where}: {script}{rest} does not parse: {err.getvalue().strip()} ({exc})")


def test_an_option_the_script_lacks_fails() -> None:
    with pytest.raises(SystemExit), redirect_stderr(io.StringIO()):
        parse_with_script(ROOT / "benchmarks/job/bench_fleet.py", ["--ingest-alone"])


def test_continued_lines_optional_parts_and_comments_are_read_as_the_shell_would() -> None:
    text = (
        "```\n"
        ".venv/bin/python benchmarks/job/bench_state.py --series 20 \\\n"
        "    [--stages]   # a comment\n"
        "python benchmarks/x.py --json r-$(date +%F).json\n"
        "```\n"
        ".venv/bin/python benchmarks/outside.py\n"
    )
    got = [(n, s, arguments(r)) for n, s, r in command_lines(text)]
    assert got == [
        (2, "benchmarks/job/bench_state.py", ["--series", "20", "--stages"]),
        (4, "benchmarks/x.py", ["--json", "r-2026-01-01.json"]),
    ]
