"""Which package of ``streaming`` may import which: the table in README.md ("Where the code is").
Runtime code never depends on the development tools ``stack`` and ``scenarios``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "streaming"
DEV_TOOLS = {"stack", "scenarios"}
RUNTIME = {
    "errors": set(),
    "options": {"errors"},
    "schema": set(),
    "metricnames": set(),
    "prometheus_bin": set(),
    "webserver": {"errors"},
    "stopping": set(),
    "topics": {"errors", "options"},
    "agent": {"schema", "metricnames", "errors", "options", "webserver", "topics", "stopping"},
    "detectors": {"schema"},
    "job": {"detectors", "schema", "errors", "options", "topics", "stopping"},
    "exporter": {"schema", "metricnames", "errors", "options", "webserver", "topics", "stopping"},
    "mixin": {"detectors", "metricnames", "prometheus_bin", "errors", "options"},
}


def _imports(path: Path) -> set[str]:
    """The top-level ``streaming`` packages or modules a file imports (``streaming`` itself
    for ``from streaming import __version__``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "streaming":
                out.add(parts[1] if len(parts) > 1 else "streaming")
    return out


def _files(unit: str) -> list[Path]:
    module = PACKAGE / f"{unit}.py"
    return [module] if module.exists() else sorted((PACKAGE / unit).rglob("*.py"))


def test_the_table_names_every_runtime_package() -> None:
    units = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
    }
    assert units - {"__init__", "__main__", "cli"} == set(RUNTIME) | DEV_TOOLS


@pytest.mark.parametrize("unit", sorted(RUNTIME))
def test_runtime_package_imports_only_what_the_table_allows(unit: str) -> None:
    allowed = RUNTIME[unit] | {unit, "streaming"}
    wrong = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in _files(unit)
        for name in _imports(path) - allowed
    }
    assert not wrong, f"{unit} may import only {sorted(RUNTIME[unit])}: {sorted(wrong)}"
