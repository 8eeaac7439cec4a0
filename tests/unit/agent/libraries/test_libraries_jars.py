"""Java: kafka-clients jar names, java command lines, fat and shaded jars (and the
kafka-clients jars of the local stack), and JVM processes in fixture /proc trees."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from library_fakes import FakeProc, shaded_jar, write

from streaming.agent.libraries import ClientLibrary, LibraryIdentifier, evidence
from streaming.agent.libraries.jars import (
    jar_kafka_version,
    java_classpath,
    java_version_from_paths,
    properties_version,
)
from streaming.cachedir import cache_dir


@pytest.mark.parametrize(
    ("paths", "want"),
    [
        (["/opt/kafka/libs/kafka-clients-4.3.1.jar"], "4.3.1"),
        (["kafka-clients-3.9.0.jar"], "3.9.0"),
        (["/usr/share/java/kafka/kafka-clients-7.6.0-ccs.jar"], "7.6.0-ccs"),
        (["/x/kafka-clients-3.9.0-sources.jar", "/x/kafka-clients-3.9.0-test.jar"], None),
        (["/x/kafka-streams-3.9.0.jar", None, "/x/kafka_2.13-3.9.0.jar"], None),
        (["/x/my-kafka-clients-helper.jar", "/x/kafka-clients.jar"], None),
    ],
)
def test_java_version_from_paths(paths: list[str | None], want: str | None) -> None:
    assert java_version_from_paths(paths) == want


@pytest.mark.parametrize(
    ("args", "classpath", "jar"),
    [
        (["java", "-Xmx1g", "-cp", "a.jar:lib/*:/x/b.jar", "com.acme.Main", "-cp", "no.jar"],
         ["a.jar", "lib/*", "/x/b.jar"], None),
        (["java", "--class-path=/c/d.jar", "-jar", "/app/app.jar", "--spring.profiles=x"],
         ["/c/d.jar"], "/app/app.jar"),
        (["java", "--add-opens", "java.base/java.lang=ALL-UNNAMED", "-classpath", "e.jar", "M"],
         ["e.jar"], None),
        (["java", "-cp", "a.jar", "-m", "app/com.acme.App", "-cp", "b.jar"], ["a.jar"], None),
        (["java", "-jar"], [], None),
        (["java"], [], None),
    ],
)  # fmt: skip
def test_java_classpath(args: list[str], classpath: list[str], jar: str | None) -> None:
    assert java_classpath(args) == (classpath, jar)


def test_properties_version() -> None:
    assert properties_version("commitId=26b251a451ce941d\nversion=4.3.1") == "4.3.1"
    assert properties_version("# version=1\nversions=2\n") is None


def test_jar_kafka_version_shaded(tmp_path: Path) -> None:
    with shaded_jar(tmp_path / "app-all.jar").open("rb") as f:
        assert jar_kafka_version(f) == "3.7.1"


def test_jar_kafka_version_with_prepended_launch_script(tmp_path: Path) -> None:
    jar = shaded_jar(tmp_path / "app", "3.6.2", prefix=b"#!/bin/sh\nexec java -jar $0\n" * 40)
    with jar.open("rb") as f:
        assert jar_kafka_version(f) == "3.6.2"


def test_jar_kafka_version_nested_spring_boot_jar(tmp_path: Path) -> None:
    path = tmp_path / "orders.jar"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("BOOT-INF/classes/com/acme/Orders.class", bytes(100))
        z.writestr("BOOT-INF/lib/kafka-streams-3.7.0.jar", b"PK")
        z.writestr("BOOT-INF/lib/kafka-clients-3.7.0.jar", b"PK")
    with path.open("rb") as f:
        assert jar_kafka_version(f) == "3.7.0"


def test_jar_kafka_version_zip64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # zipfile writes Zip64 end records above this many entries (65535 for real).
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    with shaded_jar(tmp_path / "big.jar", "3.8.0").open("rb") as f:
        data = f.read()
        assert b"PK\x06\x06" in data
        f.seek(0)
        assert jar_kafka_version(f) == "3.8.0"


def test_jar_kafka_version_rejects(tmp_path: Path) -> None:
    assert jar_kafka_version(io.BytesIO(b"not a zip" * 100)) is None
    assert jar_kafka_version(io.BytesIO(b"")) is None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("com/acme/App.class", bytes(10))
    assert jar_kafka_version(buf) is None
    with shaded_jar(tmp_path / "x.jar").open("rb") as f:
        assert jar_kafka_version(f, max_directory=64) is None  # a directory too big to read


def test_real_kafka_clients_jars() -> None:
    """kafka-clients jars the local stack's Maven builds fetched: the version file inside
    agrees with the file name."""
    cache = cache_dir()
    jars = sorted(cache.glob("**/kafka-clients-*.jar"))[:4]
    if not jars:
        pytest.skip(f"no kafka-clients jar under {cache} (make setup fetches them)")
    for jar in jars:
        with jar.open("rb") as f:
            assert jar_kafka_version(f) == java_version_from_paths([str(jar)]), jar


def test_identify_java_from_open_jars(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 500, fs)
    p.maps(["/usr/lib/jvm/java-17/bin/java", "/usr/lib/jvm/java-17/lib/server/libjvm.so"])
    p.fds(["/dev/null", "socket:[1234]", "/opt/app/lib/guava-33.0.jar",
           "/opt/app/lib/kafka-clients-3.9.0.jar", "pipe:[55]"])  # fmt: skip
    info = p.info(["java", "-cp", "/opt/app/lib/kafka-clients-3.1.0.jar", "com.acme.Orders"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.9.0", "fd")


def test_identify_java_from_classpath(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 501, fs)
    info = p.info(["/usr/bin/java", "-Xmx512m", "-cp",
                   "/opt/kafka/config:/opt/kafka/libs/kafka-clients-4.3.1.jar", "kafka.Kafka"],
                  exe="/usr/lib/jvm/java-17/bin/java")  # fmt: skip
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary(
        "java", "4.3.1", "cmdline", "broker"
    )


def test_identify_java_from_classpath_wildcard(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "opt" / "svc" / "libs" / "kafka-clients-3.5.2.jar", b"PK")
    write(fs / "opt" / "svc" / "libs" / "slf4j-api-2.0.9.jar", b"PK")
    p = FakeProc(proc, 502, fs)
    info = p.info(["java", "-cp", "/opt/svc/conf:/opt/svc/libs/*", "com.acme.Svc"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.5.2", "cmdline")


def test_identify_java_from_fat_jar(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    shaded_jar(fs / "app" / "orders-all.jar", "3.7.1")
    p = FakeProc(proc, 503, fs)
    p.fds(["/app/orders-all.jar"])
    info = p.info(["java", "-jar", "/app/orders-all.jar"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.7.1", "jar")


def test_identify_java_from_relative_fat_jar(tmp_path: Path) -> None:
    """A relative -jar path is the process's working directory's (its root is / here)."""
    proc = tmp_path / "proc"
    shaded_jar(tmp_path / "work" / "svc.jar", "3.4.0")
    p = FakeProc(proc, 504, "/")
    p.link("cwd", tmp_path / "work")
    info = p.info(["java", "-jar", "svc.jar"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", "3.4.0", "jar")


def test_identify_java_jar_reads_are_bounded(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, fs = tree
    shaded_jar(fs / "app" / "a.jar", "3.1.0")
    shaded_jar(fs / "app" / "b.jar", "3.2.0")
    info_args = ["java", "-cp", "/app/x.jar:/app/a.jar:/app/b.jar", "com.acme.Main"]
    monkeypatch.setattr(evidence, "MAX_JARS", 2)  # x.jar (missing) and a.jar
    p = FakeProc(proc, 506, fs)
    assert LibraryIdentifier(str(proc)).identify(p.info(info_args)).version == "3.1.0"
    monkeypatch.setattr(evidence, "MAX_ZIP_BUDGET", 100)  # no directory fits
    q = FakeProc(proc, 507, fs)
    assert LibraryIdentifier(str(proc)).identify(q.info(info_args)) == ClientLibrary(
        "java", None, "jvm"
    )


def test_identify_java_without_evidence(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    p = FakeProc(proc, 505, fs)
    info = p.info(["java", "-cp", "/missing/app.jar", "com.acme.Main"])
    assert LibraryIdentifier(str(proc)).identify(info) == ClientLibrary("java", None, "jvm")
