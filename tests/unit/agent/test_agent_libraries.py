"""Kafka client library identification: the pure parsers, fixture /proc trees, and real
artifacts (the librdkafka bundled with confluent-kafka, this very process, Go binaries built
here, the kafka-clients jars of the local stack)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.agent import libraries
from streaming.agent.libraries import (
    EM_AARCH64,
    EM_X86_64,
    UNKNOWN,
    ClientLibrary,
    ElfFile,
    LibraryIdentifier,
    clean_version,
    decode_rdkafka_version,
    dist_info_version,
    format_rdkafka_version,
    from_maps,
    from_rust_paths,
    jar_kafka_version,
    java_classpath,
    java_version_from_paths,
    library_from_go_modules,
    node_script,
    package_json_version,
    parse_go_buildinfo,
    parse_go_modinfo,
    parse_maps,
    parse_start_time,
    properties_version,
    rdkafka_version_of,
    read_go_buildinfo,
    read_rodata,
    runtime_of,
)
from streaming.agent.procs import ProcessTable, ProcInfo
from streaming.schema.clients import CLIENT_LIBRARIES, UNKNOWN_LIBRARY

REPO = Path(__file__).resolve().parents[3]

# The first bytes of rd_kafka_version() in confluent-kafka 2.16.1's bundled librdkafka 2.16.0:
# x86-64 (manylinux wheel) and arm64 (manylinux_2_28_aarch64 wheel).
X86_RD_KAFKA_VERSION = bytes.fromhex("b8ff001002c3662e0f1f840000000000")
ARM64_RD_KAFKA_VERSION = struct.pack("<4I", 0x52801FE0, 0x72A04200, 0xD65F03C0, 0xA9BF7BFD)


# --- fixtures: ELF files, Go build information, /proc trees ----------------------------------


def make_elf(
    sections: list[tuple[str, bytes]],
    machine: int = EM_X86_64,
    symbols: dict[str, str] | None = None,
    base: int = 0x400000,
    full_symtab: bool = False,
) -> bytes:
    """A minimal little-endian ELF64 file: the given PROGBITS sections, one PT_LOAD segment
    mapping the whole file at ``base``, and, with ``symbols`` (name -> section holding the
    code), a symbol table pointing at the start of those sections: the dynamic one, or with
    ``full_symtab`` the full one of an unstripped static binary."""
    symbols = symbols or {}
    names = [n for n, _ in sections]
    sym_name, str_name, sym_type = (".symtab", ".strtab", 2) if full_symtab else (
        ".dynsym", ".dynstr", 11)  # fmt: skip
    strtab = b"\0" + b"".join(s.encode() + b"\0" for s in symbols)
    all_sections: list[tuple[str, int, bytes, int]] = [(n, 1, d, 0) for n, d in sections]
    if symbols:
        all_sections.append((str_name, 3, strtab, 0))
        all_sections.append((sym_name, sym_type, b"", len(all_sections)))  # links to strtab
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in all_sections) + b".shstrtab\0"
    all_sections.append((".shstrtab", 3, shstrtab, 0))

    offsets: list[int] = []
    pos = 0x100
    for _, _, data, _ in all_sections:
        offsets.append(pos)
        pos += (len(data) + 24 * (len(symbols) + 1) + 15) // 16 * 16
    if symbols:
        table = bytes(24)
        name_at = 1
        for sym, section in symbols.items():
            index = names.index(section)
            value = base + offsets[index]
            table += struct.pack("<IBBHQQ", name_at, 0x12, 0, index + 1, value, 16)
            name_at += len(sym) + 1
        i = next(i for i, s in enumerate(all_sections) if s[0] == sym_name)
        all_sections[i] = (sym_name, sym_type, table, all_sections[i][3])
    shoff = pos
    out = bytearray(shoff + 64 * (len(all_sections) + 1))
    out[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    struct.pack_into("<HHIQQQIHHHHHH", out, 16, 3, machine, 1, 0, 64, shoff, 0, 64, 56, 1, 64,
                     len(all_sections) + 1, len(all_sections))  # fmt: skip
    struct.pack_into("<IIQQQQQQ", out, 64, 1, 5, 0, base, base, shoff, shoff, 0x1000)
    name_at = 1
    for k, (name, stype, data, link) in enumerate(all_sections):
        out[offsets[k] : offsets[k] + len(data)] = data
        struct.pack_into("<IIQQQQIIQQ", out, shoff + 64 * (k + 1), name_at, stype, 2,
                         base + offsets[k], offsets[k], len(data), link, 0, 16,
                         24 if stype in (2, 11) else 0)  # fmt: skip
        name_at += len(name) + 1
    return bytes(out)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def go_buildinfo(modinfo: str, go_version: str = "go1.26.8", flags: int = 0x2) -> bytes:
    """A .go.buildinfo section as the Go 1.18+ linker writes it."""
    framed = b"0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6"
    mod = framed + modinfo.encode() + framed[::-1]
    head = libraries.GO_BUILDINFO_MAGIC + bytes([8, flags]) + bytes(16)
    return head + _uvarint(len(go_version)) + go_version.encode() + _uvarint(len(mod)) + mod


SARAMA_MODINFO = (
    "path\texample.com/orders\n"
    "mod\texample.com/orders\t(devel)\t\n"
    "dep\tgithub.com/IBM/sarama\tv1.43.2\th1:abc=\n"
    "dep\tgithub.com/klauspost/compress\tv1.17.9\th1:def=\n"
    "build\t-compiler=gc\n"
)


class FakeProc:
    """One process of a fixture /proc tree under ``proc``; its root is ``root``."""

    def __init__(self, proc: Path, pid: int, root: Path | str) -> None:
        self.dir = proc / str(pid)
        (self.dir / "fd").mkdir(parents=True)
        (self.dir / "map_files").mkdir()
        self.pid = pid
        os.symlink(root, self.dir / "root")
        self.stat(1000)
        self.maps([])

    def stat(self, start: int) -> None:
        rest = ["S", "1"] + ["0"] * 17 + [str(start)] + ["0"] * 30
        (self.dir / "stat").write_text(f"{self.pid} (a (b) c) " + " ".join(rest) + "\n")

    def maps(self, paths: list[str]) -> None:
        lines = ["55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0          [heap]"]
        for i, path in enumerate(paths):
            lo = 0x7F0000000000 + i * 0x10000
            lines.append(f"{lo:x}-{lo + 0x8000:x} r-xp 00000000 08:01 {100 + i}   {path}")
        (self.dir / "maps").write_text("\n".join(lines) + "\n")

    def fds(self, targets: list[str]) -> None:
        for i, target in enumerate(targets, 3):
            os.symlink(target, self.dir / "fd" / str(i))

    def link(self, name: str, target: str | Path) -> None:
        os.symlink(target, self.dir / name)

    def info(self, cmdline: list[str], exe: str | None = None, comm: str = "") -> ProcInfo:
        comm = comm or os.path.basename(cmdline[0])[:15]
        return ProcInfo(self.pid, comm, tuple(cmdline), exe, None)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(proc root, a container's root filesystem)."""
    proc, fs = tmp_path / "proc", tmp_path / "fs"
    proc.mkdir()
    fs.mkdir()
    yield proc, fs


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def shaded_jar(path: Path, version: str = "3.7.1", prefix: bytes = b"") -> Path:
    """An application jar with kafka-clients' classes and version file merged in."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nMain-Class: com.acme.App\n")
        z.writestr("com/acme/App.class", b"\xca\xfe\xba\xbe" + bytes(200))
        z.writestr("org/apache/kafka/clients/producer/KafkaProducer.class", bytes(300))
        z.writestr("kafka/kafka-version.properties", f"commitId=abc\nversion={version}\n")
    return write(path, prefix + buf.getvalue())


def bundled_librdkafka() -> Path:
    ck = pytest.importorskip("confluent_kafka")
    libs = sorted((Path(ck.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*"))
    if not libs:
        pytest.skip("this confluent-kafka install has no bundled librdkafka")
    return libs[0]


# --- small parsers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "want"),
    [("v1.43.2", "1.43.2"), ("2.16.1", "2.16.1"), ("(devel)", None), ("", None), (None, None),
     ("v0.0.0-20250101-abcdef", "0.0.0-20250101-abcdef"), ("vendor", None)],
)  # fmt: skip
def test_clean_version(raw: str | None, want: str | None) -> None:
    assert clean_version(raw) == want


def test_parse_start_time() -> None:
    stat = "4242 (my (odd) proc) S 1 " + " ".join(str(i) for i in range(5, 22)) + " 987654 0 0"
    assert parse_start_time(stat) == 987654
    assert parse_start_time("4242 (x) S 1 2") is None
    assert parse_start_time("") is None


def test_interface() -> None:
    assert ClientLibrary(UNKNOWN_LIBRARY, None) == UNKNOWN
    assert UNKNOWN.source == ""
    with pytest.raises(AttributeError):
        UNKNOWN.name = "java"  # type: ignore[misc]


# --- Go --------------------------------------------------------------------------------------


def test_parse_go_buildinfo_handcrafted() -> None:
    mods = parse_go_buildinfo(go_buildinfo(SARAMA_MODINFO))
    assert mods == {
        "example.com/orders": "(devel)",
        "github.com/IBM/sarama": "v1.43.2",
        "github.com/klauspost/compress": "v1.17.9",
    }
    assert library_from_go_modules(mods) == ClientLibrary("sarama", "1.43.2", "buildinfo")


def test_parse_go_modinfo_replacements() -> None:
    text = (
        "mod\texample.com/app\t(devel)\t\n"
        "dep\tgithub.com/Shopify/sarama\tv1.38.1\th1:x=\n"
        "=>\tgithub.com/IBM/sarama\tv1.40.0\th1:y=\n"
        "dep\tgithub.com/twmb/franz-go\tv1.17.0\th1:z=\n"
        "=>\t../franz-go\t\t\n"
    )
    mods = parse_go_modinfo(text)
    assert mods["github.com/Shopify/sarama"] == "v1.40.0"  # the replacement's version
    assert mods["github.com/twmb/franz-go"] == "v1.17.0"  # a local directory has none


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff Go buildinf:",
        go_buildinfo(SARAMA_MODINFO, flags=0x0),  # Go < 1.18: pointers, not strings
        go_buildinfo(SARAMA_MODINFO)[:40],  # truncated
        b"\xff Go buildinX" + go_buildinfo(SARAMA_MODINFO)[14:],
    ],
)
def test_parse_go_buildinfo_rejects(data: bytes) -> None:
    assert library_from_go_modules(parse_go_buildinfo(data)) is None


@pytest.mark.parametrize(
    ("mods", "want"),
    [
        ({"github.com/IBM/sarama": "v1.45.0"}, ("sarama", "1.45.0")),
        ({"github.com/Shopify/sarama": "v1.38.1"}, ("sarama", "1.38.1")),
        ({"github.com/twmb/franz-go": "v1.18.0", "github.com/twmb/franz-go/pkg/kmsg": "v1.9.0"},
         ("franz-go", "1.18.0")),
        ({"github.com/segmentio/kafka-go": "v0.4.47"}, ("kafka-go", "0.4.47")),
        ({"github.com/confluentinc/confluent-kafka-go/v2": "v2.5.0"}, ("librdkafka", "2.5.0")),
        ({"github.com/confluentinc/confluent-kafka-go": "v1.9.2"}, ("librdkafka", "1.9.2")),
        # Several clients linked: the fixed precedence decides.
        ({"github.com/segmentio/kafka-go": "v0.4.47", "github.com/IBM/sarama": "v1.45.0"},
         ("sarama", "1.45.0")),
        ({"github.com/twmb/franz-go/pkg/kmsg": "v1.9.0"}, None),
        ({"github.com/IBM/saramax": "v1.0.0"}, None),
        ({}, None),
    ],
)  # fmt: skip
def test_library_from_go_modules(mods: dict[str, str], want: tuple[str, str] | None) -> None:
    got = library_from_go_modules(mods)
    assert (got.name, got.version) == want if want else got is None
    assert got is None or got.name in CLIENT_LIBRARIES


def test_buildinfo_found_through_section_headers_and_without() -> None:
    blob = go_buildinfo(SARAMA_MODINFO)
    elf = make_elf([(".text", b"\x90" * 64), (".go.buildinfo", blob)])
    assert read_go_buildinfo(ElfFile(io.BytesIO(elf))) == blob
    # Section headers stripped: found at the start of a loadable segment.
    stripped = bytearray(elf)
    struct.pack_into("<Q", stripped, 40, 0)  # e_shoff
    struct.pack_into("<H", stripped, 60, 0)  # e_shnum
    assert parse_go_buildinfo(read_go_buildinfo(ElfFile(io.BytesIO(bytes(stripped)))) or b"")
    assert read_go_buildinfo(ElfFile(io.BytesIO(make_elf([(".text", b"\x90")])))) is None


GO_PROGRAMS = {
    "sarama": ("github.com/IBM/sarama", "fmt.Println(sarama.NewConfig().ClientID)"),
    "franz": ("github.com/twmb/franz-go/pkg/kgo", 'fmt.Println(kgo.SeedBrokers("x") != nil)'),
}


@pytest.fixture(scope="module")
def go_binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny real Go programs importing sarama and franz-go, built once for this module with
    the module versions (and checksums) of the repo's Go scenario clients."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("the 'go' toolchain is not on PATH: cannot build real Go binaries")
    src = tmp_path_factory.mktemp("goprog")
    clients = REPO / "deploy" / "local" / "go-clients"
    if (clients / "go.mod").exists():
        shutil.copy(clients / "go.mod", src / "go.mod")
        shutil.copy(clients / "go.sum", src / "go.sum")
    else:
        (src / "go.mod").write_text(
            "module connmon/libtest\n\ngo 1.22\n\nrequire (\n"
            "\tgithub.com/IBM/sarama v1.61.1\n\tgithub.com/twmb/franz-go v1.22.2\n)\n"
        )
    for name, (module, body) in GO_PROGRAMS.items():
        write(src / "cmd" / name / "main.go",
              f'package main\n\nimport (\n\t"fmt"\n\n\t"{module}"\n)\n\n'
              f"func main() {{ {body} }}\n")  # fmt: skip
    env = dict(os.environ, GOFLAGS="-mod=mod -buildvcs=false")
    try:
        done = subprocess.run([go, "build", "-o", str(src / "bin") + "/", "./cmd/..."], cwd=src,
                              env=env, capture_output=True, text=True, timeout=1200)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip("go build of the test programs took over 20 minutes")
    if done.returncode != 0:
        pytest.skip(f"go build failed (module proxy unreachable?): {done.stderr[-800:]}")
    return {name: src / "bin" / name for name in GO_PROGRAMS}


def go_version_m(binary: Path) -> dict[str, str]:
    """The modules ``go version -m`` reports, for comparison."""
    out = subprocess.run(["go", "version", "-m", str(binary)], capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    return parse_go_modinfo("\n".join(line.strip() for line in out.splitlines()[1:]))


@pytest.mark.parametrize(("program", "library"), [("sarama", "sarama"), ("franz", "franz-go")])
def test_real_go_binaries(go_binaries: dict[str, Path], program: str, library: str) -> None:
    binary = go_binaries[program]
    with binary.open("rb") as f:
        mods = parse_go_buildinfo(read_go_buildinfo(ElfFile(f)) or b"")
    assert mods == go_version_m(binary)
    got = library_from_go_modules(mods)
    module = GO_PROGRAMS[program][0].removesuffix("/pkg/kgo")
    assert got == ClientLibrary(library, clean_version(mods[module]), "buildinfo")


def test_identify_real_go_binary(go_binaries: dict[str, Path], tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 300, fs)
    p.link("exe", go_binaries["sarama"])
    p.maps([str(go_binaries["sarama"]), "/usr/lib/x86_64-linux-gnu/libc.so.6"])
    got = LibraryIdentifier(str(proc)).identify(p.info(["/app/orders"], exe="/app/orders"))
    assert got.name == "sarama"
    assert got.source == "buildinfo"
    assert re.fullmatch(r"\d+\.\d+\.\d+", got.version or "")


def test_go_binary_without_kafka_is_unknown(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 301, fs)
    exe = write(fs / "bin" / "node", make_elf([(".go.buildinfo", go_buildinfo(
        "mod\texample.com/tool\t(devel)\t\n"))]))  # fmt: skip
    p.link("exe", exe)
    # Named like a Node runtime, but the build information settles it.
    assert LibraryIdentifier(str(proc)).identify(p.info(["node"], exe=str(exe))) == UNKNOWN


def test_identify_confluent_kafka_go(tree: tuple[Path, Path]) -> None:
    """confluent-kafka-go links librdkafka in statically: its own number when the symbol
    table is there, else the binding's."""
    proc, fs = tree
    blob = go_buildinfo("dep\tgithub.com/confluentinc/confluent-kafka-go/v2\tv2.5.0\th1:x=\n")
    code = b"\xb8\xff\x03\x05\x02\xc3"  # mov eax, 0x020503ff; ret
    with_symbols = make_elf([(".text", code), (".go.buildinfo", blob)],
                            symbols={"rd_kafka_version": ".text"}, full_symtab=True)  # fmt: skip
    stripped = make_elf([(".text", code), (".go.buildinfo", blob)])
    ident = LibraryIdentifier(str(proc))
    for pid, exe, version in ((310, with_symbols, "2.5.3"), (311, stripped, "2.5.0")):
        p = FakeProc(proc, pid, fs)
        p.link("exe", write(fs / f"bin/app{pid}", exe))
        got = ident.identify(p.info([f"/bin/app{pid}"]))
        assert got == ClientLibrary("librdkafka", version, "buildinfo")


