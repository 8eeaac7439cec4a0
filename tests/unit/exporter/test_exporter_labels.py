"""Label cleaning keeps distinct values distinct, bounded and stable across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.exporter.labels import MAX_LABEL_LEN, clean, value_hash


def test_clean_values_are_unchanged() -> None:
    for value in ("web-1", "orders-consumer", "10.0.0.1", "kafka-3.example", "a" * MAX_LABEL_LEN):
        assert clean(value) == value
    assert clean(None) == "unknown"
    assert clean("   ", default="") == ""


def test_distinct_long_values_stay_distinct_and_bounded() -> None:
    prefix = "app-" + "x" * 100_000
    values = [f"{prefix}-{i}" for i in range(50)]
    labels = {clean(v) for v in values}
    assert len(labels) == 50
    assert all(len(label) <= MAX_LABEL_LEN for label in labels)
    assert all(label.startswith("app-xxx") for label in labels)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("web\x001", "web\x011"),  # differ only by a control character
        ("web\x001", "web_1"),  # a replaced character vs. the replacement itself
        ("web-1", " web-1"),  # surrounding blanks
        ("app\n", "app\r"),
        ("\ud800", "\udfff"),  # lone surrogates (valid in JSON strings)
    ],
)
def test_values_that_clean_alike_stay_distinct(a: str, b: str) -> None:
    assert clean(a) != clean(b)
    assert len(clean(a)) <= MAX_LABEL_LEN


def test_a_changed_value_keeps_its_readable_part_and_a_suffix() -> None:
    assert clean("  a\x00b\nc ") == "a_b_c~" + value_hash("  a\x00b\nc ")
    assert clean("h\x01ost").startswith("h_ost~")


def test_a_clean_value_cannot_pose_as_a_cleaned_one() -> None:
    cleaned = clean("a\x00b")
    assert clean(cleaned) != cleaned
    assert len({clean("a\x00b"), clean(cleaned)}) == 2


def test_hash_is_stable_across_processes_and_releases() -> None:
    assert value_hash("a\x00b") == "f5ccd773"  # blake2b, 4 bytes: never Python's hash()
    code = "from streaming.exporter.labels import clean; print(clean('x' * 500 + '\\x07'))"
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=Path(__file__).resolve().parents[3],
        )
        outputs.add(out.stdout.strip())
    assert outputs == {clean("x" * 500 + "\x07")}
