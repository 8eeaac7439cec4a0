"""Fakes for the library identification tests, shared by its modules: a minimal ELF file,
a fixture /proc tree's process, files written in place, a shaded jar."""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path

from streaming.agent.libraries.elf import EM_X86_64
from streaming.agent.procs import ProcInfo

REPO = Path(__file__).resolve().parents[4]


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