def test_identify_statically_linked_librdkafka(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    exe = make_elf([(".text", X86_RD_KAFKA_VERSION), (".rodata", b"%s: rdkafka_broker.c\0")],
                   symbols={"rd_kafka_new": ".text", "rd_kafka_version": ".text"},
                   full_symtab=True)  # fmt: skip
    p = FakeProc(proc, 320, fs)
    p.link("exe", write(fs / "usr/bin/bridge", exe))
    got = LibraryIdentifier(str(proc)).identify(p.info(["/usr/bin/bridge"]))
    assert got == ClientLibrary("librdkafka", "2.16.0", "symbols")


# --- librdkafka ------------------------------------------------------------------------------


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


def test_from_maps() -> None:
    site = "/srv/app/.venv/lib/python3.11/site-packages"
    text = "\n".join([
        "5581c6e00000-5581c6e01000 r--p 00000000 08:01 11 /usr/bin/python3.11",
        "7f1a00000000-7f1a00010000 r--p 00000000 08:01 12 /usr/lib/python3.11/lib-dynload/_json.so",
        f"7f1a00100000-7f1a00110000 r-xp 00000000 08:01 13 {site}/confluent_kafka/cimpl.so",
        f"7f1a00200000-7f1a00210000 r-xp 00000000 08:01 14 "
        f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1 (deleted)",
        f"7f1a00210000-7f1a00220000 r--p 00010000 08:01 14 "
        f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1 (deleted)",
        "7f1a00300000-7f1a00301000 rw-p 00000000 00:00 0 ",
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]",
    ])  # fmt: skip
    ranges = parse_maps(text)
    assert ranges[f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1"] == (
        "7f1a00200000-7f1a00210000"
    )
    ev = from_maps(text)
    assert ev.librdkafka == f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1"
    assert ev.rdkafka_binding == f"{site}/confluent_kafka/cimpl.so"
    assert ev.python and not ev.jvm
    assert ev.site_dirs == (site,)

    pkg = "/app/node_modules/node-rdkafka"
    node = from_maps(
        f"7f00-7f10 r-xp 0 08:01 1 {pkg}/build/Release/node-librdkafka.node\n"
        f"7f10-7f20 r-xp 0 08:01 2 {pkg}/build/deps/librdkafka++.so.1\n"
    )
    assert node.librdkafka is None  # the C++ wrapper library is not librdkafka itself
    assert node.rdkafka_binding and node.rdkafka_binding.endswith("node-librdkafka.node")

    assert from_maps("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/librdkafka.so.1\n"
                     ).librdkafka == "/usr/lib/x86_64-linux-gnu/librdkafka.so.1"  # fmt: skip
    aio = from_maps(f"7f00-7f10 r-xp 0 08:01 1 {site}/aiokafka/record/_crecords/cutil.cpython-311"
                    "-x86_64-linux-gnu.so\n")  # fmt: skip
    assert aio.aiokafka and aio.librdkafka is None
    jvm = from_maps("7f00-7f10 r-xp 0 08:01 1 /usr/lib/jvm/java-17/lib/server/libjvm.so\n")
    assert jvm.jvm and not jvm.python


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


