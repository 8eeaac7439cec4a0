"""The per-user cache of jars and built clients: where it is, and builds keyed by sources."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streaming.cachedir import cache_dir
from streaming.scenarios import buildstamp
from streaming.stack import artifacts

INSTALL_TOOLS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "install-tools.sh"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"CONNMON_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/c"),
        ({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/connmon"),
        ({"CONNMON_CACHE_DIR": "", "XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/connmon"),
        ({"HOME": "/h"}, "/h/.cache/connmon"),
    ],
)
def test_cache_dir_env_override_then_xdg_then_home(environ: dict[str, str], expected: str) -> None:
    assert cache_dir(environ) == Path(expected)


def test_cache_dir_reads_the_process_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("CONNMON_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "connmon"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "connmon"
    monkeypatch.setenv("CONNMON_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


@pytest.mark.parametrize(
    "environ",
    [
        {"CONNMON_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x", "HOME": "/h"},
        {"XDG_CACHE_HOME": "/x", "HOME": "/h"},
        {"XDG_CACHE_HOME": "", "HOME": "/h"},
    ],
)
def test_install_tools_computes_the_same_cache(environ: dict[str, str]) -> None:
    """The shell script names the folder with the same rule (its first lines, run alone)."""
    head = [ln for ln in INSTALL_TOOLS.read_text().splitlines() if ln.startswith("CACHE_DIR=")]
    assert len(head) == 1
    out = subprocess.run(
        ["bash", "-c", f'{head[0]}\nprintf %s "$CACHE_DIR"'],
        env={"PATH": "/usr/bin:/bin", **environ},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(out) == cache_dir(environ)


def test_builds_are_keyed_by_their_sources(monkeypatch, tmp_path) -> None:
    """Same sources, same folder (a second checkout builds nothing); other sources, another
    folder (two checkouts do not overwrite each other's build)."""
    monkeypatch.setenv("CONNMON_CACHE_DIR", str(tmp_path / "cache"))
    a, b = tmp_path / "a", tmp_path / "b"
    for root, text in ((a, "x"), (b, "y")):
        root.mkdir()
        (root / "main.go").write_text(text)
    stamp_a = buildstamp.digest(a, [a / "main.go"])
    stamp_b = buildstamp.digest(b, [b / "main.go"])
    dir_a, dir_b = buildstamp.keyed_dir("go", stamp_a), buildstamp.keyed_dir("go", stamp_b)
    assert dir_a != dir_b and dir_a.parent == dir_b.parent == tmp_path / "cache"
    for out, stamp in ((dir_a, stamp_a), (dir_b, stamp_b)):
        part = buildstamp.start(out)
        (part / "bin").write_text(stamp)
        assert not buildstamp.is_current(out, stamp)
        buildstamp.finish(part, out, stamp)
        assert not part.exists()
    assert buildstamp.is_current(dir_a, stamp_a) and buildstamp.is_current(dir_b, stamp_b)
    assert (dir_a / "bin").read_text() == stamp_a
    (a / "main.go").write_text("y")  # a checkout with b's sources finds b's build
    assert buildstamp.keyed_dir("go", buildstamp.digest(a, [a / "main.go"])) == dir_b


def test_swap_in_replaces_a_folder_whole(tmp_path) -> None:
    out = tmp_path / "jars"
    out.mkdir()
    (out / "old.jar").write_text("old")
    part = tmp_path / "jars.part-1"
    part.mkdir()
    (part / "new.jar").write_text("new")
    artifacts.swap_in(part, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jars"]
    assert [p.name for p in out.iterdir()] == ["new.jar"]
