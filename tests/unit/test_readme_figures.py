"""README.md's performance figures cite their source: every row of the Benchmarks table names a
date, a commit and a results file under benchmarks/ that exists, and every benchmarks/ path the
README cites exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_COMMIT = re.compile(r"`[0-9a-f]{7,40}`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_BENCH_PATH = re.compile(r"(?<![\w/.-])(benchmarks/[\w./-]*[\w-])")


def benchmark_rows(text: str) -> list[tuple[int, dict[str, str]]]:
    """(line number, {column: cell}) of each row of the table under ``## Benchmarks``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "## Benchmarks")
    header: list[str] | None = None
    rows = []
    for i in range(start + 1, len(lines)):
        line = lines[i].strip()
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if header is not None:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            rows.append((i + 1, dict(zip(header, cells, strict=False))))
    assert header is not None, "no table under ## Benchmarks"
    return rows


def source_problems(text: str, root: Path = ROOT) -> list[str]:
    """One line per benchmark row without a date, a commit or an existing results file."""
    problems = []
    for number, row in benchmark_rows(text):
        source = next((v for k, v in row.items() if k.lower().startswith("source")), None)
        where = f"README.md:{number}"
        if source is None:
            problems.append(f"{where}: no source column")
            continue
        if not _DATE.search(source):
            problems.append(f"{where}: source names no date")
        if not _COMMIT.search(source):
            problems.append(f"{where}: source names no commit")
        links = _LINK.findall(source)
        if not links:
            problems.append(f"{where}: source links no results file")
        for link in links:
            path = (root / link) if link.startswith("benchmarks/") else None
            if path is None:
                # A bare file name after a full link lives in the same folder as the first one.
                first = next((x for x in links if x.startswith("benchmarks/")), "")
                path = root / Path(first).parent / link
            if not path.is_relative_to(root / "benchmarks") or not path.is_file():
                problems.append(f"{where}: results file {link} does not exist")
    return problems


def cited_path_problems(text: str, root: Path = ROOT) -> list[str]:
    """One line per ``benchmarks/...`` path anywhere in the README that does not exist."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for path in _BENCH_PATH.findall(line):
            if not (root / path).exists():
                problems.append(f"README.md:{number}: {path} does not exist")
    return problems


def test_every_benchmark_row_names_date_commit_and_an_existing_results_file() -> None:
    text = README.read_text()
    assert len(benchmark_rows(text)) >= 10
    problems = source_problems(text)
    assert not problems, "\n".join(problems)


def test_every_benchmarks_path_the_readme_cites_exists() -> None:
    problems = cited_path_problems(README.read_text())
    assert not problems, "\n".join(problems)


_TABLE = """# x

## Benchmarks

| what | result | source: date, commit, results file |
|---|---|---|
{row}

## Known limits
"""


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (
            "| a | 1 s | 2026-11-23, `8790c5a`, [f](benchmarks/agent/no-such-file.json) |",
            "results file benchmarks/agent/no-such-file.json does not exist",
        ),
        ("| a | 1 s | `8790c5a`, [f](benchmarks/agent/README.md) |", "no date"),
        ("| a | 1 s | 2026-11-23, [f](benchmarks/agent/README.md) |", "no commit"),
        ("| a | 1 s | 2026-11-23, `8790c5a`, benchmarks/agent |", "links no results file"),
        ("| a | 1 s | 2026-11-23, `8790c5a`, [f](../elsewhere.json) |", "does not exist"),
    ],
)
def test_a_row_without_its_source_fails(row: str, problem: str) -> None:
    problems = source_problems(_TABLE.format(row=row))
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_missing_cited_path_fails() -> None:
    problems = cited_path_problems("see benchmarks/job/results-bogus-2026-11-27.json.\n")
    assert problems == ["README.md:1: benchmarks/job/results-bogus-2026-11-27.json does not exist"]
