"""A checkpoint's saved settings: the job refuses to start on one saved with another window,
bucket count (``connmon.json``) or state-store partition count (Spark's offset log), naming
the setting, both values and the move to a new checkpoint with ``--migrate-from``."""

from __future__ import annotations

import json

import pytest

from streaming.errors import ConfigError
from streaming.job.checkpoint import (
    LAYOUT,
    Meta,
    check_settings,
    recorded_shuffle_partitions,
)

CKPT = "/var/lib/connmon/ckpt"


def _meta() -> Meta:
    return Meta(LAYOUT, "run1", 60.0, 256)


def test_the_same_settings_start() -> None:
    check_settings(_meta(), CKPT, 60.0, 256, 4, saved_partitions=4)


@pytest.mark.parametrize(
    ("window_s", "buckets", "partitions", "message"),
    [
        (30.0, 256, 4, "detectors.window_s: the checkpoint has 60.0 s windows, the config 30.0 s"),
        (60.0, 64, 4, "state-buckets: the checkpoint has 256, the config 64"),
        (60.0, 256, 8, "shuffle-partitions: the checkpoint has 4, the config 8"),
    ],
)
def test_another_value_is_refused_naming_the_setting_both_values_and_the_move(
    window_s: float, buckets: int, partitions: int, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_settings(_meta(), CKPT, window_s, buckets, partitions, saved_partitions=4)
    text = str(caught.value)
    assert text.startswith(message)
    assert text.endswith(f"--checkpoint NEW --migrate-from {CKPT}")


def test_partitions_are_compared_once_spark_has_recorded_them() -> None:
    check_settings(_meta(), CKPT, 60.0, 256, 8)  # no state batch yet: nothing to compare
    check_settings(_meta(), CKPT, 60.0, 256, 8, saved_partitions=8)
    with pytest.raises(ConfigError, match=r"^shuffle-partitions: the checkpoint has 4, the con"):
        check_settings(_meta(), CKPT, 60.0, 256, 8, saved_partitions=4)


def test_spark_offset_log_gives_the_partitions_its_query_keeps() -> None:
    conf = {
        "spark.sql.shuffle.partitions": "6",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
    }
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1700000000000, "conf": conf}
    log = "\n".join(["v1", json.dumps(metadata), '{"connmon.partials":{"0":5}}'])
    assert recorded_shuffle_partitions(log) == 6
    assert recorded_shuffle_partitions("v1\n{}\n") is None
    assert recorded_shuffle_partitions("") is None
    assert recorded_shuffle_partitions("v1\nnot json\n") is None
