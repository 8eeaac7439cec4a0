from __future__ import annotations

import pytest

from streaming.cli import main
from streaming.errors import ConfigError
from streaming.exporter import config as cfg


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"listen": "nope"}, "listen"),
        ({"listen": "127.0.0.1:70000"}, "listen"),
        ({"series_limit": 0}, "series-limit"),
        ({"staleness_s": 0}, "staleness"),
        ({"tls_cert_file": "/nonexistent.pem"}, "tls-cert-file/tls-key-file"),
        ({"tls_cert_file": "/nonexistent", "tls_key_file": "/nope"}, "tls-cert-file"),
        ({"basic_auth_user": "prom"}, "basic-auth-user"),
        ({"kafka_config": ["novalue"]}, "kafka-config"),
        ({"findings_topic": "connmon.aggregates"}, "aggregates-topic"),
    ],
)
def test_wrong_settings_name_themselves(kwargs: dict, setting: str) -> None:
    with pytest.raises(ConfigError, match=f"^{setting}"):
        cfg.build("127.0.0.1:9092", **kwargs)


def test_good_settings(tmp_path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    conf = cfg.build(
        "b:9092", listen="[::1]:9999", basic_auth_user="prom",
        basic_auth_password_file=str(pw), kafka_config=["security.protocol=SSL"],
    )  # fmt: skip
    assert (conf.listen_host, conf.listen_port) == ("::1", 9999)
    assert conf.basic_auth_password == "s3cret"
    assert conf.kafka_config == {"security.protocol": "SSL"}


def test_cli_exits_2_with_the_setting_name(capsys) -> None:
    assert main(["exporter", "--series-limit", "0"]) == 2
    assert "series-limit" in capsys.readouterr().err


def test_unknown_kafka_setting_fails_at_start(capsys) -> None:
    from streaming.stack.ports import free_port

    args = [
        "exporter",
        "--kafka-config",
        "no.such.setting=1",
        "--listen",
        f"127.0.0.1:{free_port()}",
    ]
    assert main(args) == 2
    assert "kafka-config" in capsys.readouterr().err


def test_kafka_settings_from_the_environment_give_way_to_flags(monkeypatch) -> None:
    """A Secret sets CONNMON_EXPORTER_KAFKA_*: no password in the command line."""
    from streaming.cli import build_parser
    from streaming.exporter import cli

    seen: dict = {}
    monkeypatch.setenv("CONNMON_EXPORTER_KAFKA_SASL_PASSWORD", "from-secret")
    monkeypatch.setenv("CONNMON_EXPORTER_KAFKA_SASL_USERNAME", "env-user")
    monkeypatch.setattr(cli, "check_topics", lambda conf: seen.update(conf.kafka_config))
    monkeypatch.setattr(cli, "Store", _Stop)
    args = build_parser().parse_args(
        ["exporter", "--kafka-config", "sasl.username=flag-user", "--listen", "127.0.0.1:9853"]
    )
    with pytest.raises(_Stopped):
        cli.run(args)
    assert seen == {"sasl.password": "from-secret", "sasl.username": "flag-user"}


class _Stopped(Exception):
    pass


def _Stop(*args, **kwargs):  # noqa: N802 - stands in for the Store class
    raise _Stopped
