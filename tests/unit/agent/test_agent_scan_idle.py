"""Between scans the agent serves its sink only while the sink has something in flight."""

from __future__ import annotations

import pytest

from streaming.agent import config
from streaming.agent.collector import Collector
from streaming.agent.metrics import AgentMetrics
from streaming.agent.procs import ProcessTable
from streaming.agent.runner import Agent, make_refresher


class CountingSink:
    def __init__(self, busy: bool | None) -> None:
        self.pumps = 0
        if busy is not None:
            self.busy = lambda: busy

    def send(self, e: dict) -> None:
        pass

    def pump(self) -> None:
        self.pumps += 1


@pytest.mark.parametrize(("busy", "fewest", "most"), [(None, 4, 8), (True, 4, 8), (False, 3, 3)])
def test_the_sink_is_pumped_between_scans_only_while_busy(tmp_path, busy, fewest, most) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "snmp").write_text("Tcp: ActiveOpens AttemptFails\nTcp: 1 0\n")
    cfg = config.build(
        {"clusters": [{"name": "local", "endpoints": ["127.0.0.1:9092"]}]},
        flags={"proc_root": str(tmp_path), "host": "web-1", "scan_interval_s": 0.5},
    )
    m = AgentMetrics()
    sink = CountingSink(busy)
    agent = Agent(
        cfg,
        sink,
        m,
        make_refresher(cfg, m),
        collector=Collector("netlink", str(tmp_path), netlink_dump=lambda ports: []),
        procs=ProcessTable(tmp_path),
    )
    agent.run(max_scans=2)
    # One pump at the end of each scan, and in the 0.5 s between them one every 0.2 s while
    # busy (a sink without busy() counts as busy), or a single one.
    assert fewest <= sink.pumps <= most
