"""What identification returns: ``ClientLibrary``, ``UNKNOWN``, versions as libraries state them."""

from __future__ import annotations

import pytest

from streaming.agent.libraries import UNKNOWN, ClientLibrary
from streaming.agent.libraries.model import clean_version
from streaming.schema.clients import UNKNOWN_LIBRARY


@pytest.mark.parametrize(
    ("raw", "want"),
    [("v1.43.2", "1.43.2"), ("2.16.1", "2.16.1"), ("(devel)", None), ("", None), (None, None),
     ("v0.0.0-20250101-abcdef", "0.0.0-20250101-abcdef"), ("vendor", None)],
)  # fmt: skip
def test_clean_version(raw: str | None, want: str | None) -> None:
    assert clean_version(raw) == want


def test_interface() -> None:
    assert ClientLibrary(UNKNOWN_LIBRARY, None) == UNKNOWN
    assert UNKNOWN.source == ""
    with pytest.raises(AttributeError):
        UNKNOWN.name = "java"  # type: ignore[misc]
