"""Job settings: defaults, config file, command line; wrong settings name themselves."""

from __future__ import annotations

import pytest

from streaming.cli import main
from streaming.errors import ConfigError
from streaming.job.settings import from_sources, load_file, parse_duration


def test_defaults_are_valid_in_local_mode():
    s = from_sources()
    assert s.master == "local[*]" and s.checkpoint is None and s.trigger_s == 5.0


def test_checkpoint_is_required_outside_local_mode():
    with pytest.raises(ConfigError, match="^checkpoint: required"):
        from_sources(cli={"master": "spark://127.0.0.1:7077"})
    s = from_sources(cli={"master": "spark://127.0.0.1:7077", "checkpoint": "/tmp/x"})
    assert s.checkpoint == "/tmp/x"


@pytest.mark.parametrize(
    ("cli", "setting"),
    [
        ({"trigger": "soon"}, "trigger"),
        ({"trigger": "0s"}, "trigger"),
        ({"max_offsets_per_trigger": 0}, "max-offsets-per-trigger"),
        ({"starting_offsets": "yesterday"}, "starting-offsets"),
        ({"starting_offsets": "{bad"}, "starting-offsets"),
        ({"fail_on_data_loss": "maybe"}, "fail-on-data-loss"),
        ({"shuffle_partitions": 0}, "shuffle-partitions"),
    ],
)
def test_wrong_setting_is_named(cli, setting):
    with pytest.raises(ConfigError, match=f"^{setting}:"):
        from_sources(cli=cli)


def test_include_connmon_is_a_flag():
    assert from_sources(detector_overrides={"include_connmon": "true"}).detectors.include_connmon
    assert not from_sources(detector_overrides={"include_connmon": "no"}).detectors.include_connmon
    with pytest.raises(ConfigError, match="^set.include_connmon: 'maybe' is not true or false"):
        from_sources(detector_overrides={"include_connmon": "maybe"})


@pytest.mark.parametrize("name", ["fire_after_windows", "resolve_after_windows"])
@pytest.mark.parametrize("value", ["0", "61"])
def test_hysteresis_windows_are_bounded(name, value):
    with pytest.raises(ConfigError, match=f"^detectors.{name}: must be between 1 and 60"):
        from_sources(detector_overrides={name: value})


def test_config_file_then_cli_then_set(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(
        "job:\n  trigger: 2s\n  max_offsets_per_trigger: 1000\n"
        "detectors:\n  close_wait_grace_s: 5\n  window_s: 10\n"
        "kafka:\n  security.protocol: SASL_SSL\n"
    )
    s = from_sources(load_file(str(f)), {"trigger": "1s"}, {"idle_churn_min_cycles": "3"})
    assert s.trigger_s == 1.0 and s.max_offsets_per_trigger == 1000
    assert s.detectors.close_wait_grace_s == 5.0 and s.detectors.window_s == 10.0
    assert s.detectors.idle_churn_min_cycles == 3
    assert s.kafka == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("detectors:\n  close_wait_grace: 5\n", "detectors.close_wait_grace"),
        ("detectors:\n  close_wait_grace_s: soon\n", "detectors.close_wait_grace_s"),
        ("job:\n  triger: 5s\n", "job.triger"),
        ("jobs: {}\n", "config"),
        ("kafka:\n  kafka.security.protocol: SSL\n", "kafka.kafka.security.protocol"),
        ("detectors:\n  window_s: 60\n  idle_churn_window_s: 30\n", "detectors.idle_churn"),
        ("detectors:\n  finding_heartbeat_s: 0\n", "detectors.finding_heartbeat_s: must be"),
    ],
)
def test_wrong_file_setting_is_named(tmp_path, text, setting):
    f = tmp_path / "job.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=f"^{setting}"):
        from_sources(load_file(str(f)))


def test_durations():
    assert parse_duration("x", "500ms") == 0.5
    assert parse_duration("x", "2m") == 120.0
    assert parse_duration("x", "7") == 7.0


def test_cli_exits_2_and_names_the_setting(capsys):
    assert main(["job", "--master", "spark://127.0.0.1:1", "--trigger", "1s"]) == 2
    assert "checkpoint: required" in capsys.readouterr().err
    assert main(["replay", "--events", "/nonexistent.jsonl", "--findings", "/tmp/x"]) == 2
    assert main(["job", "--set", "no_such_threshold=1"]) == 2
    assert "set.no_such_threshold" in capsys.readouterr().err
