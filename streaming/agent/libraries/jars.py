"""Java: kafka-clients jar names, the classpath of a java command line, and kafka-clients
found in a fat or shaded jar from its zip central directory alone."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from streaming.agent.libraries.model import MAX_SMALL_FILE, MAX_ZIP_DIRECTORY

_KAFKA_CLIENTS_JAR = re.compile(r"(?:^|/)kafka-clients-(\d[\w.+-]*?)\.jar$")
_JAR_CLASSIFIERS = ("-sources", "-javadoc", "-test", "-tests")
_JAVA_CLASSPATH_OPTS = ("-cp", "-classpath", "--class-path")
_JAVA_OPTS_WITH_VALUE = {"--module-path", "-p", "--add-opens", "--add-exports", "--add-modules",
                         "--add-reads", "--patch-module", "--upgrade-module-path",
                         "--limit-modules"}  # fmt: skip
_NESTED_KAFKA_CLIENTS = re.compile(rb"/kafka-clients-(\d[\w.+-]*?)\.jar")
KAFKA_VERSION_ENTRY = b"kafka/kafka-version.properties"


def kafka_clients_version(path: str) -> str | None:
    """``4.3.1`` for ``.../kafka-clients-4.3.1.jar`` (sources, javadoc and test jars excluded)."""
    m = _KAFKA_CLIENTS_JAR.search(path)
    if m is None or m.group(1).endswith(_JAR_CLASSIFIERS):
        return None
    return m.group(1)


def java_version_from_paths(paths: Iterable[str | None]) -> str | None:
    """The version of the first kafka-clients jar among file paths."""
    for path in paths:
        version = kafka_clients_version(path) if path else None
        if version:
            return version
    return None


@dataclass(frozen=True, slots=True)
class JavaCommand:
    """What a java command line runs: classpath entries, the ``-jar`` jar or the main class,
    and the program's own arguments."""

    classpath: list[str]
    jar: str | None
    main_class: str | None
    args: tuple[str, ...]


def java_command(args: Sequence[str]) -> JavaCommand:
    """A java command line's parts (options after the main class or jar belong to the
    program)."""
    classpath: list[str] = []
    i = 1
    while i < len(args):
        a = args[i]
        if a in _JAVA_CLASSPATH_OPTS and i + 1 < len(args):
            classpath.extend(p for p in args[i + 1].split(":") if p)
            i += 2
        elif a.startswith("--class-path="):
            classpath.extend(p for p in a.split("=", 1)[1].split(":") if p)
            i += 1
        elif a == "-jar":
            jar = args[i + 1] if i + 1 < len(args) else None
            return JavaCommand(classpath, jar, None, tuple(args[i + 2 :]))
        elif a in ("-m", "--module") or a.startswith("--module="):
            break  # the main module; the program's arguments follow
        elif a in _JAVA_OPTS_WITH_VALUE:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            return JavaCommand(classpath, None, a, tuple(args[i + 1 :]))
    return JavaCommand(classpath, None, None, ())


def java_classpath(args: Sequence[str]) -> tuple[list[str], str | None]:
    """Classpath entries and the ``-jar`` jar of a java command line."""
    cmd = java_command(args)
    return cmd.classpath, cmd.jar


def properties_value(text: str, name: str) -> str | None:
    """The value of ``name=`` in a Java properties file (the last one, as Java reads it)."""
    found = None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == name:
            found = value.strip()
    return found


def properties_version(text: str) -> str | None:
    """``version=`` of a Java properties file."""
    return properties_value(text, "version") or None


def read_zip_directory(f: BinaryIO, max_size: int = MAX_ZIP_DIRECTORY) -> tuple[bytes, int] | None:
    """The central directory of a zip file and the offset its offsets are relative to (not 0
    when something, such as a launch script, is prepended); None when not a zip or too big."""
    size = f.seek(0, 2)
    tail_size = min(size, 22 + 0xFFFF)
    f.seek(size - tail_size)
    tail = f.read(tail_size)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    end = size - tail_size + at
    cd_size, cd_offset = struct.unpack_from("<II", tail, at + 12)
    if at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07":
        (end64,) = struct.unpack_from("<Q", tail, at - 12)
        f.seek(end64)
        rec = f.read(56)
        if len(rec) == 56 and rec[:4] == b"PK\x06\x06":
            cd_size, cd_offset = struct.unpack_from("<QQ", rec, 40)
            end = end64
    if cd_size > max_size or cd_offset + cd_size > end:
        return None
    base = end - cd_size - cd_offset
    f.seek(base + cd_offset)
    directory = f.read(cd_size)
    return (directory, base) if directory[:4] == b"PK\x01\x02" else None


def zip_entry(directory: bytes, name: bytes) -> tuple[int, int, int] | None:
    """(compression method, compressed size, local header offset) of an entry, found in the
    central directory by its exact name."""
    at = directory.find(name)
    while at >= 0:
        hdr = at - 46
        if hdr >= 0 and directory[hdr : hdr + 4] == b"PK\x01\x02":
            (method,) = struct.unpack_from("<H", directory, hdr + 10)
            (csize,) = struct.unpack_from("<I", directory, hdr + 20)
            (nlen,) = struct.unpack_from("<H", directory, hdr + 28)
            (offset,) = struct.unpack_from("<I", directory, hdr + 42)
            if nlen == len(name):
                return method, csize, offset
        at = directory.find(name, at + 1)
    return None


def read_zip_entry(f: BinaryIO, entry: tuple[int, int, int], base: int) -> bytes | None:
    """A small stored or deflated entry's content."""
    method, csize, offset = entry
    if csize > MAX_SMALL_FILE or method not in (0, 8):
        return None
    f.seek(base + offset)
    head = f.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return None
    nlen, xlen = struct.unpack_from("<HH", head, 26)
    f.seek(base + offset + 30 + nlen + xlen)
    data = f.read(csize)
    return zlib.decompress(data, -15) if method == 8 else data


def jar_kafka_version(f: BinaryIO, max_directory: int = MAX_ZIP_DIRECTORY) -> str | None:
    """The kafka-clients version inside a jar: a nested ``kafka-clients-<v>.jar`` or the
    ``kafka/kafka-version.properties`` of kafka-clients' classes, shaded or not."""
    found = read_zip_directory(f, max_directory)
    return kafka_version_in_jar(f, *found) if found else None


def kafka_version_in_jar(f: BinaryIO, directory: bytes, base: int) -> str | None:
    """``jar_kafka_version`` once the central directory is read."""
    for m in _NESTED_KAFKA_CLIENTS.finditer(directory):
        version = kafka_clients_version(m.group(0).decode("latin-1"))
        if version:
            return version
    entry = zip_entry(directory, KAFKA_VERSION_ENTRY)
    data = read_zip_entry(f, entry, base) if entry else None
    return properties_version(data.decode("latin-1")) if data else None
