"""One gzip stream built from separately compressed parts, so an unchanged part of a response
is compressed only once.

Each part is compressed on its own into raw deflate blocks ending on a byte boundary (a sync
flush, no final block); such pieces concatenate into a valid deflate stream. One gzip header,
an empty final block and the CRC-32 and length of the whole body make it a single ordinary
gzip member (RFC 1952), readable by any client.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

LEVEL = 1  # fastest: scrapes are frequent and the text compresses ~25x even so
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff"  # deflate, no name, no mtime, fastest
_FINAL_BLOCK = b"\x03\x00"  # an empty final block with fixed Huffman codes


class Part:
    """A piece of a response body; compressed and checksummed once, when first needed."""

    __slots__ = ("data", "_deflated", "_crc")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._deflated: bytes | None = None
        self._crc: tuple[int, int] | None = None  # (CRC of what precedes, CRC through this part)

    def deflated(self) -> bytes:
        if self._deflated is None:
            c = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
            self._deflated = c.compress(self.data) + c.flush(zlib.Z_SYNC_FLUSH)
        return self._deflated

    def crc(self, start: int) -> int:
        """CRC-32 of everything before this part (``start``) followed by this part."""
        if self._crc is None or self._crc[0] != start:
            self._crc = (start, zlib.crc32(self.data, start))
        return self._crc[1]


def gzip_chunks(parts: Iterable[Part]) -> list[bytes]:
    """The gzip encoding of the parts' data, joined in order, as chunks to send one by one."""
    chunks = [_HEADER]
    crc = size = 0
    for part in parts:
        chunks.append(part.deflated())
        crc = part.crc(crc)
        size += len(part.data)
    chunks.append(_FINAL_BLOCK + struct.pack("<II", crc, size & 0xFFFFFFFF))
    return chunks
