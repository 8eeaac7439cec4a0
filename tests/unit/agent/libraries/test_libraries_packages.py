"""Node and Python: command lines, package versions, and processes in fixture /proc trees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from library_fakes import FakeProc, write

from streaming.agent.libraries import UNKNOWN, ClientLibrary, LibraryIdentifier
from streaming.agent.libraries.packages import (
    declares,
    dist_info_version,
    node_script,
    package_json_version,
)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["node", "dist/server.js", "--port", "80"], "dist/server.js"),
        (["node", "--max-old-space-size=512", "-r", "dotenv/config", "/app/i.js"], "/app/i.js"),
        (["node", "-e", "require('kafkajs')"], None),
        (["node", "--", "x.js"], "x.js"),
        (["node"], None),
    ],
)
def test_node_script(args: list[str], want: str | None) -> None:
    assert node_script(args) == want


def test_package_json_version() -> None:
    assert package_json_version('{"name": "kafkajs", "version": "2.2.4"}') == "2.2.4"
    assert package_json_version('{"name": "x"}') is None
    assert package_json_version("[1]") is None
    assert package_json_version("{not json") is None


@pytest.mark.parametrize(
    ("names", "project", "want"),
    [
        (["kafka", "kafka_python-3.0.12.dist-info"], "kafka_python", "3.0.12"),
        (["kafka_python-2.0.2-py3.11.egg-info"], "kafka-python", "2.0.2"),
        (["aiokafka-0.14.0.dist-info", "kafka_python-2.0.2.dist-info"], "aiokafka", "0.14.0"),
        (["confluent_kafka-2.16.1.dist-info"], "confluent_kafka", "2.16.1"),
        (["kafka_python_ng-2.2.3.dist-info"], "kafka_python", None),
        (["kafka"], "kafka_python", None),
    ],
)
def test_dist_info_version(names: list[str], project: str, want: str | None) -> None:
    assert dist_info_version(names, project) == want


def _kafkajs_app(fs: Path, version: str = "2.2.4") -> None:
    pkg = {"name": "kafkajs", "version": version}
    write(fs / "app" / "node_modules" / "kafkajs" / "package.json", json.dumps(pkg))
    write(fs / "app" / "dist" / "server.js", "require('kafkajs')\n")


def test_identify_kafkajs_from_relative_script(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    _kafkajs_app(fs)
    p = FakeProc(proc, 600, fs)
    p.link("cwd", "/app")  # as the container sees it
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "dist/server.js"]))
    assert got == ClientLibrary("kafkajs", "2.2.4", "package")


def test_identify_kafkajs_from_working_directory(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    _kafkajs_app(fs, "2.1.0")
    p = FakeProc(proc, 601, fs)
    p.link("cwd", "/app/dist")
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "-e", "require('./server')"]))
    assert got == ClientLibrary("kafkajs", "2.1.0", "package")


def test_a_kafkajs_the_apps_own_package_json_declares_is_a_declared_dependency(
    tree: tuple[Path, Path],
) -> None:
    proc, fs = tree
    _kafkajs_app(fs)
    manifest = {"name": "orders", "dependencies": {"kafkajs": "^2.2.4"}}
    write(fs / "app" / "package.json", json.dumps(manifest))
    p = FakeProc(proc, 604, fs)
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "/app/dist/server.js"]))
    assert got == ClientLibrary("kafkajs", "2.2.4", "manifest")
    # A manifest that does not name it (a package another dependency pulled in): installed.
    write(fs / "app" / "package.json", json.dumps({"dependencies": {"express": "4"}}))
    q = FakeProc(proc, 605, fs)
    got = LibraryIdentifier(str(proc)).identify(q.info(["node", "/app/dist/server.js"]))
    assert got == ClientLibrary("kafkajs", "2.2.4", "package")


@pytest.mark.parametrize(
    ("manifest", "declared"),
    [
        ('{"dependencies": {"kafkajs": "2.2.4"}}', True),
        ('{"optionalDependencies": {"kafkajs": "*"}}', True),
        ('{"devDependencies": {"kafkajs": "2.2.4"}}', False),
        ('{"dependencies": ["kafkajs"]}', False),
        ("not json", False),
        ("[]", False),
    ],
)
def test_declares(manifest: str, declared: bool) -> None:
    assert declares(manifest, "kafkajs") is declared


def test_identify_node_rdkafka_package_and_nothing(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "svc" / "node_modules" / "node-rdkafka" / "package.json", '{"version": "v3.0.0"}')
    p = FakeProc(proc, 602, fs)
    got = LibraryIdentifier(str(proc)).identify(p.info(["node", "/svc/bin/www"]))
    assert got == ClientLibrary("librdkafka", "3.0.0", "package")
    q = FakeProc(proc, 603, fs)
    assert LibraryIdentifier(str(proc)).identify(q.info(["node", "/other/x.js"])) == UNKNOWN


def test_identify_aiokafka_from_maps(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    site = fs / "usr/local/lib/python3.12/site-packages"
    (site / "aiokafka-0.14.0.dist-info").mkdir(parents=True)
    p = FakeProc(proc, 700, fs)
    p.maps(["/usr/local/bin/python3.12",
            "/usr/local/lib/python3.12/site-packages/aiokafka/record/_crecords/"
            "legacy_records.cpython-312-x86_64-linux-gnu.so"])  # fmt: skip
    got = LibraryIdentifier(str(proc)).identify(p.info(["python3", "-m", "app"]))
    assert got == ClientLibrary("aiokafka", "0.14.0", "maps")


def test_identify_kafka_python_in_a_virtualenv(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "srv/.venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n")
    (fs / "srv/.venv/lib/python3.11/site-packages/kafka_python-3.0.12.dist-info").mkdir(
        parents=True
    )
    (fs / "usr/lib/python3/dist-packages/aiokafka-0.8.0.dist-info").mkdir(parents=True)
    p = FakeProc(proc, 701, fs)
    info = p.info(["/srv/.venv/bin/python", "/srv/consumer.py"], exe="/usr/bin/python3.11")
    got = LibraryIdentifier(str(proc)).identify(info)
    assert got == ClientLibrary("kafka-python", "3.0.12", "package")


def test_identify_python_system_site_and_isolation(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    (fs / "usr/lib/python3/dist-packages/kafka_python-2.0.2.egg-info").mkdir(parents=True)
    p = FakeProc(proc, 702, fs)
    info = p.info(["python3", "/opt/tool.py"], exe="/usr/bin/python3.11")
    got = LibraryIdentifier(str(proc)).identify(info)
    assert got == ClientLibrary("kafka-python", "2.0.2", "package")
    # A virtualenv that does not see the system's packages.
    write(fs / "venv/pyvenv.cfg", "home = /usr/bin\n")
    q = FakeProc(proc, 703, fs)
    info = q.info(["/venv/bin/python3", "/opt/tool.py"], exe="/usr/bin/python3.11")
    assert LibraryIdentifier(str(proc)).identify(info) == UNKNOWN


def test_identify_kafka_python_from_mapped_site_packages(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    site = "/opt/conda/lib/python3.10/site-packages"
    (fs / site[1:] / "kafka_python-2.0.2.dist-info").mkdir(parents=True)
    p = FakeProc(proc, 704, fs)
    p.maps(["/opt/conda/bin/python3.10", f"{site}/_cffi_backend.cpython-310-x86_64.so"])
    got = LibraryIdentifier(str(proc)).identify(p.info(["gunicorn"], comm="gunicorn"))
    assert got == ClientLibrary("kafka-python", "2.0.2", "package")
