"""``--max-event-age``/``--max-event-future``: durations as their help says, and ``off``; a wrong
value names the flag, or the config file's key."""

from __future__ import annotations

import pytest

from streaming.cli import build_parser, main
from streaming.errors import ConfigError
from streaming.job.cli import settings_from_args
from streaming.job.settings import event_bound, from_sources, load_file, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1d", 86400.0), ("24h", 86400.0), ("90m", 5400.0), ("30s", 30.0), ("3600", 3600.0)],
)
@pytest.mark.parametrize("flag", ["--max-event-age", "--max-event-future"])
def test_flag_takes_durations(flag: str, text: str, seconds: float) -> None:
    args = build_parser().parse_args(["job", flag, text])
    s = settings_from_args(args)
    attr = "max_event_age_s" if flag == "--max-event-age" else "max_event_future_s"
    assert getattr(s, attr) == seconds


@pytest.mark.parametrize("flag", ["--max-event-age", "--max-event-future"])
@pytest.mark.parametrize("text", ["off", "OFF", "none"])
def test_flag_off_disables(flag: str, text: str) -> None:
    s = settings_from_args(build_parser().parse_args(["job", flag, text]))
    attr = "max_event_age_s" if flag == "--max-event-age" else "max_event_future_s"
    assert getattr(s, attr) is None


def test_defaults_stay_when_not_given() -> None:
    s = settings_from_args(build_parser().parse_args(["job"]))
    assert (s.max_event_age_s, s.max_event_future_s) == (86400.0, 300.0)


@pytest.mark.parametrize("flag", ["--max-event-age", "--max-event-future"])
@pytest.mark.parametrize(
    ("text", "reason"),
    [("1x", "is not a duration"), ("soon", "is not a duration"), ("0", "must be positive")],
)
def test_wrong_flag_value_names_the_flag(capsys, flag: str, text: str, reason: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["job", flag, text])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: " in err and reason.split()[0] in err
    assert "_s" not in err.splitlines()[-1]  # the flag, not the setting's attribute


@pytest.mark.parametrize(
    ("cli", "where"),
    [
        ({"max_event_age_s": "1x"}, "--max-event-age"),
        ({"max_event_future_s": "-5m"}, "--max-event-future"),
        ({"max_event_age_s": 0}, "--max-event-age"),
    ],
)
def test_from_sources_names_the_flag(cli: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError, match=f"^{where}: "):
        from_sources(cli=cli)


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("job:\n  max_event_age_s: 1d\n", 86400.0),
        ("job:\n  max_event_age_s: 7200\n", 7200.0),
        ("job:\n  max_event_age_s: off\n", None),  # YAML reads a bare off as false
        ("job:\n  max_event_age_s: 'off'\n", None),
    ],
)
def test_config_file_values(tmp_path, text: str, age: float | None) -> None:
    f = tmp_path / "job.yaml"
    f.write_text(text)
    assert from_sources(load_file(str(f))).max_event_age_s == age


@pytest.mark.parametrize("value", ["1x", "0s", "true"])
def test_wrong_config_value_names_the_key(tmp_path, value: str) -> None:
    f = tmp_path / "job.yaml"
    f.write_text(f"job:\n  max_event_future_s: {value}\n")
    with pytest.raises(ConfigError, match="^job.max_event_future_s: "):
        from_sources(load_file(str(f)))


def test_the_one_duration_parser_knows_days() -> None:
    assert parse_duration("x", "1d") == 86400.0
    assert parse_duration("x", "1.5h") == 5400.0
    assert event_bound("x", 30) == 30.0
    with pytest.raises(ConfigError, match="^x: "):
        parse_duration("x", "1w")
