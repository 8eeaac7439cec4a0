"""Fixtures for the exporter's unit tests: a settable clock."""

from __future__ import annotations

import pytest

from streaming.exporter.samples import NOW


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()
