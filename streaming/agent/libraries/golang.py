"""Go build information: the module list the Go linker writes into ``.go.buildinfo``, and
the Kafka client among those modules."""

from __future__ import annotations

import re

from streaming.agent.libraries.elf import ElfFile
from streaming.agent.libraries.model import MAX_BUILDINFO, ClientLibrary, clean_version

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
