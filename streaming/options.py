"""Option parsing shared by every component's command line and config."""

from __future__ import annotations

from streaming.errors import ConfigError


def parse_pairs(setting: str, items: list[str] | None) -> dict[str, str]:
    """Repeatable ``KEY=VALUE`` options -> a dict; a malformed item names its setting."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{setting}: {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
