"""Kafka's own processes among JVMs: main classes, a broker's process.roles, Streams by its
jar (open, on the class path, inside a fat jar), never for Kafka's own tools."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from library_fakes import FakeProc, write

from streaming.agent.libraries import LibraryIdentifier
from streaming.agent.libraries.jars import java_command
from streaming.agent.libraries.roles import role_of, server_role, streams_in_jar

KAFKA_CP = "/opt/kafka/libs/kafka-clients-4.1.1.jar:/opt/kafka/libs/kafka-streams-4.1.1.jar"


@pytest.mark.parametrize(
    ("args", "open_jars", "role"),
    [
        (["java", "-cp", KAFKA_CP, "kafka.Kafka", "/cfg/server.properties"], [], "broker"),
        (["java", "-cp", KAFKA_CP, "org.apache.kafka.connect.cli.ConnectDistributed",
          "w.properties"], [], "connect"),
        (["java", "-cp", KAFKA_CP, "org.apache.kafka.connect.cli.ConnectStandalone", "w"], [],
         "connect"),
        (["java", "-cp", KAFKA_CP, "org.apache.kafka.connect.mirror.MirrorMaker", "mm2.props"],
         [], "mirrormaker"),
        # Kafka's own tools carry every jar of the distribution, Streams' included
        (["java", "-cp", KAFKA_CP, "org.apache.kafka.tools.consumer.ConsoleConsumer"],
         ["/opt/kafka/libs/kafka-streams-4.1.1.jar"], None),
        (["java", "-cp", KAFKA_CP, "kafka.admin.ConfigCommand"], [], None),
        # an application with the Streams jar: on its class path, open, or Kafka's examples
        (["java", "-cp", "/app/lib/kafka-streams-3.9.0.jar", "com.acme.Enricher"], [],
         "streams"),
        (["java", "-cp", "/app/lib/*", "com.acme.Enricher"], ["/app/lib/kafka-streams-3.9.0.jar"],
         "streams"),
        (["java", "-cp", KAFKA_CP, "org.apache.kafka.streams.examples.wordcount.WordCountDemo"],
         [], "streams"),
        # a plain client application
        (["java", "-cp", "/app/lib/kafka-clients-3.9.0.jar", "com.acme.Orders"], [], None),
        (["java", "-jar", "/app/orders.jar"], [], None),
    ],
)  # fmt: skip
def test_role_from_the_command_line_and_open_jars(args, open_jars, role):
    assert role_of(java_command(args), open_jars, lambda path: None) == role


@pytest.mark.parametrize(
    ("properties", "args", "role"),
    [
        (None, [], "broker"),
        ("process.roles=broker,controller\n", [], "broker"),
        ("node.id=3\nprocess.roles = controller\n", [], "controller"),
        ("process.roles=broker\n", ["--override", "process.roles=controller"], "controller"),
        ("process.roles=controller\n", ["--override", "node.id=1"], "controller"),
        ("# process.roles=controller\n", [], "broker"),
    ],
)
def test_a_kraft_controller_is_told_from_a_broker(properties, args, role):
    assert server_role(properties, args) == role


def _jar(entries: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in entries:
            z.writestr(name, b"x")
    return buf.getvalue()


def test_streams_inside_a_fat_jar_shaded_or_nested():
    def directory(entries: list[str]) -> bytes:
        data = _jar(entries)
        return data[data.rfind(b"PK\x01\x02") - 200 :]

    assert streams_in_jar(directory(["BOOT-INF/lib/kafka-streams-3.9.0.jar"]))
    assert streams_in_jar(directory(["shaded/org/apache/kafka/streams/KafkaStreams.class"]))
    assert not streams_in_jar(directory(["BOOT-INF/lib/kafka-clients-3.9.0.jar"]))


def test_identification_reads_the_brokers_properties_as_the_process_sees_them(
    tree: tuple[Path, Path],
) -> None:
    proc, fs = tree
    write(fs / "etc/kafka/controller.properties", "process.roles=controller\nnode.id=9\n")
    p = FakeProc(proc, 600, fs)
    info = p.info(["java", "-cp", KAFKA_CP, "kafka.Kafka", "/etc/kafka/controller.properties"])
    assert LibraryIdentifier(str(proc)).identify(info).role == "controller"


def test_a_fat_jar_streams_application_is_streams(tree: tuple[Path, Path]) -> None:
    proc, fs = tree
    write(fs / "app/enricher.jar", _jar([
        "BOOT-INF/lib/kafka-streams-3.9.0.jar", "BOOT-INF/lib/kafka-clients-3.9.0.jar",
    ]))  # fmt: skip
    p = FakeProc(proc, 601, fs)
    lib = LibraryIdentifier(str(proc)).identify(p.info(["java", "-jar", "/app/enricher.jar"]))
    assert (lib.name, lib.version, lib.role) == ("java", "3.9.0", "streams")
