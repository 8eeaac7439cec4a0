"""What identification returns (``ClientLibrary``, ``UNKNOWN``), how versions are cleaned,
and the bounds on every read."""

from __future__ import annotations

from dataclasses import dataclass

from streaming.schema.clients import UNKNOWN_LIBRARY


@dataclass(frozen=True, slots=True)
class ClientLibrary:
    name: str  # one of streaming.schema.clients.CLIENT_LIBRARIES, or UNKNOWN_LIBRARY
    version: str | None  # as the library states it, without a leading "v"
    # Where it came from: fd, cmdline, jar, jvm, maps, buildinfo, manifest, package, rodata,
    # symbols (streaming.schema.clients maps each to an evidence level).
    source: str = ""
    # The process's role among Kafka's own processes (streaming.schema.clients.PROCESS_ROLES),
    # None for an application (roles.role_of).
    role: str | None = None


UNKNOWN = ClientLibrary(UNKNOWN_LIBRARY, None)

MAX_CACHE = 4096
MAX_MAPS = 4 << 20  # bytes of /proc/<pid>/maps
MAX_FDS = 4096  # open files looked at for jars
MAX_JARS = 8  # jars whose zip directory is read
MAX_ZIP_DIRECTORY = 16 << 20  # one jar's
MAX_ZIP_BUDGET = 32 << 20  # all jars' of one process
MAX_DIR_NAMES = 4096  # names looked at in one directory listing
MAX_NODE_DIRS = 12  # directories searched for node_modules
MAX_SITE_DIRS = 12
MAX_SMALL_FILE = 256 << 10  # package.json, pyvenv.cfg, properties
MAX_BUILDINFO = 1 << 20
MAX_SYMBOLS = 8 << 20  # a symbol table plus its names
MAX_RODATA = 16 << 20
MAX_SECTIONS = 4096


def clean_version(version: str | None) -> str | None:
    """``v1.43.2`` -> ``1.43.2``; empty, ``(devel)`` and the like -> None."""
    if not version:
        return None
    version = version.strip()
    if version[:1] in "vV" and version[1:2].isdigit():
        version = version[1:]
    return version if version[:1].isdigit() else None
