"""Separately compressed parts make one ordinary gzip member."""

from __future__ import annotations

import gzip
import zlib

import pytest

from streaming.exporter.gzipjoin import Part, gzip_chunks
from streaming.exporter.http import gzip_accepted


def _single_member(body: bytes) -> bytes:
    """Decompress exactly one gzip member; fails if anything follows it."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(body)
    assert d.eof and d.unused_data == b""
    return out


def test_parts_join_into_one_gzip_member() -> None:
    data = [b"# HELP a\n" + b"a 1.0\n" * 10_000, b"", b'b{x="y"} 2.0\n' * 3, bytes(range(256))]
    parts = [Part(d) for d in data]
    body = b"".join(gzip_chunks(parts))
    assert _single_member(body) == b"".join(data)
    assert gzip.decompress(body) == b"".join(data)


def test_a_part_is_compressed_once_and_reused_in_another_body() -> None:
    cached, tail = Part(b"x 1.0\n" * 1000), Part(b"t 1.0\n")
    first = gzip_chunks([cached, tail])
    second = gzip_chunks([cached, Part(b"t 2.0\n")])
    assert first[1] is second[1]  # the same compressed bytes
    assert _single_member(b"".join(second)) == b"x 1.0\n" * 1000 + b"t 2.0\n"
    assert _single_member(b"".join(gzip_chunks([tail, cached]))) == b"t 1.0\n" + cached.data


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("gzip", True),
        ("deflate, gzip;q=1.0, *;q=0.5", True),  # what Prometheus sends
        ("GZIP", True),
        ("br, gzip ; q=0.3", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("identity", False),
        ("x-gzip-like", False),
        ("", False),
    ],
)
def test_gzip_accepted(header: str, expected: bool) -> None:
    assert gzip_accepted(header) is expected
