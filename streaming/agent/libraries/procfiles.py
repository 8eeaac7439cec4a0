"""A process's files as the process sees them, read through ``<proc_root>/<pid>/``: its
root (``root/``) and working directory (``cwd/``), so a process in a container is read in its
own mount namespace, and ``map_files/`` for mapped files gone from their path."""

from __future__ import annotations

import os
from typing import BinaryIO

from streaming.agent.libraries.model import MAX_DIR_NAMES, MAX_SMALL_FILE


class ProcessFiles:
    """Path helpers of ``LibraryIdentifier``: the files of a process under ``proc_root``."""

    proc_root: str

    def _proc(self, pid: int, name: str) -> str:
        return f"{self.proc_root}/{pid}/{name}"

    def _in_proc(self, pid: int, path: str) -> str:
        """A path as the process sees it (absolute: its root; relative: its working dir)."""
        if path.startswith("/"):
            return self._proc(pid, "root") + path
        return self._proc(pid, "cwd/") + path

    def _read_text(self, pid: int, name: str, limit: int) -> str:
        with open(self._proc(pid, name), "rb") as f:
            return f.read(limit).decode("utf-8", "replace")

    def _read_small(self, pid: int, path: str) -> str | None:
        try:
            with open(self._in_proc(pid, path), "rb") as f:
                return f.read(MAX_SMALL_FILE).decode("utf-8", "replace")
        except OSError:
            return None

    def _listdir(self, pid: int, path: str) -> list[str]:
        try:
            with os.scandir(self._in_proc(pid, path)) as it:
                names = []
                for entry in it:
                    names.append(entry.name)
                    if len(names) >= MAX_DIR_NAMES:
                        break
                return names
        except OSError:
            return []

    def _open_mapped(self, pid: int, path: str, ranges: dict[str, str]) -> BinaryIO | None:
        """A mapped file by its path, else through map_files/ (deleted or replaced files)."""
        try:
            return open(self._in_proc(pid, path), "rb")
        except OSError:
            pass
        span = ranges.get(path)
        if span is None:
            return None
        name = "-".join(x.lstrip("0") or "0" for x in span.split("-"))
        try:
            return open(self._proc(pid, f"map_files/{name}"), "rb")
        except OSError:
            return None
