"""What the files a process has mapped say."""

from __future__ import annotations

from streaming.agent.libraries.maps import from_maps, parse_maps


def test_from_maps() -> None:
    site = "/srv/app/.venv/lib/python3.11/site-packages"
    text = "\n".join([
        "5581c6e00000-5581c6e01000 r--p 00000000 08:01 11 /usr/bin/python3.11",
        "7f1a00000000-7f1a00010000 r--p 00000000 08:01 12 /usr/lib/python3.11/lib-dynload/_json.so",
        f"7f1a00100000-7f1a00110000 r-xp 00000000 08:01 13 {site}/confluent_kafka/cimpl.so",
        f"7f1a00200000-7f1a00210000 r-xp 00000000 08:01 14 "
        f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1 (deleted)",
        f"7f1a00210000-7f1a00220000 r--p 00010000 08:01 14 "
        f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1 (deleted)",
        "7f1a00300000-7f1a00301000 rw-p 00000000 00:00 0 ",
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]",
    ])  # fmt: skip
    ranges = parse_maps(text)
    assert ranges[f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1"] == (
        "7f1a00200000-7f1a00210000"
    )
    ev = from_maps(text)
    assert ev.librdkafka == f"{site}/confluent_kafka.libs/librdkafka-0cb94173.so.1"
    assert ev.rdkafka_binding == f"{site}/confluent_kafka/cimpl.so"
    assert ev.python and not ev.jvm
    assert ev.site_dirs == (site,)

    pkg = "/app/node_modules/node-rdkafka"
    node = from_maps(
        f"7f00-7f10 r-xp 0 08:01 1 {pkg}/build/Release/node-librdkafka.node\n"
        f"7f10-7f20 r-xp 0 08:01 2 {pkg}/build/deps/librdkafka++.so.1\n"
    )
    assert node.librdkafka is None  # the C++ wrapper library is not librdkafka itself
    assert node.rdkafka_binding and node.rdkafka_binding.endswith("node-librdkafka.node")

    assert from_maps("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/librdkafka.so.1\n"
                     ).librdkafka == "/usr/lib/x86_64-linux-gnu/librdkafka.so.1"  # fmt: skip
    aio = from_maps(f"7f00-7f10 r-xp 0 08:01 1 {site}/aiokafka/record/_crecords/cutil.cpython-311"
                    "-x86_64-linux-gnu.so\n")  # fmt: skip
    assert aio.aiokafka and aio.librdkafka is None
    jvm = from_maps("7f00-7f10 r-xp 0 08:01 1 /usr/lib/jvm/java-17/lib/server/libjvm.so\n")
    assert jvm.jvm and not jvm.python
