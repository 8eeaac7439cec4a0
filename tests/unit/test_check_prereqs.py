"""``make setup`` stops first thing, with one line, on a tool that is missing or too old
(``deploy/local/check-prereqs.sh`` run with a PATH of only the tools it may find)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local" / "check-prereqs.sh"
# What setup needs, and what the script itself runs.
TOOLS = ("javac", "java", "mvn", "go", "node", "npm")
PROMETHEUS = ("prometheus", "promtool", "prometheus-alertmanager", "amtool")
UTILITIES = ("awk", "id")


def _bin_dir(tmp_path: Path, leave_out: str = "", fakes: dict[str, str] | None = None) -> Path:
    """A folder of links to the real tools (python3: this interpreter), but ``leave_out``;
    ``fakes`` are scripts in place of a tool."""
    found = {t: shutil.which(t) for t in (*TOOLS, *UTILITIES)}
    missing = [t for t, p in found.items() if p is None]
    if missing:
        pytest.skip(f"not on this machine: {', '.join(missing)}")
    found["python3"] = os.path.realpath(sys.executable)
    for tool in PROMETHEUS:  # setup installs them as root; present, they are linked
        if path := shutil.which(tool):
            found[tool] = path
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, path in found.items():
        if tool != leave_out:
            (bin_dir / tool).symlink_to(path)
    for tool, body in (fakes or {}).items():
        fake = bin_dir / tool
        fake.unlink(missing_ok=True)
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
    return bin_dir


def _check(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), "python3"],
        env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_all_tools_present_passes(tmp_path: Path) -> None:
    proc = _check(_bin_dir(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        ("go", "Go >= 1.26 is needed (go not found on PATH)"),
        ("node", "Node.js >= 18 is needed (node not found on PATH)"),
        ("npm", "npm is needed (npm not found on PATH)"),
        ("javac", "a JDK >= 17 is needed (javac not found on PATH)"),
        ("java", "a JDK >= 17 is needed (java not found on PATH)"),
        ("mvn", "Maven is needed (mvn not found on PATH)"),
        ("python3", "Python >= 3.11 is needed (python3 not found on PATH)"),
    ],
)
def test_a_missing_tool_stops_with_one_line_naming_it(
    tmp_path: Path, tool: str, named: str
) -> None:
    proc = _check(_bin_dir(tmp_path, leave_out=tool))
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"setup: {named}: install it, e.g. "), lines[0]


@pytest.mark.parametrize(
    ("tool", "fake", "named"),
    [
        ("go", "echo go version go1.19.8 linux/amd64", "Go >= 1.26 is needed (go 1.19.8 found)"),
        ("node", "echo v16.20.2", "Node.js >= 18 is needed (node 16.20.2 found)"),
        ("javac", "echo javac 11.0.22 >&2", "a JDK >= 17 is needed (javac 11.0.22 found)"),
        ("python3", 'echo "3.9.2"', "Python >= 3.11 is needed (python3 is 3.9.2)"),
    ],
)
def test_a_too_old_tool_stops_naming_its_version(
    tmp_path: Path, tool: str, fake: str, named: str
) -> None:
    proc = _check(_bin_dir(tmp_path, fakes={tool: fake}))
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"setup: {named}: install it"), proc.stderr


def test_make_setup_runs_the_check_before_the_venv() -> None:
    """``make setup`` (dry run, every target out of date): the check is its first command."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "setup"],
        cwd=ROOT, capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    commands = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("echo")]
    assert commands[0] == "sh deploy/local/check-prereqs.sh python3", commands[:3]
