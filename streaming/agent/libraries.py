"""Which Kafka client library a process uses, and its version, from read-only files under /proc.

Nothing attaches to the process: the evidence is what the kernel already shows of it, read
through ``<proc_root>/<pid>/`` (files of the process through ``root/`` and ``cwd/``, so a
process in a container is read in its own mount namespace). Each kind of process gets the
few cheap reads that name its library, most specific evidence first:

- Loaded shared objects (``maps``), for every process. A mapped ``librdkafka*.so*`` (Debian's
  ``librdkafka.so.1``, the copy bundled in confluent-kafka's Python wheel, node-rdkafka's) or
  a librdkafka binding's extension (confluent-kafka's ``cimpl``, node-rdkafka's addon) means
  ``librdkafka``. Its version is the number ``rd_kafka_version()`` returns, decoded from that
  function's two or three machine instructions (x86-64 and arm64) found through the ELF
  symbol table: the library holds no version string of its own, and the binding's
  version (confluent-kafka 2.16.1 bundles librdkafka 2.16.0) is only the fallback, from its
  ``*.dist-info`` or ``package.json``. A mapped extension under an ``aiokafka/`` package
  means ``aiokafka`` (its wheels ship compiled record modules, imported with the package),
  versioned by the ``aiokafka-<version>.dist-info`` beside it. A file that cannot be opened
  by its path (deleted, or replaced since) is read through ``map_files/`` instead.
- Java (a ``java`` executable or a mapped ``libjvm.so``): a ``kafka-clients-<version>.jar``
  among the open files (``fd/``: the JVM keeps the jars it loads classes from open), then on
  the command line's classpath (``-cp``/``-classpath``/``--class-path``, ``dir/*`` entries
  listed, ``-jar``). A fat or shaded jar, which holds kafka-clients under no name of its own,
  is recognised from its zip central directory alone: a nested ``kafka-clients-<v>.jar``
  (Spring Boot's ``BOOT-INF/lib/``) or the ``kafka/kafka-version.properties`` entry that
  kafka-clients ships, whose ``version=`` is read. At most a few jars are read, and only
  directories of bounded size. A JVM with Kafka sockets and none of that evidence is still
  ``java`` (every JVM client is built on kafka-clients), with no version.
- Go executables: the build information the Go linker writes into the ``.go.buildinfo``
  section (Go 1.18 and later: a 32-byte header, then the Go version and the module list as
  length-prefixed strings), found through the ELF section headers, so only a few kilobytes
  of a large binary are read. Its modules name the library: ``github.com/IBM/sarama`` (and
  the former ``github.com/Shopify/sarama``), ``github.com/twmb/franz-go``,
  ``github.com/segmentio/kafka-go``, and ``github.com/confluentinc/confluent-kafka-go``,
  which is ``librdkafka`` linked in statically: versioned by ``rd_kafka_version()`` when the
  binary kept its symbol table, else by the binding (each binding release bundles the
  librdkafka release of the same number).
- Node: ``node_modules/kafkajs/package.json`` (then node-rdkafka's, meaning librdkafka) in
  the directory of the script on the command line or one of its parents, then from the
  working directory up; a few levels at most.
- Python: besides ``maps`` above, kafka-python is pure Python and leaves no trace but its
  install: a ``kafka_python-<version>.dist-info`` (or ``.egg-info``) in the interpreter's
  site-packages, found from mapped files under ``site-packages``, the virtualenv of the
  interpreter (its ``pyvenv.cfg``) or the interpreter's prefix. An installed but unloaded
  aiokafka (built without extensions) is the last resort.
- Other executables: Rust binaries keep the source paths of their dependencies' panic and log
  locations in ``.rodata``; ``/kafka-<version>/src/`` is the ``kafka`` crate (kafka-rust) and
  ``/rdkafka-<version>/src/`` is rust-rdkafka (librdkafka, versioned by the bundled
  librdkafka in ``rdkafka-sys-<v>+<librdkafka version>`` when present). The read is bounded.
  A ``rd_kafka_version`` in the symbol tables is librdkafka linked in statically (Rust, C,
  C++), versioned as above.

Results are cached per process start, so a reused pid is identified again. Nothing here
raises: an unreadable or unparsable file is no evidence, and no evidence is ``unknown``.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from streaming.agent.procs import ProcInfo
from streaming.schema.clients import UNKNOWN_LIBRARY


@dataclass(frozen=True, slots=True)
class ClientLibrary:
    name: str  # one of streaming.schema.clients.CLIENT_LIBRARIES, or UNKNOWN_LIBRARY
    version: str | None  # as the library states it, without a leading "v"
    # Where it came from: fd, cmdline, jar, jvm, maps, buildinfo, package, rodata, symbols.
    source: str = ""


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


def parse_start_time(stat: str) -> int | None:
    """Field 22 of /proc/<pid>/stat, the process start time in clock ticks since boot."""
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


# --- ELF -------------------------------------------------------------------------------------

EM_386 = 3
EM_X86_64 = 62
EM_AARCH64 = 183
SHT_SYMTAB = 2
SHT_DYNSYM = 11
PT_LOAD = 1


@dataclass(frozen=True, slots=True)
class ElfSection:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


class ElfFile:
    """The headers of an ELF file open for reading; sections and segments are read on demand.
    Raises ValueError for anything that is not a well-formed ELF file."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        ident = self.read(0, 64)
        if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
            raise ValueError("not an ELF file")
        self.is64 = ident[4] == 2
        self.endian = "<" if ident[5] == 1 else ">"
        e = self.endian
        if self.is64:
            (self.machine,) = struct.unpack_from(e + "H", ident, 18)
            phoff, shoff = struct.unpack_from(e + "QQ", ident, 32)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "5H", ident, 54)
        else:
            (self.machine,) = struct.unpack_from(e + "H", ident, 18)
            phoff, shoff = struct.unpack_from(e + "II", ident, 28)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "5H", ident, 42)
        self.loads = self._read_loads(phoff, phentsize, min(phnum, 256))
        self.sections = self._read_sections(shoff, shentsize, min(shnum, MAX_SECTIONS), shstrndx)

    def read(self, offset: int, size: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(size)

    def _read_loads(self, phoff: int, entsize: int, count: int) -> list[tuple[int, int, int]]:
        """(vaddr, file offset, file size) of the PT_LOAD segments."""
        if not phoff or count == 0 or entsize < (56 if self.is64 else 32):
            return []
        raw = self.read(phoff, entsize * count)
        out = []
        for i in range(len(raw) // entsize):
            if self.is64:
                ptype, _, off, vaddr, _, filesz = struct.unpack_from(
                    self.endian + "IIQQQQ", raw, i * entsize
                )
            else:
                ptype, off, vaddr, _, filesz = struct.unpack_from(
                    self.endian + "5I", raw, i * entsize
                )
            if ptype == PT_LOAD:
                out.append((vaddr, off, filesz))
        return out

    def _read_sections(self, shoff: int, entsize: int, count: int, strndx: int) -> list[ElfSection]:
        if not shoff or count == 0 or entsize < (64 if self.is64 else 40):
            return []
        raw = self.read(shoff, entsize * count)
        rows = []
        for i in range(len(raw) // entsize):
            if self.is64:
                name, stype, _, addr, off, size, link = struct.unpack_from(
                    self.endian + "IIQQQQI", raw, i * entsize
                )
            else:
                name, stype, _, addr, off, size, link = struct.unpack_from(
                    self.endian + "7I", raw, i * entsize
                )
            rows.append((name, stype, addr, off, size, link))
        names = b""
        if 0 <= strndx < len(rows):
            _, _, _, off, size, _ = rows[strndx]
            names = self.read(off, min(size, 1 << 20))
        out = []
        for name, stype, addr, off, size, link in rows:
            end = names.find(b"\0", name)
            label = names[name:end].decode("latin-1") if 0 <= name < end else ""
            out.append(ElfSection(label, stype, addr, off, size, link))
        return out

    def section(self, name: str) -> ElfSection | None:
        return next((s for s in self.sections if s.name == name), None)

    def offset_of(self, vaddr: int) -> int | None:
        """The file offset of a virtual address, through the loadable segments."""
        for start, off, size in self.loads:
            if start <= vaddr < start + size:
                return off + vaddr - start
        return None

    def symbol_address(self, wanted: str) -> int | None:
        """The value of a symbol (a function's address): from the dynamic symbol table, else
        from the full one when the binary was not stripped; None when not found or when the
        tables are too big to read."""
        for table_type in (SHT_DYNSYM, SHT_SYMTAB):
            table = next((s for s in self.sections if s.type == table_type), None)
            if table is None or not 0 <= table.link < len(self.sections):
                continue
            strtab = self.sections[table.link]
            if table.size + strtab.size > MAX_SYMBOLS:
                continue
            names = self.read(strtab.offset, strtab.size)
            at = names.find(b"\0" + wanted.encode() + b"\0")
            if at < 0:
                continue
            syms = self.read(table.offset, table.size)
            entsize, fmt = (24, "I4xQ") if self.is64 else (16, "II")
            needle = struct.pack(self.endian + "I", at + 1)  # st_name starts each entry
            hit = syms.find(needle)
            while hit >= 0:
                if hit % entsize == 0 and hit + entsize <= len(syms):
                    _, value = struct.unpack_from(self.endian + fmt, syms, hit)
                    if value:
                        return value
                hit = syms.find(needle, hit + 1)
        return None


# --- Go build information --------------------------------------------------------------------

GO_BUILDINFO_MAGIC = b"\xff Go buildinf:"

# Module path -> library, in the order they win when a binary links several.
GO_MODULES = (
    ("github.com/confluentinc/confluent-kafka-go", "librdkafka"),
    ("github.com/twmb/franz-go", "franz-go"),
    ("github.com/twmb/franz-go/pkg/kgo", "franz-go"),
    ("github.com/IBM/sarama", "sarama"),
    ("github.com/Shopify/sarama", "sarama"),
    ("github.com/segmentio/kafka-go", "kafka-go"),
)
_GO_MAJOR = re.compile(r"/v\d+$")


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def parse_go_modinfo(text: str) -> dict[str, str]:
    """Module path -> version from the module lines of Go build information (``mod`` and
    ``dep`` lines; a ``=>`` line replaces the module before it, and its version wins)."""
    mods: dict[str, str] = {}
    last: str | None = None
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] in ("mod", "dep") and len(parts) >= 3:
            last = parts[1]
            mods[last] = parts[2]
        elif parts[0] == "=>" and last is not None and len(parts) >= 3 and parts[2]:
            mods[last] = parts[2]
    return mods


def parse_go_buildinfo(data: bytes) -> dict[str, str]:
    """Module path -> version from a ``.go.buildinfo`` section (Go 1.18+ inline format);
    empty for older binaries, which store pointers instead of the strings."""
    if len(data) < 32 or not data.startswith(GO_BUILDINFO_MAGIC):
        return {}
    if not data[15] & 0x2:
        return {}
    pos = 32
    try:
        size, pos = _uvarint(data, pos)  # the Go version
        pos += size
        size, pos = _uvarint(data, pos)
    except ValueError:
        return {}
    mod = data[pos : pos + size].decode("utf-8", "replace")
    # The module text is framed by 16-byte sentinels.
    if len(mod) >= 33 and mod[-17] == "\n":
        mod = mod[16:-16]
    return parse_go_modinfo(mod)


def read_go_buildinfo(elf: ElfFile) -> bytes | None:
    """The raw build information of a Go executable, or None for other binaries."""
    sec = elf.section(".go.buildinfo")
    if sec is not None:
        data = elf.read(sec.offset, min(max(sec.size, 32), MAX_BUILDINFO))
    else:
        # Without section headers, the linker puts it first in the writable data segment.
        data = b""
        for _, off, size in elf.loads:
            head = elf.read(off, min(size, 64 << 10))
            at = head.find(GO_BUILDINFO_MAGIC)
            if at >= 0 and at % 16 == 0:
                data = elf.read(off + at, MAX_BUILDINFO)
                break
    return data if data.startswith(GO_BUILDINFO_MAGIC) else None


def library_from_go_modules(mods: dict[str, str]) -> ClientLibrary | None:
    """The Kafka client among a Go binary's modules (major-version suffixes allowed)."""
    bare = {_GO_MAJOR.sub("", path): version for path, version in mods.items()}
    for path, name in GO_MODULES:
        if path in bare:
            return ClientLibrary(name, clean_version(bare[path]), "buildinfo")
    return None


# --- librdkafka ------------------------------------------------------------------------------

_ENDBR = (b"\xf3\x0f\x1e\xfa", b"\xf3\x0f\x1e\xfb")
_A64_RET = 0xD65F03C0
_A64_HINTS = (0xD503245F, 0xD503233F, 0xD503201F)  # bti c, paciasp, nop


def format_rdkafka_version(n: int) -> str | None:
    """librdkafka's version string for its ``0xMMmmrrpp`` number (``0x021000ff`` is 2.16.0;
    ``pp`` below 0xff marks a pre-release), as ``rd_kafka_version_str()`` prints it."""
    if n <= 0 or n > 0xFFFFFFFF:
        return None
    text = f"{n >> 24}.{(n >> 16) & 0xFF}.{(n >> 8) & 0xFF}"
    pre = n & 0xFF
    if pre != 0xFF:
        text += f"-pre{pre}" if pre <= 200 else f"-RC{pre - 200}"
    return text


def decode_rdkafka_version(code: bytes, machine: int) -> str | None:
    """The constant ``rd_kafka_version()`` returns, from the function's first bytes: on x86
    ``mov eax, imm32; ret``, on arm64 ``movz w0, lo; movk w0, hi, lsl 16; ret``."""
    if machine in (EM_X86_64, EM_386):
        if code[:4] in _ENDBR:
            code = code[4:]
        if len(code) >= 6 and code[0] == 0xB8 and code[5] == 0xC3:
            return format_rdkafka_version(int.from_bytes(code[1:5], "little"))
        return None
    if machine == EM_AARCH64:
        words = [int.from_bytes(code[i : i + 4], "little") for i in range(0, len(code) - 3, 4)]
        while words and words[0] in _A64_HINTS:
            words.pop(0)
        if len(words) < 2 or (words[0] & 0xFFE0001F) != 0x52800000:  # movz w0, #imm16
            return None
        value = (words[0] >> 5) & 0xFFFF
        if (words[1] & 0xFFE0001F) == 0x72A00000:  # movk w0, #imm16, lsl #16
            value |= ((words[1] >> 5) & 0xFFFF) << 16
        elif words[1] != _A64_RET:
            return None
        return format_rdkafka_version(value)
    return None


def rdkafka_version_of(elf: ElfFile) -> str | None:
    """The librdkafka version of a shared object exporting ``rd_kafka_version``."""
    addr = elf.symbol_address("rd_kafka_version")
    offset = elf.offset_of(addr) if addr is not None else None
    if offset is None:
        return None
    return decode_rdkafka_version(elf.read(offset, 16), elf.machine)


# --- maps ------------------------------------------------------------------------------------

_LIBRDKAFKA = re.compile(r"^librdkafka(?![+])[-.\w]*\.so(\.[\d.]+)?$")
_RDKAFKA_BINDINGS = ("/confluent_kafka/", "/node-rdkafka/", "/@confluentinc/kafka-javascript/")
_SITE = re.compile(r"^(.*?/(?:site|dist)-packages)/")


@dataclass(frozen=True, slots=True)
class MapsEvidence:
    """What the loaded files of a process say (paths as the process sees them)."""

    ranges: dict[str, str]  # mapped file -> address range of its first mapping
    librdkafka: str | None = None  # a mapped librdkafka shared object
    rdkafka_binding: str | None = None  # a binding's extension (confluent_kafka, node-rdkafka)
    aiokafka: str | None = None  # one of aiokafka's compiled extensions
    jvm: bool = False
    python: bool = False
    site_dirs: tuple[str, ...] = ()


def parse_maps(text: str) -> dict[str, str]:
    """Mapped file path -> address range of its first mapping, from /proc/<pid>/maps."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].removesuffix(" (deleted)")
        out.setdefault(path, parts[0])
    return out


def from_maps(text: str) -> MapsEvidence:
    """Classify the files a process has mapped."""
    ranges = parse_maps(text)
    librdkafka = binding = aiokafka = None
    jvm = python = False
    sites: list[str] = []
    for path in ranges:
        base = path.rsplit("/", 1)[-1]
        if librdkafka is None and _LIBRDKAFKA.match(base):
            librdkafka = path
        elif (
            binding is None
            and any(b in path for b in _RDKAFKA_BINDINGS)
            and (".so" in base or base.endswith(".node"))
        ):
            binding = path
        elif aiokafka is None and "/aiokafka/" in path and ".so" in base:
            aiokafka = path
        if base == "libjvm.so":
            jvm = True
        elif base.startswith("libpython3") or "/lib-dynload/" in path:
            python = True
        m = _SITE.match(path)
        if m and m.group(1) not in sites:
            sites.append(m.group(1))
    return MapsEvidence(ranges, librdkafka, binding, aiokafka, jvm, python or bool(sites),
                        tuple(sites))  # fmt: skip


# --- Java ------------------------------------------------------------------------------------

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


def java_classpath(args: Sequence[str]) -> tuple[list[str], str | None]:
    """Classpath entries and the ``-jar`` jar of a java command line (options after the main
    class or jar belong to the program and are ignored)."""
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
            return classpath, args[i + 1] if i + 1 < len(args) else None
        elif a in ("-m", "--module") or a.startswith("--module="):
            break  # the main module; the program's arguments follow
        elif a in _JAVA_OPTS_WITH_VALUE:
            i += 2
        elif a.startswith("-"):
            i += 1
        else:
            break
    return classpath, None


def properties_version(text: str) -> str | None:
    """``version=`` of a Java properties file."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "version" and value.strip():
            return value.strip()
    return None


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


# --- Node and Python packages ----------------------------------------------------------------

_NODE_OPTS_WITH_VALUE = {"-r", "--require", "--import", "--loader", "--experimental-loader",
                         "-C", "--conditions", "--title", "--env-file", "--input-type"}  # fmt: skip
_SYSTEM_SITE = re.compile(r"^\s*include-system-site-packages\s*=\s*true\s*$", re.I | re.M)
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


# --- Rust ------------------------------------------------------------------------------------

_RUST_KAFKA = re.compile(rb"(?<![\w.-])kafka-(\d+\.\d+\.\d+[\w.+-]*?)/src/")
_RUST_RDKAFKA = re.compile(rb"(?<![\w.-])rdkafka-(\d+\.\d+\.\d+[\w.+-]*?)/src/")
_RUST_RDKAFKA_SYS = re.compile(rb"(?<![\w.-])rdkafka-sys-\d+\.\d+\.\d+\+(\d+\.\d+\.\d+)/")


def from_rust_paths(data: bytes) -> ClientLibrary | None:
    """The Kafka crate whose source paths a Rust binary's read-only data holds."""
    m = _RUST_KAFKA.search(data)
    if m:
        return ClientLibrary("kafka-rust", m.group(1).decode("latin-1"), "rodata")
    if _RUST_RDKAFKA.search(data):
        sys_version = _RUST_RDKAFKA_SYS.search(data)
        version = sys_version.group(1).decode("latin-1") if sys_version else None
        return ClientLibrary("librdkafka", version, "rodata")
    return None


def read_rodata(elf: ElfFile) -> bytes:
    """The read-only data sections, at most MAX_RODATA bytes in all."""
    chunks: list[bytes] = []
    left = MAX_RODATA
    for sec in elf.sections:
        if sec.name.startswith(".rodata") and left > 0:
            chunks.append(elf.read(sec.offset, min(sec.size, left)))
            left -= len(chunks[-1])
    return b"\0".join(chunks)


_NODE_NAMES = ("node", "nodejs")


def runtime_of(info: ProcInfo, maps: MapsEvidence) -> str:
    """``java``, ``node``, ``python`` or ``""``: the runtime a process runs its code in."""
    names = (os.path.basename(info.exe or ""), info.comm,
             os.path.basename(info.cmdline[0]) if info.cmdline else "")  # fmt: skip
    if maps.jvm or "java" in names:
        return "java"
    if any(n in _NODE_NAMES for n in names):
        return "node"
    if maps.python or any(re.fullmatch(r"python[\d.]*", n) for n in names):
        return "python"
    return ""


# --- the identifier --------------------------------------------------------------------------


class LibraryIdentifier:
    """Identify the Kafka client library of processes under ``proc_root`` (a fixture tree in
    tests); results are cached per (pid, start time), at most ``max_cache`` of them."""

    max_cache = MAX_CACHE

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = str(proc_root)
        self._cache: dict[tuple[int, int], ClientLibrary] = {}
        self.identified = 0  # processes actually examined, for tests

    def identify(self, info: ProcInfo) -> ClientLibrary:
        """Cached by (pid, process start time from /proc/<pid>/stat field 22), so a reused pid
        is identified again; bounded cache; never raises (OSError/parse errors -> UNKNOWN)."""
        try:
            start = parse_start_time(self._read_text(info.pid, "stat", 4096))
        except OSError:
            return UNKNOWN
        if start is None:
            return UNKNOWN
        key = (info.pid, start)
        found = self._cache.get(key)
        if found is not None:
            return found
        self.identified += 1
        try:
            found = self._identify(info)
        except Exception:  # a malformed file of one process must not stop the agent's scan
            found = UNKNOWN
        while len(self._cache) >= self.max_cache:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = found
        return found

    def forget(self, pid: int) -> None:
        """Drop the cached results of a pid (the process ended)."""
        for key in [k for k in self._cache if k[0] == pid]:
            del self._cache[key]

    # Paths -----------------------------------------------------------------------------------

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

    # Evidence --------------------------------------------------------------------------------

    def _identify(self, info: ProcInfo) -> ClientLibrary:
        pid = info.pid
        try:
            maps = from_maps(self._read_text(pid, "maps", MAX_MAPS))
        except OSError:
            maps = MapsEvidence({})
        if maps.librdkafka or maps.rdkafka_binding:
            return ClientLibrary("librdkafka", self._rdkafka_version(pid, maps), "maps")
        if maps.aiokafka:
            site = maps.aiokafka.split("/aiokafka/", 1)[0]
            version = dist_info_version(self._listdir(pid, site), "aiokafka")
            return ClientLibrary("aiokafka", version, "maps")
        runtime = runtime_of(info, maps)
        found = self._executable(pid, scan_rodata=not runtime)
        if found is not None:
            return found
        if runtime == "java":
            return self._java(info)
        if runtime == "node":
            return self._node(info) or UNKNOWN
        if runtime == "python":
            return self._python(info, maps) or UNKNOWN
        return UNKNOWN

    def _rdkafka_version(self, pid: int, maps: MapsEvidence) -> str | None:
        for path in (maps.librdkafka, maps.rdkafka_binding):
            if path is None:
                continue
            f = self._open_mapped(pid, path, maps.ranges)
            if f is None:
                continue
            with f:
                try:
                    version = rdkafka_version_of(ElfFile(f))
                except (ValueError, struct.error):
                    version = None
            if version:
                return version
        for path in (maps.rdkafka_binding, maps.librdkafka):
            version = self._binding_version(pid, path) if path else None
            if version:
                return version
        return None

    def _binding_version(self, pid: int, path: str) -> str | None:
        """The version of the binding package a librdkafka file belongs to."""
        if "/confluent_kafka" in path:
            site = path.split("/confluent_kafka", 1)[0]
            return dist_info_version(self._listdir(pid, site), "confluent_kafka")
        m = re.search(r"^(.*/node_modules/(?:@[^/]+/)?[^/]+)/", path)
        if m:
            text = self._read_small(pid, m.group(1) + "/package.json")
            return package_json_version(text) if text else None
        return None

    def _open_jars(self, pid: int) -> list[str]:
        fd_dir = self._proc(pid, "fd")
        try:
            names = os.listdir(fd_dir)[:MAX_FDS]
        except OSError:
            return []
        jars = []
        for name in names:
            try:
                link = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            if link.endswith(".jar") or link.endswith(".jar (deleted)"):
                jars.append(link.removesuffix(" (deleted)"))
        return jars

    def _java(self, info: ProcInfo) -> ClientLibrary:
        pid = info.pid
        open_jars = self._open_jars(pid)
        version = java_version_from_paths(open_jars)
        if version:
            return ClientLibrary("java", version, "fd")
        classpath, main_jar = java_classpath(info.cmdline)
        version = java_version_from_paths([*classpath, main_jar])
        if version:
            return ClientLibrary("java", version, "cmdline")
        for entry in classpath:
            if entry == "*" or entry.endswith("/*"):
                folder = entry[:-1] or "."
                version = java_version_from_paths(self._listdir(pid, folder))
                if version:
                    return ClientLibrary("java", version, "cmdline")
        jars = [main_jar, *open_jars, *(p for p in classpath if p.endswith(".jar"))]
        budget = MAX_ZIP_BUDGET
        for jar in list(dict.fromkeys(j for j in jars if j))[:MAX_JARS]:
            try:
                with open(self._in_proc(pid, jar), "rb") as f:
                    found = read_zip_directory(f, min(budget, MAX_ZIP_DIRECTORY))
                    if found is None:
                        continue
                    budget -= len(found[0])
                    version = kafka_version_in_jar(f, *found)
            except (OSError, ValueError, struct.error, zlib.error):
                continue
            if version:
                return ClientLibrary("java", version, "jar")
        return ClientLibrary("java", None, "jvm")

    def _node(self, info: ProcInfo) -> ClientLibrary | None:
        pid = info.pid
        try:
            cwd = os.readlink(self._proc(pid, "cwd"))
        except OSError:
            cwd = None
        starts = []
        script = node_script(info.cmdline)
        if script and (script.startswith("/") or cwd):
            starts.append(os.path.dirname(os.path.join(cwd or "/", script)))
        if cwd:
            starts.append(cwd)
        dirs: list[str] = []
        for start in starts:
            dirs += [d for d in parent_dirs(start, MAX_NODE_DIRS) if d not in dirs]
        for folder in dirs[:MAX_NODE_DIRS]:
            modules = folder.rstrip("/") + "/node_modules"
            for package, name in (("kafkajs", "kafkajs"), ("node-rdkafka", "librdkafka")):
                text = self._read_small(pid, f"{modules}/{package}/package.json")
                if text is not None:
                    return ClientLibrary(name, package_json_version(text), "package")
        return None

    def _site_dirs(self, info: ProcInfo, maps: MapsEvidence) -> list[str]:
        """Site-packages directories of a Python process, as the process sees them: those of
        mapped extensions, its virtualenv's (``pyvenv.cfg`` beside ``bin/``), its prefix's."""
        pid = info.pid
        sites = list(maps.site_dirs)
        system = True
        interpreters = [info.cmdline[0] if info.cmdline else "", info.exe or ""]
        for interp in dict.fromkeys(p for p in interpreters if "/" in p):
            prefix = os.path.dirname(os.path.dirname(interp))
            cfg = self._read_small(pid, f"{prefix}/pyvenv.cfg")
            if cfg is not None:
                sites += self._lib_sites(pid, prefix)
                system = bool(_SYSTEM_SITE.search(cfg))
                continue
            if system:
                sites += self._lib_sites(pid, prefix) + self._lib_sites(pid, f"{prefix}/local")
                sites.append(f"{prefix}/lib/python3/dist-packages")
        return list(dict.fromkeys(sites))[:MAX_SITE_DIRS]

    def _lib_sites(self, pid: int, prefix: str) -> list[str]:
        out = []
        for lib in sorted(self._listdir(pid, f"{prefix}/lib")):
            if lib.startswith("python3"):
                out += [f"{prefix}/lib/{lib}/site-packages", f"{prefix}/lib/{lib}/dist-packages"]
        return out

    def _python(self, info: ProcInfo, maps: MapsEvidence) -> ClientLibrary | None:
        listings = [self._listdir(info.pid, site) for site in self._site_dirs(info, maps)]
        for project, name in (("kafka_python", "kafka-python"), ("aiokafka", "aiokafka")):
            for names in listings:
                version = dist_info_version(names, project)
                if version:
                    return ClientLibrary(name, version, "package")
        return None

    def _executable(self, pid: int, scan_rodata: bool) -> ClientLibrary | None:
        """Evidence in the executable: a Go binary's modules (UNKNOWN for a Go binary without
        a Kafka client: nothing else will tell); then, if asked, a Rust binary's source paths
        and a statically linked librdkafka's ``rd_kafka_version``."""
        try:
            with open(self._proc(pid, "exe"), "rb") as f:
                elf = ElfFile(f)
                buildinfo = read_go_buildinfo(elf)
                if buildinfo is not None:
                    found = library_from_go_modules(parse_go_buildinfo(buildinfo))
                    if found is None:
                        return UNKNOWN
                    version = rdkafka_version_of(elf) if found.name == "librdkafka" else None
                    return ClientLibrary(found.name, version, found.source) if version else found
                if not scan_rodata:
                    return None
                found = from_rust_paths(read_rodata(elf))
                if found is None or found.name == "librdkafka":
                    version = rdkafka_version_of(elf)
                    if version:
                        return ClientLibrary("librdkafka", version, "symbols")
                return found
        except (OSError, ValueError, struct.error):
            return None
