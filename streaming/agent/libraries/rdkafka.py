"""librdkafka's version, decoded from the machine code of ``rd_kafka_version()`` (x86 and
arm64): the library holds no version string of its own."""

from __future__ import annotations

from streaming.agent.libraries.elf import EM_386, EM_AARCH64, EM_X86_64, ElfFile

_ENDBR = (b"\xf3\x0f\x1e\xfa", b"\xf3\x0f\x1e\xfb")
_A64_RET = 0xD65F03C0
_A64_HINTS = (0xD503245F, 0xD503233F, 0xD503201F)  # bti c, paciasp, nop


def format_rdkafka_version(n: int) -> str | None:
    """librdkafka's version string for its ``0xMMmmrrpp`` number (``0x021000ff`` is 2.16.0;
    ``pp`` below 0xff marks a pre-release), as ``rd_kafka_version_str()`` prints it."""
    if n <= 0 or n > 0xFFFFFFFF:
        return None
    text = f"{n >> 24}.{(n >> 16) & 0xFF}.{(n >> 8) & 0xFF}"
    pre = n & 0xFF
    if pre != 0xFF:
        text += f"-pre{pre}" if pre <= 200 else f"-RC{pre - 200}"
    return text


def decode_rdkafka_version(code: bytes, machine: int) -> str | None:
    """The constant ``rd_kafka_version()`` returns, from the function's first bytes: on x86
    ``mov eax, imm32; ret``, on arm64 ``movz w0, lo; movk w0, hi, lsl 16; ret``."""
    if machine in (EM_X86_64, EM_386):
        if code[:4] in _ENDBR:
            code = code[4:]
        if len(code) >= 6 and code[0] == 0xB8 and code[5] == 0xC3:
            return format_rdkafka_version(int.from_bytes(code[1:5], "little"))
        return None
    if machine == EM_AARCH64:
        words = [int.from_bytes(code[i : i + 4], "little") for i in range(0, len(code) - 3, 4)]
        while words and words[0] in _A64_HINTS:
            words.pop(0)
        if len(words) < 2 or (words[0] & 0xFFE0001F) != 0x52800000:  # movz w0, #imm16
            return None
        value = (words[0] >> 5) & 0xFFFF
        if (words[1] & 0xFFE0001F) == 0x72A00000:  # movk w0, #imm16, lsl #16
            value |= ((words[1] >> 5) & 0xFFFF) << 16
        elif words[1] != _A64_RET:
            return None
        return format_rdkafka_version(value)
    return None


def rdkafka_version_of(elf: ElfFile) -> str | None:
    """The librdkafka version of a shared object exporting ``rd_kafka_version``."""
    addr = elf.symbol_address("rd_kafka_version")
    offset = elf.offset_of(addr) if addr is not None else None
    if offset is None:
        return None
    return decode_rdkafka_version(elf.read(offset, 16), elf.machine)
