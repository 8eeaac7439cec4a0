"""Label values: sanitized, bounded, distinct for distinct inputs, and never an endpoint with a
port."""

from __future__ import annotations

import hashlib
import re
import unicodedata

MAX_LABEL_LEN = 128
# A finding's recommendation is prose for a person (a few sentences), not an identity.
MAX_TEXT_LEN = 2048
UNKNOWN = "unknown"
HASH_SEP = "~"
HASH_LEN = 8  # hex characters of the suffix: 32 bits
_HOST_PORT = re.compile(r"^(?P<host>[^:\[\]]+):(?P<port>\d{1,5})$")
_BRACKETED = re.compile(r"^\[(?P<host>[^\]]+)\](?::\d{1,5})?$")
# A clean value ending like a suffix is suffixed too, so it cannot pose as a cleaned one.
_LOOKS_SUFFIXED = re.compile(rf"{HASH_SEP}[0-9a-f]{{{HASH_LEN}}}$")


def value_hash(text: str) -> str:
    """Short stable digest of ``text`` (the same in every process and release)."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=HASH_LEN // 2).hexdigest()


def clean(value: object, default: str = UNKNOWN, limit: int = MAX_LABEL_LEN) -> str:
    """A printable, trimmed label value of at most ``limit`` characters.

    A value that is already clean is returned as it is. One that had to change (control
    characters replaced, surrounding blanks trimmed, or cut to length) gets ``~`` and a hash
    of the original value appended, so distinct values never share a label value. Empty or
    blank values become ``default``.
    """
    if value is None:
        return default
    original = str(value)
    text = "".join(ch if unicodedata.category(ch)[0] != "C" else "_" for ch in original).strip()
    if not text:
        return default
    if text == original and len(text) <= limit and not _LOOKS_SUFFIXED.search(text):
        return text
    keep = limit - len(HASH_SEP) - HASH_LEN
    return f"{text[:keep]}{HASH_SEP}{value_hash(original)}"


def strip_port(address: object) -> str:
    """The host part of ``host:port`` / ``[v6]:port``; a bare host or IPv6 address as it is."""
    text = str(address or "").strip()
    m = _BRACKETED.match(text)
    if m:
        return m.group("host")
    m = _HOST_PORT.match(text)
    if m:
        return m.group("host")
    return text


def broker_label(broker_id: object, endpoint: object) -> str:
    """``broker_id`` as a label: the id when known, else the endpoint's host (no port)."""
    if isinstance(broker_id, bool):
        broker_id = None
    if isinstance(broker_id, int) and broker_id >= 0:
        return str(broker_id)
    if isinstance(broker_id, str) and broker_id.strip().isdigit():
        return str(int(broker_id))
    return clean(strip_port(endpoint))


def peer_label(peer_host: object) -> str:
    """Broker side: the client's address without a port; client side (None): empty."""
    if peer_host is None or str(peer_host).strip() == "":
        return ""
    return clean(strip_port(peer_host))
