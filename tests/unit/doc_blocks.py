"""The documentation's fenced code blocks, as the tests of its commands read them: which files,
and each logical line of a block (continuations joined)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_TREES = ("deploy", "dashboards", "benchmarks", "streaming")

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_SYNOPSIS_MORE = re.compile(r"^\s+(\[|--)")
# A line that means to run connmon, told apart before it is split (for one that does not split).
_RUNS_CONNMON = re.compile(r"^(?:[A-Za-z_]\w*=\S*\s+)*(?:(?:sudo|exec|env)\s+)*\S*\bconnmon\s")


def doc_files() -> list[Path]:
    """README.md, docs/*.md and every README.md under the trees above (not in hidden or
    installed folders such as ``.cache`` or ``node_modules``)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in README_TREES:
        for path in sorted((ROOT / top).rglob("README.md")):
            parts = path.relative_to(ROOT).parts
            if not any(p.startswith(".") or p == "node_modules" for p in parts):
                files.append(path)
    return files


def fenced_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, logical line) of every fenced code block: ``\\`` continuations
    joined, and so are a synopsis's indented lines that go on with ``[`` or ``--`` after a
    line that runs connmon."""
    fence: str | None = None
    held: tuple[int, str] | None = None  # a logical line that later lines may still continue
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)[0] * 3
            continue
        if m and m.group(1).startswith(fence) and not pending:
            if held:
                yield held
            fence, held = None, None
            continue
        stripped = line.rstrip()
        if held and not pending and _SYNOPSIS_MORE.match(stripped) and runs_connmon(held[1]):
            start, pending = held[0], [held[1]]
            held = None
        elif not pending:
            if held:
                yield held
            start, held = number, None
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        held = start, " ".join([*pending, stripped.strip() if pending else stripped])
        pending = []
    if held:
        yield held


def runs_connmon(line: str) -> bool:
    """Whether a line means to run connmon (told apart before it is split)."""
    return bool(_RUNS_CONNMON.match(line.strip().removeprefix("$ ")))


def unbracket(token: str) -> str:
    """``[--config`` -> ``--config``, ``topics.yaml]`` -> ``topics.yaml``, ``local[*]]`` ->
    ``local[*]``: only brackets without a partner in the token, and the pair around an optional
    part that is one token (``[--stages]`` -> ``--stages``)."""
    if len(token) > 2 and token[0] == "[" and token[-1] == "]":
        token = token[1:-1]
    while token.startswith("[") and token.count("[") > token.count("]"):
        token = token[1:]
    while token.endswith("]") and token.count("]") > token.count("["):
        token = token[:-1]
    return token
