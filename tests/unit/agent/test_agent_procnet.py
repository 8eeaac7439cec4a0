"""/proc/net/tcp{,6} and /proc/net/snmp parsers, against files captured from this kernel."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from streaming.agent import procnet
from streaming.schema.events import TCP_STATES

FIXTURES = Path(__file__).parents[2] / "fixtures" / "agent"
STATE_NUM = {v: k for k, v in TCP_STATES.items()}


def test_proc_net_tcp_has_the_captured_sockets() -> None:
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    ports = manifest["ports"]
    recs = procnet.parse_proc_net_tcp(
        (FIXTURES / "proc_net_tcp").read_text(), socket.AF_INET, ports
    )
    recs += procnet.parse_proc_net_tcp(
        (FIXTURES / "proc_net_tcp6").read_text(), socket.AF_INET6, ports
    )
    by_tuple = {(r.src, r.sport, r.dst, r.dport): r for r in recs}
    for truth in manifest["sockets"]:
        r = by_tuple[(truth["src"], truth["sport"], truth["dst"], truth["dport"])]
        assert r.state == STATE_NUM[truth["state"]]
        assert r.inode == truth["inode"]
        assert r.idle_ms is None  # /proc has no idle times
    assert len(recs) == len(manifest["sockets"])


def test_listen_sockets_are_skipped_and_garbage_lines_ignored() -> None:
    text = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 1111 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:9C40 0200000A:2384 01 00000000:00000000 00:00000000 00000000  1000"
        "        0 2222 1 0000000000000000 20 4 30 10 -1\n"
        "   2: torn\n"
    )
    (r,) = procnet.parse_proc_net_tcp(text)
    assert (r.src, r.sport, r.dst, r.dport, r.state, r.uid, r.inode) == (
        "127.0.0.1",
        40000,
        "10.0.0.2",
        9092,
        1,
        1000,
        2222,
    )


def test_snmp_counters() -> None:
    snmp = procnet.parse_snmp((FIXTURES / "proc_net_snmp").read_text())
    tcp = snmp["Tcp"]
    assert tcp["ActiveOpens"] > 0
    assert "AttemptFails" in tcp and "CurrEstab" in tcp
    assert snmp["Ip"]["Forwarding"] in (1, 2)


def test_read_tcp_counters_missing_file(tmp_path: Path) -> None:
    assert procnet.read_tcp_counters(tmp_path) == (None, None)
