"""The exporter fed by real topics in a real KRaft broker, scraped by a real Prometheus that
evaluates the generated alert and recording rules: a finding must fire its alert. (Every
committed dashboard query and rule expression runs against the local stack in
test_stack_alerting.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from exporter_feed import feed, produce

from streaming.exporter import samples
from streaming.mixin import build
from streaming.mixin.alerts import alert_rules
from streaming.mixin.config import DEFAULT
from streaming.mixin.rules import FINDINGS, recording_rules
from streaming.schema.times import iso
from streaming.stack.ports import free_port
from streaming.stack.prometheus import connmon_jobs

# `python -m streaming.cli` would load the CLI module twice (as __main__ and as streaming.cli),
# so ConfigError would not be caught; run the CLI the way the console script does.
CLI = [sys.executable, "-c", "import sys; from streaming.cli import main; sys.exit(main())"]

TEST_CFG = DEFAULT.replace(
    finding_for="1s",
    job_stalled_for="1s",
    clock_skew_for="1s",
    rate_window="1m",
    rollup_interval=None,  # the test Prometheus evaluates every rule group often
)


class Exporter:
    """``connmon exporter`` as its own process."""

    def __init__(
        self, bootstrap: str, topics: dict[str, str], log: Path, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        cmd = [
            *CLI, "exporter",
            "--bootstrap-servers", bootstrap, "--listen", f"127.0.0.1:{self.port}",
            "--aggregates-topic", topics["aggregates"], "--findings-topic", topics["findings"],
            "--status-topic", topics["job_status"], "--staleness", "600", *extra,
        ]  # fmt: skip
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                cwd=build.ROOT,
            )  # fmt: skip

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as r:
            return r.read().decode()

    def wait_for(self, *needles: str, timeout_s: float = 60) -> str:
        """The first scrape that serves every one of ``needles``."""
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "exporter exited"
            try:
                text = self.scrape()
                if all(n in text for n in needles):
                    return text
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"{needles!r} not served within {timeout_s}s:\n{text[-2000:]}")

    def wait_for_all(self, sent: dict[str, int]) -> str:
        """The first scrape once every message ``sent`` (role -> count) is read and applied."""
        return self.wait_for(
            *(f'connmon_exporter_messages_total{{topic="{r}"}} {n}.0' for r, n in sent.items())
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@pytest.fixture
def topics(kafka_cluster, unique_name) -> dict[str, str]:
    from streaming.stack.kafka import create_topics

    names = {role: f"{unique_name}-{role}" for role in ("aggregates", "findings", "job_status")}
    create_topics(
        kafka_cluster.bootstrap_servers,
        {n: 2 for n in names.values()},
        config={"cleanup.policy": "compact"},
    )
    return names


@pytest.fixture
def exporters(kafka_cluster, topics, tmp_path) -> Iterator:
    started: list[Exporter] = []

    def start(*extra: str) -> Exporter:
        e = Exporter(kafka_cluster.bootstrap_servers, topics, tmp_path / "exporter.log", extra)
        started.append(e)
        return e

    try:
        yield start
    finally:
        for e in started:
            e.stop()


def _rule_files(tmp_path: Path) -> list[Path]:
    files = []
    for name, doc in (("alerts", alert_rules(TEST_CFG)), ("rules", recording_rules(TEST_CFG))):
        path = tmp_path / f"{name}.yaml"
        path.write_text(build.dump_yaml(doc))
        files.append(path)
    return files


def test_exporter_to_prometheus_dashboards_and_alerts(
    kafka_cluster, topics, exporters, prometheus_factory, tmp_path
) -> None:
    sent = feed(kafka_cluster.bootstrap_servers, topics)
    exporter = exporters()
    text = exporter.wait_for_all(sent)
    assert 'connmon_job_dead_letter_events_total{job_id="connmon-job"' in text
    assert 'kind="idle_churn"' in text
    assert 'kind="idle_zombie"' not in text  # resolved in the same topic
    assert (
        _sample(
            text,
            "connmon_exporter_invalid_messages_total",
            topic="aggregates",
            reason="malformed_json",
        )
        == 1
    )
    assert ":9092" not in text  # no endpoint with a port in any label
    host_labels = 'job_id="connmon-job",query="ingest",host="web-9"'
    exporter.wait_for(f"connmon_job_host_clock_offset_seconds{{{host_labels}}} -150.0")
    assert f"connmon_job_host_late_events_total{{{host_labels}}} 12.0" in exporter.scrape()

    # Fired before the exporter started: not counted again; fired since: counted.
    storm = "connection_storm|client:web-2:orders-consumer|local|2"
    later = time.time()
    fired = {"change": "fired", "first_fired_at": iso(later - 60)}
    produce(
        kafka_cluster.bootstrap_servers,
        topics["findings"],
        [(storm.encode(), samples.finding(updated=later, kind="connection_storm", **fired))],
    )
    text = exporter.wait_for('connmon_findings_fired_total{kind="connection_storm"')
    assert _sample(text, "connmon_findings_fired_total", kind="connection_storm") == 1
    assert _sample(text, "connmon_findings_fired_total", kind="close_wait_buildup") is None

    prom = prometheus_factory(
        connmon_jobs(exporters=[f"127.0.0.1:{exporter.port}"]), _rule_files(tmp_path)
    )
    prom.wait_for('connmon_sockets{host="web-1", state="CLOSE_WAIT"} == 25', timeout_s=60)

    # An active finding fires its alert in the real Prometheus (for: 1s in the test config).
    firing = prom.wait_for(
        'ALERTS{alertname="ConnMonCloseWaitBuildup", alertstate="firing"}', timeout_s=60
    )
    assert firing[0]["metric"]["severity"] == "critical"
    assert firing[0]["metric"]["broker_id"] == "2"
    alerts = {a["labels"]["alertname"]: a for a in prom.alerts()}
    assert alerts["ConnMonCloseWaitBuildup"]["annotations"]["runbook_url"].endswith(
        "#connmonclosewaitbuildup"
    )
    assert "ConnMonIdleZombie" not in alerts  # resolved finding
    skewed = prom.wait_for(
        'ALERTS{alertname="ConnMonHostClockSkew", alertstate="firing"}', timeout_s=60
    )
    assert {a["metric"]["host"] for a in skewed} == {"web-7", "web-9"}
    assert "ConnMonJobStalled" not in alerts  # the job reported a batch just now

    # Recording rules have evaluated; counters have two samples for rate().
    prom.wait_for(f'{FINDINGS}{{kind="idle_churn"}}', timeout_s=30)
    prom.wait_for("rate(connmon_exporter_messages_total[1m])", timeout_s=30)


def _sample(text: str, name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def test_restart_restores_current_values_from_compacted_topics(
    kafka_cluster, topics, exporters
) -> None:
    sent = feed(kafka_cluster.bootstrap_servers, topics)
    first = exporters()
    before = _values(first.wait_for_all(sent))
    first.stop()
    second = exporters()
    after = _values(second.wait_for_all(sent))
    kept = ("connmon_sockets", "connmon_close_wait", "connmon_finding")
    picked = [k for k in before if k.startswith(kept)]
    assert picked and {k: before[k] for k in picked} == {k: after.get(k) for k in picked}


def test_a_replay_at_the_series_limit_serves_the_newest_series(
    kafka_cluster, topics, exporters
) -> None:
    """On a (re)start the compacted topic is read oldest first; the newest series must win."""
    now = time.time()
    produce(
        kafka_cluster.bootstrap_servers,
        topics["aggregates"],
        [
            (f"client|h{i}|app|2".encode(), samples.aggregate(end=now - 300 + 10 * i, host=f"h{i}"))
            for i in range(30)
        ],
    )
    exporter = exporters("--series-limit", "10")
    text = exporter.wait_for('connmon_exporter_messages_total{topic="aggregates"} 30.0')
    served = {
        line.split('host="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("connmon_max_idle_seconds{")
    }
    assert served == {f"h{i}" for i in range(20, 30)}
    assert _sample(text, "connmon_exporter_series_dropped_total") == 20


def _values(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("connmon_") and not line.startswith("connmon_exporter"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_wrong_setting_fails_at_start_naming_it(tmp_path) -> None:
    proc = subprocess.run(
        [*CLI, "exporter", "--staleness", "-1"],
        capture_output=True, text=True, cwd=build.ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "staleness" in proc.stderr


def test_json_dashboards_are_valid_json() -> None:
    for path in (build.ROOT / "dashboards/out").glob("*.json"):
        json.loads(path.read_text())


def _served(text: str, metric: str) -> list[str]:
    """Hosts of the series (or findings) in one scrape, one entry per sample."""
    return [
        line.split('host="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith(metric + "{")
    ]


def _shard_sets(shards: list[Exporter], hosts: set[str], metric: str) -> list[list[str]]:
    """What each shard serves once together they serve every host and nothing changes for a
    second (a shard still reading would otherwise go unnoticed)."""
    deadline = time.monotonic() + 60
    last: list[list[str]] | None = None
    while True:
        texts = []
        for e in shards:
            assert e.proc.poll() is None, "exporter exited"
            try:
                texts.append(e.scrape())
            except OSError:
                texts.append("")
        got = [sorted(_served(t, metric)) for t in texts]
        complete = all(texts) and {h for g in got for h in g} >= hosts
        if (complete and got == last) or time.monotonic() > deadline:
            return got
        last = got if complete else None
        time.sleep(1.0)


def test_shards_serve_every_series_exactly_once_across_restarts_and_a_resize(
    kafka_cluster, topics, exporters
) -> None:
    from streaming.schema.aggregates import client_id, series_key
    from streaming.schema.findings import finding_key

    now = time.time()
    hosts = [f"h{i:02d}" for i in range(60)]
    firing = set(hosts[::10])
    ident = {h: ("client", h, "orders-consumer", "local", "2", None) for h in hosts}
    produce(
        kafka_cluster.bootstrap_servers,
        topics["aggregates"],
        [(series_key(*ident[h]).encode(), samples.aggregate(end=now, host=h)) for h in hosts],
    )
    produce(
        kafka_cluster.bootstrap_servers,
        topics["findings"],
        [
            (
                finding_key("close_wait_buildup", client_id("client", h, "orders-consumer", None),
                            "local", "2").encode(),
                samples.finding(updated=now, host=h),
            )
            for h in sorted(firing)
        ],
    )  # fmt: skip
    three = [exporters("--shards", "3", "--shard-index", str(i)) for i in (0, 1)]
    three.append(exporters("--shards", "3", "--shard-index", "connmon-exporter-2"))

    series = _shard_sets(three, set(hosts), "connmon_max_idle_seconds")
    assert sorted(h for s in series for h in s) == hosts  # all served, none twice
    assert all(series), "each shard serves a share"
    findings = _shard_sets(three, firing, "connmon_finding_active")
    assert sorted(h for f in findings for h in f) == sorted(firing)
    for shard_series, shard_findings in zip(series, findings, strict=True):
        assert set(shard_findings) <= set(shard_series)  # a finding goes with its series

    # A shard killed and started again serves the same share.
    os.killpg(three[1].proc.pid, signal.SIGKILL)
    three[1].proc.wait(10)
    three[1] = exporters("--shards", "3", "--shard-index", "1")
    again = _shard_sets(three, set(hosts), "connmon_max_idle_seconds")
    assert again[1] == series[1]
    assert sorted(h for s in again for h in s) == hosts

    # Three shards become four: every series once again.
    for e in three:
        e.stop()
    four = [exporters("--shards", "4", "--shard-index", str(i)) for i in range(4)]
    resized = _shard_sets(four, set(hosts), "connmon_max_idle_seconds")
    assert sorted(h for s in resized for h in s) == hosts
    refound = _shard_sets(four, firing, "connmon_finding_active")
    assert sorted(h for f in refound for h in f) == sorted(firing)
