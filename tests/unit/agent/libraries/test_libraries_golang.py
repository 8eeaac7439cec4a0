"""Go build information: handcrafted ``.go.buildinfo`` sections, Go executables in fixture
/proc trees, and real Go binaries built here."""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from library_fakes import REPO, FakeProc, make_elf, write

from streaming.agent.libraries import UNKNOWN, ClientLibrary, LibraryIdentifier
from streaming.agent.libraries.elf import ElfFile
from streaming.agent.libraries.golang import (
    GO_BUILDINFO_MAGIC,
    library_from_go_modules,
    parse_go_buildinfo,
    parse_go_modinfo,
    read_go_buildinfo,
)
from streaming.agent.libraries.model import clean_version
from streaming.schema.clients import CLIENT_LIBRARIES


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
    head = GO_BUILDINFO_MAGIC + bytes([8, flags]) + bytes(16)
    return head + _uvarint(len(go_version)) + go_version.encode() + _uvarint(len(mod)) + mod


SARAMA_MODINFO = (
    "path\texample.com/orders\n"
    "mod\texample.com/orders\t(devel)\t\n"
    "dep\tgithub.com/IBM/sarama\tv1.43.2\th1:abc=\n"
    "dep\tgithub.com/klauspost/compress\tv1.17.9\th1:def=\n"
    "build\t-compiler=gc\n"
)


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
