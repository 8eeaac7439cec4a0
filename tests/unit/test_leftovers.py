"""The end-of-session check (tests/leftovers.py) on a fake /proc tree."""

from __future__ import annotations

import os
from pathlib import Path

import leftovers

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt  uid inode\n"


def _process(proc: Path, pid: int, env: dict[str, str], cmd: list[str]) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (d / "cmdline").write_bytes(b"\0".join(c.encode() for c in cmd) + b"\0")


def _tcp_line(local: str, remote: str, state: str, inode: int) -> str:
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000 0 0 {inode}\n"


def test_finds_the_processes_with_the_sessions_marker_only(tmp_path: Path) -> None:
    _process(tmp_path, 10, {"A": "1", leftovers.MARKER: "tok"}, ["sleep", "1000"])
    _process(tmp_path, 11, {leftovers.MARKER: "other"}, ["sleep", "2"])  # another session
    _process(tmp_path, 12, {"A": "1"}, ["bash"])
    _process(tmp_path, 13, {leftovers.MARKER: "tok"}, ["pytest"])  # the session itself
    (tmp_path / "self").mkdir()  # not a pid
    found = leftovers.marked_processes("tok", tmp_path, skip={13})
    assert [str(f) for f in found] == ["process: pid 10: sleep 1000"]


def test_finds_the_open_connections_of_the_process(tmp_path: Path) -> None:
    me = tmp_path / "self"
    (me / "fd").mkdir(parents=True)
    (me / "net").mkdir()
    for fd, target in ((3, "socket:[100]"), (4, "socket:[101]"), (5, "socket:[102]"), (6, "/x")):
        os.symlink(target, me / "fd" / str(fd))
    (me / "net" / "tcp").write_text(
        HEADER
        + _tcp_line("0100007F:A1B2", "0100007F:238C", "01", 100)  # established, ours
        + _tcp_line("0100007F:238C", "00000000:0000", "0A", 101)  # listening: not counted
        + _tcp_line("0100007F:A1B3", "0100007F:238C", "08", 102)  # close-wait, ours
        + _tcp_line("0100007F:A1B4", "0100007F:238C", "01", 555)  # another process's
    )
    found = [str(f) for f in leftovers.open_connections("self", tmp_path)]
    assert found == [
        "connection: ESTABLISHED 127.0.0.1:41394 -> 127.0.0.1:9100",
        "connection: CLOSE_WAIT 127.0.0.1:41395 -> 127.0.0.1:9100",
    ]


def test_find_waits_for_a_leftover_to_go_then_reports_nothing(tmp_path: Path) -> None:
    (tmp_path / "self" / "fd").mkdir(parents=True)
    calls = []

    def clients() -> list[leftovers.Leftover]:
        calls.append(1)
        return [leftovers.Leftover("kafka client", "p")] if len(calls) < 3 else []

    assert leftovers.find("tok", tmp_path, grace_s=5, clients=clients) == []
    assert len(calls) == 3
    late = leftovers.find(
        "tok", tmp_path, grace_s=0, clients=lambda: [leftovers.Leftover("k", "c")]
    )
    assert [str(f) for f in late] == ["k: c"]


def test_a_live_kafka_client_is_found_until_it_is_dropped() -> None:
    from confluent_kafka.admin import AdminClient

    before = len(leftovers.kafka_clients())  # other tests' clients may be alive yet
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    assert len(leftovers.kafka_clients()) == before + 1
    del admin
    assert len(leftovers.kafka_clients()) == before
