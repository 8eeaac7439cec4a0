"""Rust: the Kafka crate named by the source paths a binary keeps in its read-only data."""

from __future__ import annotations

import re

from streaming.agent.libraries.elf import ElfFile
from streaming.agent.libraries.model import MAX_RODATA, ClientLibrary

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
