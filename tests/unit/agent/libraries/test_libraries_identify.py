"""The identifier: process start times, runtimes, caching, and robustness."""

from __future__ import annotations

from pathlib import Path

import pytest
from library_fakes import FakeProc, make_elf, shaded_jar, write

from streaming.agent.libraries import UNKNOWN, ClientLibrary, LibraryIdentifier, identify
from streaming.agent.libraries.elf import ElfFile
from streaming.agent.libraries.identify import runtime_of
from streaming.agent.libraries.jars import KAFKA_VERSION_ENTRY
from streaming.agent.libraries.maps import from_maps
from streaming.agent.procs import ProcInfo, parse_start_time


def test_parse_start_time() -> None:
    stat = "4242 (my (odd) proc) S 1 " + " ".join(str(i) for i in range(5, 22)) + " 987654 0 0"
    assert parse_start_time(stat) == 987654
    assert parse_start_time("4242 (x) S 1 2") is None
    assert parse_start_time("") is None


def test_runtime_of() -> None:
    empty = from_maps("")
    assert runtime_of(ProcInfo(1, "java", ("java", "-jar", "x.jar"), "/usr/bin/java", None),
                      empty) == "java"  # fmt: skip
    assert runtime_of(ProcInfo(1, "node", ("node", "x.js"), "/usr/bin/node", None), empty) == (
        "node"
    )
    assert runtime_of(ProcInfo(1, "python3", ("python3",), "/usr/bin/python3.11", None),
                      empty) == "python"  # fmt: skip
    assert runtime_of(ProcInfo(1, "node_exporter", ("node_exporter",), None, None), empty) == ""
    assert runtime_of(ProcInfo(1, "pythonista", ("pythonista",), None, None), empty) == ""


def test_cache_by_pid_and_start_time(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 900, fs)
    info = p.info(["java", "-cp", "/l/kafka-clients-3.9.0.jar", "M"])
    ident = LibraryIdentifier(str(proc))
    assert ident.identify(info).version == "3.9.0"
    assert ident.identify(info).version == "3.9.0"
    assert ident.identified == 1
    # Same pid, same process: still the cached answer.
    info2 = p.info(["java", "-cp", "/l/kafka-clients-4.0.0.jar", "M"])
    assert ident.identify(info2).version == "3.9.0"
    # The pid was reused by a new process: identified again.
    p.stat(2000)
    assert ident.identify(info2).version == "4.0.0"
    assert ident.identified == 2


def test_a_start_time_the_process_table_read_is_used_without_rereading_stat(
    tree: tuple[Path, Path],
) -> None:
    import dataclasses

    proc, fs = tree
    p = FakeProc(proc, 905, fs)
    info = p.info(["java", "-cp", "/l/kafka-clients-3.9.0.jar", "M"])
    (p.dir / "stat").unlink()  # gone: only the given start time can key the cache
    ident = LibraryIdentifier(str(proc))
    assert ident.identify(info) == UNKNOWN
    known = dataclasses.replace(info, start_time=1000)
    assert ident.identify(known).version == "3.9.0"
    # A reused pid comes with another start time from the process table: identified again.
    assert ident.identify(dataclasses.replace(known, start_time=2000)).version == "3.9.0"
    assert ident.identified == 2


def test_the_process_table_reads_the_start_time(tmp_path: Path) -> None:
    from streaming.agent.procs import ProcessTable

    FakeProc(tmp_path, 906, tmp_path).stat(4321)
    (tmp_path / "906" / "comm").write_text("java\n")
    info = ProcessTable(str(tmp_path)).info(906)
    assert info is not None and info.start_time == 4321 and info.ppid == 1


def test_cache_is_bounded(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    ident = LibraryIdentifier(str(proc))
    ident.max_cache = 3
    for pid in range(910, 920):
        p = FakeProc(proc, pid, fs)
        ident.identify(p.info(["java", "M"]))
    assert len(ident._cache) == 3
    assert ident.identified == 10


def test_never_raises(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    proc, fs = tree
    ident = LibraryIdentifier(str(proc))
    # Gone process.
    assert ident.identify(ProcInfo(12345, "x", ("x",), None, None)) == UNKNOWN
    # Unparsable stat.
    p = FakeProc(proc, 950, fs)
    (p.dir / "stat").write_text("garbage")
    assert ident.identify(p.info(["x"])) == UNKNOWN
    # No maps, an executable that is not ELF, one that is truncated.
    for pid, exe in ((951, b"#!/bin/sh\n"), (952, make_elf([(".rodata", b"x" * 100)])[:80])):
        q = FakeProc(proc, pid, fs)
        (q.dir / "maps").unlink()
        q.link("exe", write(fs / f"bin{pid}", exe))
        assert ident.identify(q.info(["tool"])) == UNKNOWN
    # A fat jar whose version file does not inflate.
    jar = bytearray(shaded_jar(fs / "bad.jar").read_bytes())
    at = jar.find(KAFKA_VERSION_ENTRY) + len(KAFKA_VERSION_ENTRY)
    jar[at : at + 8] = b"\xff" * 8
    write(fs / "bad.jar", bytes(jar))
    r = FakeProc(proc, 953, fs)
    got = ident.identify(r.info(["java", "-jar", "/bad.jar"]))
    assert got == ClientLibrary("java", None, "jvm")
    # Anything unexpected inside.
    monkeypatch.setattr(identify, "from_maps", lambda text: 1 / 0)
    s = FakeProc(proc, 954, fs)
    assert ident.identify(s.info(["java", "M"])) == UNKNOWN


def test_identify_is_cheap_for_an_unrelated_process(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large binary with no evidence is not read whole: only headers and a bounded scan."""
    proc, fs = tree
    big = make_elf([(".text", b"\x90" * 64), (".rodata", b"x" * 64)]) + bytes(8 << 20)
    exe = write(fs / "usr/sbin/daemon", big)
    p = FakeProc(proc, 990, fs)
    p.link("exe", exe)
    reads: list[int] = []
    real_read = ElfFile.read

    def counting(self: ElfFile, offset: int, size: int) -> bytes:
        data = real_read(self, offset, size)
        reads.append(len(data))
        return data

    monkeypatch.setattr(ElfFile, "read", counting)
    assert LibraryIdentifier(str(proc)).identify(p.info(["daemon"])) == UNKNOWN
    assert 0 < sum(reads) < 256 << 10