# --- Java ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "want"),
    [
        (["/opt/kafka/libs/kafka-clients-4.3.1.jar"], "4.3.1"),
        (["kafka-clients-3.9.0.jar"], "3.9.0"),
        (["/usr/share/java/kafka/kafka-clients-7.6.0-ccs.jar"], "7.6.0-ccs"),
        (["/x/kafka-clients-3.9.0-sources.jar", "/x/kafka-clients-3.9.0-test.jar"], None),
        (["/x/kafka-streams-3.9.0.jar", None, "/x/kafka_2.13-3.9.0.jar"], None),
        (["/x/my-kafka-clients-helper.jar", "/x/kafka-clients.jar"], None),
    ],
)
def test_java_version_from_paths(paths: list[str | None], want: str | None) -> None:
    assert java_version_from_paths(paths) == want


@pytest.mark.parametrize(
    ("args", "classpath", "jar"),
    [
        (["java", "-Xmx1g", "-cp", "a.jar:lib/*:/x/b.jar", "com.acme.Main", "-cp", "no.jar"],
         ["a.jar", "lib/*", "/x/b.jar"], None),
        (["java", "--class-path=/c/d.jar", "-jar", "/app/app.jar", "--spring.profiles=x"],
         ["/c/d.jar"], "/app/app.jar"),
        (["java", "--add-opens", "java.base/java.lang=ALL-UNNAMED", "-classpath", "e.jar", "M"],
         ["e.jar"], None),
        (["java", "-cp", "a.jar", "-m", "app/com.acme.App", "-cp", "b.jar"], ["a.jar"], None),
        (["java", "-jar"], [], None),
        (["java"], [], None),
    ],
)  # fmt: skip
def test_java_classpath(args: list[str], classpath: list[str], jar: str | None) -> None:
    assert java_classpath(args) == (classpath, jar)


