"""What the files a process has mapped (``/proc/<pid>/maps``) say: librdkafka, a binding's
or aiokafka's extension, a JVM, a Python interpreter and its site-packages."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LIBRDKAFKA = re.compile(r"^librdkafka(?![+])[-.\w]*\.so(\.[\d.]+)?$")
_RDKAFKA_BINDINGS = ("/confluent_kafka/", "/node-rdkafka/", "/@confluentinc/kafka-javascript/")
_SITE = re.compile(r"^(.*?/(?:site|dist)-packages)/")


@dataclass(frozen=True, slots=True)
class MapsEvidence:
    """What the loaded files of a process say (paths as the process sees them)."""

    ranges: dict[str, str]  # mapped file -> address range of its first mapping
    librdkafka: str | None = None  # a mapped librdkafka shared object
    rdkafka_binding: str | None = None  # a binding's extension (confluent_kafka, node-rdkafka)
    aiokafka: str | None = None  # one of aiokafka's compiled extensions
    jvm: bool = False
    python: bool = False
    site_dirs: tuple[str, ...] = ()


def parse_maps(text: str) -> dict[str, str]:
    """Mapped file path -> address range of its first mapping, from /proc/<pid>/maps."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].removesuffix(" (deleted)")
        out.setdefault(path, parts[0])
    return out


def from_maps(text: str) -> MapsEvidence:
    """Classify the files a process has mapped."""
    ranges = parse_maps(text)
    librdkafka = binding = aiokafka = None
    jvm = python = False
    sites: list[str] = []
    for path in ranges:
        base = path.rsplit("/", 1)[-1]
        if librdkafka is None and _LIBRDKAFKA.match(base):
            librdkafka = path
        elif (
            binding is None
            and any(b in path for b in _RDKAFKA_BINDINGS)
            and (".so" in base or base.endswith(".node"))
        ):
            binding = path
        elif aiokafka is None and "/aiokafka/" in path and ".so" in base:
            aiokafka = path
        if base == "libjvm.so":
            jvm = True
        elif base.startswith("libpython3") or "/lib-dynload/" in path:
            python = True
        m = _SITE.match(path)
        if m and m.group(1) not in sites:
            sites.append(m.group(1))
    return MapsEvidence(ranges, librdkafka, binding, aiokafka, jvm, python or bool(sites),
                        tuple(sites))  # fmt: skip
