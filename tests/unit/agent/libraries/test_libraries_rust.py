"""Rust binaries: the Kafka crate named by their source paths."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from library_fakes import FakeProc, make_elf, write

from streaming.agent.libraries import ClientLibrary, LibraryIdentifier
from streaming.agent.libraries.elf import ElfFile
from streaming.agent.libraries.rust import from_rust_paths, read_rodata


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"\0/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/kafka-0.10.0/src/client/"
         b"mod.rs\0", ("kafka-rust", "0.10.0")),
        (b"called unwrap\0kafka-0.9.0/src/producer.rs", ("kafka-rust", "0.9.0")),
        (b"/x/rdkafka-0.36.2/src/producer/base_producer.rs\0"
         b"/x/rdkafka-sys-4.7.0+2.3.0/src/helpers.rs", ("librdkafka", "2.3.0")),
        (b"/x/rdkafka-0.36.2/src/consumer/mod.rs", ("librdkafka", None)),
        (b"/x/my-kafka-0.1.0/src/lib.rs /x/library/std/src/io.rs", None),
        (b"", None),
    ],
)  # fmt: skip
def test_from_rust_paths(data: bytes, want: tuple[str, str | None] | None) -> None:
    got = from_rust_paths(data)
    assert (got.name, got.version) == want if want else got is None


def test_identify_rust_binary(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    rodata = (b"index out of bounds\0/home/ci/.cargo/registry/src/index.crates.io-6f17d22bba15001f"
              b"/kafka-0.10.0/src/client/network.rs\0")  # fmt: skip
    exe = write(fs / "usr/bin/ingest", make_elf([(".text", b"\xc3"), (".rodata", rodata)]))
    assert read_rodata(ElfFile(io.BytesIO(exe.read_bytes()))).startswith(b"index out")
    p = FakeProc(proc, 800, fs)
    p.link("exe", exe)
    got = LibraryIdentifier(str(proc)).identify(p.info(["/usr/bin/ingest"], exe="/usr/bin/ingest"))
    assert got == ClientLibrary("kafka-rust", "0.10.0", "rodata")