def test_properties_version() -> None:
    assert properties_version("commitId=26b251a451ce941d\nversion=4.3.1") == "4.3.1"
    assert properties_version("# version=1\nversions=2\n") is None


def test_jar_kafka_version_shaded(tmp_path: Path) -> None:
    with shaded_jar(tmp_path / "app-all.jar").open("rb") as f:
        assert jar_kafka_version(f) == "3.7.1"


def test_jar_kafka_version_with_prepended_launch_script(tmp_path: Path) -> None:
    jar = shaded_jar(tmp_path / "app", "3.6.2", prefix=b"#!/bin/sh\nexec java -jar $0\n" * 40)
    with jar.open("rb") as f:
        assert jar_kafka_version(f) == "3.6.2"


def test_jar_kafka_version_nested_spring_boot_jar(tmp_path: Path) -> None:
    path = tmp_path / "orders.jar"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("BOOT-INF/classes/com/acme/Orders.class", bytes(100))
        z.writestr("BOOT-INF/lib/kafka-streams-3.7.0.jar", b"PK")
        z.writestr("BOOT-INF/lib/kafka-clients-3.7.0.jar", b"PK")
    with path.open("rb") as f:
        assert jar_kafka_version(f) == "3.7.0"


def test_jar_kafka_version_zip64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # zipfile writes Zip64 end records above this many entries (65535 for real).
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    with shaded_jar(tmp_path / "big.jar", "3.8.0").open("rb") as f:
        data = f.read()
        assert b"PK\x06\x06" in data
        f.seek(0)
        assert jar_kafka_version(f) == "3.8.0"


