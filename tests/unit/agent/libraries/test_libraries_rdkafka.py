"""librdkafka: the version decoded from ``rd_kafka_version()`` (handcrafted code, the
librdkafka bundled with confluent-kafka, this very process), else its binding's."""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import pytest
from library_fakes import FakeProc, make_elf, write

from streaming.agent.libraries import ClientLibrary, LibraryIdentifier
from streaming.agent.libraries.elf import EM_AARCH64, EM_X86_64, ElfFile
from streaming.agent.libraries.maps import parse_maps
from streaming.agent.libraries.rdkafka import (
    decode_rdkafka_version,
    format_rdkafka_version,
    rdkafka_version_of,
)
from streaming.agent.procs import ProcessTable

# The first bytes of rd_kafka_version() in confluent-kafka 2.16.1's bundled librdkafka 2.16.0:
# x86-64 (manylinux wheel) and arm64 (manylinux_2_28_aarch64 wheel).
X86_RD_KAFKA_VERSION = bytes.fromhex("b8ff001002c3662e0f1f840000000000")
ARM64_RD_KAFKA_VERSION = struct.pack("<4I", 0x52801FE0, 0x72A04200, 0xD65F03C0, 0xA9BF7BFD)


def bundled_librdkafka() -> Path:
    ck = pytest.importorskip("confluent_kafka")
    libs = sorted((Path(ck.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*"))
    if not libs:
        pytest.skip("this confluent-kafka install has no bundled librdkafka")
    return libs[0]


def test_identify_statically_linked_librdkafka(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    exe = make_elf([(".text", X86_RD_KAFKA_VERSION), (".rodata", b"%s: rdkafka_broker.c\0")],
                   symbols={"rd_kafka_new": ".text", "rd_kafka_version": ".text"},
                   full_symtab=True)  # fmt: skip
    p = FakeProc(proc, 320, fs)
    p.link("exe", write(fs / "usr/bin/bridge", exe))
    got = LibraryIdentifier(str(proc)).identify(p.info(["/usr/bin/bridge"]))
    assert got == ClientLibrary("librdkafka", "2.16.0", "symbols")


@pytest.mark.parametrize(
    ("number", "want"),
    [(0x021000FF, "2.16.0"), (0x020002FF, "2.0.2"), (0x010902FF, "1.9.2"),
     (0x020300C9, "2.3.0-RC1"), (0x02030001, "2.3.0-pre1"), (0, None), (-1, None)],
)  # fmt: skip
def test_format_rdkafka_version(number: int, want: str | None) -> None:
    assert format_rdkafka_version(number) == want


def test_decode_rdkafka_version() -> None:
    assert decode_rdkafka_version(X86_RD_KAFKA_VERSION, EM_X86_64) == "2.16.0"
    assert decode_rdkafka_version(b"\xf3\x0f\x1e\xfa" + X86_RD_KAFKA_VERSION, EM_X86_64) == (
        "2.16.0"
    )
    assert decode_rdkafka_version(ARM64_RD_KAFKA_VERSION, EM_AARCH64) == "2.16.0"
    bti = struct.pack("<I", 0xD503245F)
    assert decode_rdkafka_version(bti + ARM64_RD_KAFKA_VERSION, EM_AARCH64) == "2.16.0"
    # Code that is not the expected constant return.
    assert decode_rdkafka_version(b"\x55\x48\x89\xe5" + bytes(12), EM_X86_64) is None
    assert decode_rdkafka_version(bytes(16), EM_AARCH64) is None
    assert decode_rdkafka_version(X86_RD_KAFKA_VERSION, 40) is None  # 32-bit ARM: not decoded


def test_rdkafka_version_of_handcrafted_arm64_library() -> None:
    elf = make_elf([(".text", ARM64_RD_KAFKA_VERSION)], machine=EM_AARCH64,
                   symbols={"rd_kafka_new": ".text", "rd_kafka_version": ".text"})  # fmt: skip
    assert rdkafka_version_of(ElfFile(io.BytesIO(elf))) == "2.16.0"
    no_symbol = make_elf([(".text", X86_RD_KAFKA_VERSION)], symbols={"rd_kafka_new": ".text"})
    assert rdkafka_version_of(ElfFile(io.BytesIO(no_symbol))) is None


def test_rdkafka_version_of_bundled_library() -> None:
    """The librdkafka bundled in the confluent-kafka wheel of this venv: the decoded number
    is the one the library itself reports."""
    import confluent_kafka

    with bundled_librdkafka().open("rb") as f:
        assert rdkafka_version_of(ElfFile(f)) == confluent_kafka.libversion()[0]


def test_identify_this_process() -> None:
    """This test process has confluent-kafka's extension and its librdkafka loaded."""
    import confluent_kafka

    bundled_librdkafka()
    info = ProcessTable("/proc").info(os.getpid())
    assert info is not None
    got = LibraryIdentifier("/proc").identify(info)
    assert got == ClientLibrary("librdkafka", confluent_kafka.libversion()[0], "maps")


def _librdkafka_process(proc: Path, fs: Path, pid: int) -> tuple[FakeProc, str]:
    """A Python process in a container with confluent-kafka's files under /app."""
    site = "/app/.venv/lib/python3.11/site-packages"
    write(fs / site[1:] / "confluent_kafka-2.16.1.dist-info" / "METADATA", "Version: 2.16.1\n")
    write(fs / site[1:] / "confluent_kafka" / "cimpl.cpython-311-x86_64-linux-gnu.so", b"\0")
    lib = f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1"
    p = FakeProc(proc, pid, fs)
    p.maps(["/usr/local/bin/python3.11",
            f"{site}/confluent_kafka/cimpl.cpython-311-x86_64-linux-gnu.so", lib])  # fmt: skip
    return p, lib


def test_identify_librdkafka_in_a_container(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p, lib = _librdkafka_process(proc, fs, 400)
    (fs / lib[1:]).parent.mkdir(parents=True)
    (fs / lib[1:]).symlink_to(bundled_librdkafka())
    got = LibraryIdentifier(str(proc)).identify(p.info(["python3", "/app/worker.py"]))
    import confluent_kafka

    assert got == ClientLibrary("librdkafka", confluent_kafka.libversion()[0], "maps")


def test_identify_librdkafka_through_map_files(tree: tuple[Path, Path]) -> None:
    """The library was replaced on disk since it was loaded: map_files/ still has it."""
    proc, fs = tree
    p, lib = _librdkafka_process(proc, fs, 401)
    ranges = parse_maps((p.dir / "maps").read_text())
    (p.dir / "map_files" / ranges[lib]).symlink_to(bundled_librdkafka())
    got = LibraryIdentifier(str(proc)).identify(p.info(["python3", "/app/worker.py"]))
    import confluent_kafka

    assert got.version == confluent_kafka.libversion()[0]


def test_identify_librdkafka_falls_back_to_the_binding_version(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p, _ = _librdkafka_process(proc, fs, 402)  # neither file readable as ELF
    got = LibraryIdentifier(str(proc)).identify(p.info(["python3", "/app/worker.py"]))
    assert got == ClientLibrary("librdkafka", "2.16.1", "maps")


def test_identify_node_rdkafka(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    pkg = "/srv/api/node_modules/node-rdkafka"
    write(fs / pkg[1:] / "package.json", json.dumps({"name": "node-rdkafka", "version": "3.2.1"}))
    p = FakeProc(proc, 410, fs)
    p.maps(["/usr/bin/node", f"{pkg}/build/Release/node-librdkafka.node"])
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "/srv/api/index.js"]))
    assert got == ClientLibrary("librdkafka", "3.2.1", "maps")
