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
    "debian": set(),
    "prometheus_bin": {"debian"},
    "webserver": {"errors"},
    "stopping": set(),
    "topics": {"errors", "options"},
    "agent": {"schema", "metricnames", "errors", "options", "webserver", "topics", "stopping"},
    "detectors": {"schema"},
    "cachedir": set(),
    "job": {"detectors", "schema", "errors", "options", "topics", "stopping", "cachedir"},
    "exporter": {"schema", "metricnames", "errors", "options", "webserver", "topics", "stopping"},
    "mixin": {"detectors", "metricnames", "prometheus_bin", "errors", "options", "cachedir"},
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


# ---- no import cycles between modules -----------------------------------------------------
def _module_names() -> dict[str, Path]:
    """Dotted module name -> file, for every module and package of ``streaming``."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _module_names()


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _import_nodes(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement run when the module is imported or its functions are called:
    top-level, in functions and classes; not under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        elif not _type_checking(child):
            found += _import_nodes(child)
    return found


def module_imports(name: str, source: str | None = None) -> set[str]:
    """The ``streaming`` modules that module ``name`` imports (a package's submodule when
    ``from package import submodule``), from its file or ``source``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]  # fmt: skip
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles_between_modules_of_a_package() -> None:
    graph = {}
    for name in MODULES:
        package = name.rpartition(".")[0]
        # A package's __init__ is left out: importing a submodule runs it first anyway.
        graph[name] = {m for m in module_imports(name) if m.rpartition(".")[0] == package}
    cycles = import_cycles(graph)
    assert not cycles, f"modules importing each other, even inside a function: {cycles}"


def test_the_cycle_finder_sees_function_level_imports() -> None:
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import streaming.options\n"
        "def f():\n    from streaming.mixin.check import dashboard_exprs\n"
        "    from . import promql\n    from .. import errors\n"
    )
    assert module_imports("streaming.mixin.build", source) == {
        "streaming.mixin.check",
        "streaming.mixin.promql",
        "streaming.errors",
    }
