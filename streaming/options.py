"""Option parsing shared by every component's command line and config."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streaming.errors import ConfigError


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML (.yaml/.yml) or TOML (.toml) config file into a dict; ConfigError when it
    cannot be read, does not parse or does not hold a mapping."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"config: cannot read {p}: {exc.strerror}") from None
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
    except Exception as exc:  # yaml.YAMLError or tomllib.TOMLDecodeError: unreadable
        raise ConfigError(f"config: {p} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config: {p} must hold a mapping at the top")
    return data


def parse_bool(value: Any) -> bool:
    """true/false (also yes/no, on/off, 1/0) from a file, the environment or a flag; ValueError
    otherwise (the caller names the setting)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(value)


def parse_pairs(setting: str, items: list[str] | None) -> dict[str, str]:
    """Repeatable ``KEY=VALUE`` options -> a dict; a malformed item names its setting."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{setting}: {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def env_key(suffix: str) -> str:
    """A client setting's name from an environment variable's suffix: ``SASL_PASSWORD`` ->
    ``sasl.password``."""
    return suffix.lower().replace("_", ".")


def env_settings(environ: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Client settings from the variables named ``prefix`` + KEY, such as a Kubernetes Secret
    sets, so that no credential has to appear in a command line or a config file."""
    return {env_key(k[len(prefix) :]): v for k, v in environ.items() if k.startswith(prefix)}