def test_jar_kafka_version_rejects(tmp_path: Path) -> None:
    assert jar_kafka_version(io.BytesIO(b"not a zip" * 100)) is None
    assert jar_kafka_version(io.BytesIO(b"")) is None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("com/acme/App.class", bytes(10))
    assert jar_kafka_version(buf) is None
    with shaded_jar(tmp_path / "x.jar").open("rb") as f:
        assert jar_kafka_version(f, max_directory=64) is None  # a directory too big to read


def test_real_kafka_clients_jars() -> None:
    """kafka-clients jars the local stack's Maven builds fetched: the version file inside
    agrees with the file name."""
    cache = Path(os.environ.get("CONNMON_CACHE_DIR", REPO / "deploy" / "local" / ".cache"))
    jars = sorted(cache.glob("**/kafka-clients-*.jar"))[:4]
    if not jars:
        pytest.skip(f"no kafka-clients jar under {cache} (make setup fetches them)")
    for jar in jars:
        with jar.open("rb") as f:
            assert jar_kafka_version(f) == java_version_from_paths([str(jar)]), jar


def test_identify_java_from_open_jars(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 500, fs)
    p.maps(["/usr/lib/jvm/java-17/bin/java", "/usr/lib/jvm/java-17/lib/server/libjvm.so"])
    p.fds(["/dev/null", "socket:[1234]", "/opt/app/lib/guava-33.0.jar",
           "/opt/app/lib/kafka-clients-3.9.0.jar", "pipe:[55]"])  # fmt: skip
    info = p.info(["java", "-cp", "/opt/app/lib/kafka-clients-3.1.0.jar", "com.acme.Orders"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.9.0", "fd")


def test_identify_java_from_classpath(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 501, fs)
    info = p.info(["/usr/bin/java", "-Xmx512m", "-cp",
                   "/opt/kafka/config:/opt/kafka/libs/kafka-clients-4.3.1.jar", "kafka.Kafka"],
                  exe="/usr/lib/jvm/java-17/bin/java")  # fmt: skip
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "4.3.1", "cmdline")


def test_identify_java_from_classpath_wildcard(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "opt" / "svc" / "libs" / "kafka-clients-3.5.2.jar", b"PK")
    write(fs / "opt" / "svc" / "libs" / "slf4j-api-2.0.9.jar", b"PK")
    p = FakeProc(proc, 502, fs)
    info = p.info(["java", "-cp", "/opt/svc/conf:/opt/svc/libs/*", "com.acme.Svc"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.5.2", "cmdline")


def test_identify_java_from_fat_jar(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    shaded_jar(fs / "app" / "orders-all.jar", "3.7.1")
    p = FakeProc(proc, 503, fs)
    p.fds(["/app/orders-all.jar"])
    info = p.info(["java", "-jar", "/app/orders-all.jar"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.7.1", "jar")


def test_identify_java_from_relative_fat_jar(tmp_path: Path) -> None:
    """A relative -jar path is the process's working directory's (its root is / here)."""
    proc = tmp_path / "proc"
    shaded_jar(tmp_path / "work" / "svc.jar", "3.4.0")
    p = FakeProc(proc, 504, "/")
    p.link("cwd", tmp_path / "work")
    info = p.info(["java", "-jar", "svc.jar"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.4.0", "jar")


def test_identify_java_jar_reads_are_bounded(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, fs = tree
    shaded_jar(fs / "app" / "a.jar", "3.1.0")
    shaded_jar(fs / "app" / "b.jar", "3.2.0")
    info_args = ["java", "-cp", "/app/x.jar:/app/a.jar:/app/b.jar", "com.acme.Main"]
    monkeypatch.setattr(libraries, "MAX_JARS", 2)  # x.jar (missing) and a.jar
    p = FakeProc(proc, 506, fs)
    assert LibraryIdentifier(str(proc)).identify(p.info(info_args)).version == "3.1.0"
    monkeypatch.setattr(libraries, "MAX_ZIP_BUDGET", 100)  # no directory fits
    q = FakeProc(proc, 507, fs)
    assert LibraryIdentifier(str(proc)).identify(q.info(info_args)) == ClientLibrary(
        "java", None, "jvm"
    )


def test_identify_java_without_evidence(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 505, fs)
    info = p.info(["java", "-cp", "/missing/app.jar", "com.acme.Main"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", None, "jvm")


# --- Node, Python, Rust ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["node", "dist/server.js", "--port", "80"], "dist/server.js"),
        (["node", "--max-old-space-size=512", "-r", "dotenv/config", "/app/i.js"], "/app/i.js"),
        (["node", "-e", "require('kafkajs')"], None),
        (["node", "--", "x.js"], "x.js"),
        (["node"], None),
    ],
)
def test_node_script(args: list[str], want: str | None) -> None:
    assert node_script(args) == want


def test_package_json_version() -> None:
    assert package_json_version('{"name": "kafkajs", "version": "2.2.4"}') == "2.2.4"
    assert package_json_version('{"name": "x"}') is None
    assert package_json_version("[1]") is None
    assert package_json_version("{not json") is None


@pytest.mark.parametrize(
    ("names", "project", "want"),
    [
        (["kafka", "kafka_python-3.0.12.dist-info"], "kafka_python", "3.0.12"),
        (["kafka_python-2.0.2-py3.11.egg-info"], "kafka-python", "2.0.2"),
        (["aiokafka-0.14.0.dist-info", "kafka_python-2.0.2.dist-info"], "aiokafka", "0.14.0"),
        (["confluent_kafka-2.16.1.dist-info"], "confluent_kafka", "2.16.1"),
        (["kafka_python_ng-2.2.3.dist-info"], "kafka_python", None),
        (["kafka"], "kafka_python", None),
    ],
)
def test_dist_info_version(names: list[str], project: str, want: str | None) -> None:
    assert dist_info_version(names, project) == want


def _kafkajs_app(fs: Path, version: str = "2.2.4") -> None:
    pkg = {"name": "kafkajs", "version": version}
    write(fs / "app" / "node_modules" / "kafkajs" / "package.json", json.dumps(pkg))
    write(fs / "app" / "dist" / "server.js", "require('kafkajs')\n")


def test_identify_kafkajs_from_relative_script(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    _kafkajs_app(fs)
    p = FakeProc(proc, 600, fs)
    p.link("cwd", "/app")  # as the container sees it
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "dist/server.js"]))
    assert got == ClientLibrary("kafkajs", "2.2.4", "package")


def test_identify_kafkajs_from_working_directory(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    _kafkajs_app(fs, "2.1.0")
    p = FakeProc(proc, 601, fs)
    p.link("cwd", "/app/dist")
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "-e", "require('./server')"]))
    assert got == ClientLibrary("kafkajs", "2.1.0", "package")


def test_identify_node_rdkafka_package_and_nothing(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "svc" / "node_modules" / "node-rdkafka" / "package.json", '{"version": "v3.0.0"}')
    p = FakeProc(proc, 602, fs)
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "/svc/bin/www"]))
    assert got == ClientLibrary("librdkafka", "3.0.0", "package")
    q = FakeProc(proc, 603, fs)
    assert LibraryIdentifier(str(proc)).identify(q.info(["node", "/other/x.js"])) == UNKNOWN


def test_identify_aiokafka_from_maps(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    site = fs / "usr/local/lib/python3.12/site-packages"
    (site / "aiokafka-0.14.0.dist-info").mkdir(parents=True)
    p = FakeProc(proc, 700, fs)
    p.maps(["/usr/local/bin/python3.12",
            "/usr/local/lib/python3.12/site-packages/aiokafka/record/_crecords/"
            "legacy_records.cpython-312-x86_64-linux-gnu.so"])  # fmt: skip
    got = LibraryIdentifier(str(proc)).identify(p.info(["python3", "-m", "app"]))
    assert got == ClientLibrary("aiokafka", "0.14.0", "maps")


def test_identify_kafka_python_in_a_virtualenv(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "srv/.venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n")
    (fs / "srv/.venv/lib/python3.11/site-packages/kafka_python-3.0.12.dist-info").mkdir(
        parents=True
    )
    (fs / "usr/lib/python3/dist-packages/aiokafka-0.8.0.dist-info").mkdir(parents=True)
    p = FakeProc(proc, 701, fs)
    info = p.info(["/srv/.venv/bin/python", "/srv/consumer.py"], exe="/usr/bin/python3.11")
    got = LibraryIdentifier(str(proc)).identify(info)
    assert got == ClientLibrary("kafka-python", "3.0.12", "package")


def test_identify_python_system_site_and_isolation(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    (fs / "usr/lib/python3/dist-packages/kafka_python-2.0.2.egg-info").mkdir(parents=True)
    p = FakeProc(proc, 702, fs)
    info = p.info(["python3", "/opt/tool.py"], exe="/usr/bin/python3.11")
    got = LibraryIdentifier(str(proc)).identify(info)
    assert got == ClientLibrary("kafka-python", "2.0.2", "package")
    # A virtualenv that does not see the system's packages.
    write(fs / "venv/pyvenv.cfg", "home = /usr/bin\n")
    q = FakeProc(proc, 703, fs)
    info = q.info(["/venv/bin/python3", "/opt/tool.py"], exe="/usr/bin/python3.11")
    assert LibraryIdentifier(str(proc)).identify(info) == UNKNOWN


def test_identify_kafka_python_from_mapped_site_packages(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    site = "/opt/conda/lib/python3.10/site-packages"
    (fs / site[1:] / "kafka_python-2.0.2.dist-info").mkdir(parents=True)
    p = FakeProc(proc, 704, fs)
    p.maps(["/opt/conda/bin/python3.10", f"{site}/_cffi_backend.cpython-310-x86_64.so"])
    got = LibraryIdentifier(str(proc)).identify(p.info(["gunicorn"], comm="gunicorn"))
    assert got == ClientLibrary("kafka-python", "2.0.2", "package")


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


# --- caching and robustness ------------------------------------------------------------------


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
    at = jar.find(libraries.KAFKA_VERSION_ENTRY) + len(libraries.KAFKA_VERSION_ENTRY)
    jar[at : at + 8] = b"\xff" * 8
    write(fs / "bad.jar", bytes(jar))
    r = FakeProc(proc, 953, fs)
    got = ident.identify(r.info(["java", "-jar", "/bad.jar"]))
    assert got == ClientLibrary("java", None, "jvm")
    # Anything unexpected inside.
    monkeypatch.setattr(libraries, "from_maps", lambda text: 1 / 0)
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
