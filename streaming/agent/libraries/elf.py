"""A minimal ELF reader: headers, then sections and loadable segments on demand, and the
value of a symbol."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from streaming.agent.libraries.model import MAX_SECTIONS, MAX_SYMBOLS

EM_386 = 3
EM_X86_64 = 62
EM_AARCH64 = 183
SHT_SYMTAB = 2
SHT_DYNSYM = 11
PT_LOAD = 1


@dataclass(frozen=True, slots=True)
class ElfSection:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


class ElfFile:
    """The headers of an ELF file open for reading; sections and segments are read on demand.
    Raises ValueError for anything that is not a well-formed ELF file."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        ident = self.read(0, 64)
        if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2):
            raise ValueError("not an ELF file")
        self.is64 = ident[4] == 2
        self.endian = "<" if ident[5] == 1 else ">"
        e = self.endian
        if self.is64:
            (self.machine,) = struct.unpack_from(e + "H", ident, 18)
            phoff, shoff = struct.unpack_from(e + "QQ", ident, 32)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "5H", ident, 54)
        else:
            (self.machine,) = struct.unpack_from(e + "H", ident, 18)
            phoff, shoff = struct.unpack_from(e + "II", ident, 28)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "5H", ident, 42)
        self.loads = self._read_loads(phoff, phentsize, min(phnum, 256))
        self.sections = self._read_sections(shoff, shentsize, min(shnum, MAX_SECTIONS), shstrndx)

    def read(self, offset: int, size: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(size)

    def _read_loads(self, phoff: int, entsize: int, count: int) -> list[tuple[int, int, int]]:
        """(vaddr, file offset, file size) of the PT_LOAD segments."""
        if not phoff or count == 0 or entsize < (56 if self.is64 else 32):
            return []
        raw = self.read(phoff, entsize * count)
        out = []
        for i in range(len(raw) // entsize):
            if self.is64:
                ptype, _, off, vaddr, _, filesz = struct.unpack_from(
                    self.endian + "IIQQQQ", raw, i * entsize
                )
            else:
                ptype, off, vaddr, _, filesz = struct.unpack_from(
                    self.endian + "5I", raw, i * entsize
                )
            if ptype == PT_LOAD:
                out.append((vaddr, off, filesz))
        return out

    def _read_sections(self, shoff: int, entsize: int, count: int, strndx: int) -> list[ElfSection]:
        if not shoff or count == 0 or entsize < (64 if self.is64 else 40):
            return []
        raw = self.read(shoff, entsize * count)
        rows = []
        for i in range(len(raw) // entsize):
            if self.is64:
                name, stype, _, addr, off, size, link = struct.unpack_from(
                    self.endian + "IIQQQQI", raw, i * entsize
                )
            else:
                name, stype, _, addr, off, size, link = struct.unpack_from(
                    self.endian + "7I", raw, i * entsize
                )
            rows.append((name, stype, addr, off, size, link))
        names = b""
        if 0 <= strndx < len(rows):
            _, _, _, off, size, _ = rows[strndx]
            names = self.read(off, min(size, 1 << 20))
        out = []
        for name, stype, addr, off, size, link in rows:
            end = names.find(b"\0", name)
            label = names[name:end].decode("latin-1") if 0 <= name < end else ""
            out.append(ElfSection(label, stype, addr, off, size, link))
        return out

    def section(self, name: str) -> ElfSection | None:
        return next((s for s in self.sections if s.name == name), None)

    def offset_of(self, vaddr: int) -> int | None:
        """The file offset of a virtual address, through the loadable segments."""
        for start, off, size in self.loads:
            if start <= vaddr < start + size:
                return off + vaddr - start
        return None

    def symbol_address(self, wanted: str) -> int | None:
        """The value of a symbol (a function's address): from the dynamic symbol table, else
        from the full one when the binary was not stripped; None when not found or when the
        tables are too big to read."""
        for table_type in (SHT_DYNSYM, SHT_SYMTAB):
            table = next((s for s in self.sections if s.type == table_type), None)
            if table is None or not 0 <= table.link < len(self.sections):
                continue
            strtab = self.sections[table.link]
            if table.size + strtab.size > MAX_SYMBOLS:
                continue
            names = self.read(strtab.offset, strtab.size)
            at = names.find(b"\0" + wanted.encode() + b"\0")
            if at < 0:
                continue
            syms = self.read(table.offset, table.size)
            entsize, fmt = (24, "I4xQ") if self.is64 else (16, "II")
            needle = struct.pack(self.endian + "I", at + 1)  # st_name starts each entry
            hit = syms.find(needle)
            while hit >= 0:
                if hit % entsize == 0 and hit + entsize <= len(syms):
                    _, value = struct.unpack_from(self.endian + fmt, syms, hit)
                    if value:
                        return value
                hit = syms.find(needle, hit + 1)
        return None
