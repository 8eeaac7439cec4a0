"""Label values: sanitized, bounded, and never an endpoint with a port."""

from __future__ import annotations

import re
import unicodedata

MAX_LABEL_LEN = 128
UNKNOWN = "unknown"
_HOST_PORT = re.compile(r"^(?P<host>[^:\[\]]+):(?P<port>\d{1,5})$")
_BRACKETED = re.compile(r"^\[(?P<host>[^\]]+)\](?::\d{1,5})?$")


def clean(value: object, default: str = UNKNOWN) -> str:
    """A printable, trimmed label value of at most ``MAX_LABEL_LEN`` characters."""
    if value is None:
        return default
    text = "".join(ch if unicodedata.category(ch)[0] != "C" else "_" for ch in str(value)).strip()
    if not text:
        return default
    if len(text) > MAX_LABEL_LEN:
        # Keep the cut visible so two long values never look complete and equal.
        text = text[: MAX_LABEL_LEN - 1] + "~"
    return text


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
