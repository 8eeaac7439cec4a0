"""Node and Python packages: the script of a node command line, the version in a
``package.json`` or a ``*.dist-info`` name, and the directories searched for them."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence

from streaming.agent.libraries.model import clean_version

_NODE_OPTS_WITH_VALUE = {"-r", "--require", "--import", "--loader", "--experimental-loader",
                         "-C", "--conditions", "--title", "--env-file", "--input-type"}  # fmt: skip
_DIST_INFO = re.compile(r"^([A-Za-z0-9_.-]+?)-(\d[^-]*?)(?:-py\d[\d.]*)?\.(?:dist|egg)-info$")


def node_script(args: Sequence[str]) -> str | None:
    """The script a node command line runs (None for ``-e``/``-p`` or a bare REPL)."""
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("-e", "--eval", "-p", "--print"):
            return None
        if a == "--":
            return args[i + 1] if i + 1 < len(args) else None
        if a in _NODE_OPTS_WITH_VALUE:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return a
    return None


def package_json_version(text: str) -> str | None:
    """``version`` of a package.json."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return clean_version(version) if isinstance(version, str) else None


def declares(manifest: str, package: str) -> bool:
    """Whether an application's package.json lists ``package`` among its dependencies."""
    try:
        data = json.loads(manifest)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    sections = ("dependencies", "optionalDependencies", "peerDependencies")
    return any(isinstance(data.get(s), dict) and package in data[s] for s in sections)


def dist_info_version(names: Iterable[str], project: str) -> str | None:
    """The installed version of a Python project from a site-packages listing
    (``kafka_python-3.0.12.dist-info``, ``kafka_python-2.0.2-py3.11.egg-info``)."""
    want = re.sub(r"[-_.]+", "_", project).lower()
    for name in names:
        m = _DIST_INFO.match(name)
        if m and re.sub(r"[-_.]+", "_", m.group(1)).lower() == want:
            return m.group(2)
    return None


def parent_dirs(path: str, limit: int) -> list[str]:
    """``path`` and its parents, nearest first, at most ``limit``."""
    out: list[str] = []
    path = os.path.normpath(path)
    while len(out) < limit:
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out
