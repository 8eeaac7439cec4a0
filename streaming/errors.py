"""Errors shared by every component."""

from __future__ import annotations


class ConfigError(Exception):
    """A wrong setting; the message names it. The command line exits with status 2."""
