"""``connmon job --describe``: the topology names what the settings say, and starts nothing."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from streaming.job.settings import JobSettings
from streaming.job.topology import describe
from streaming.schema.findings import KINDS

ROOT = Path(__file__).resolve().parents[3]


def test_the_topology_names_every_topic_checkpoint_and_the_state():
    s = JobSettings(
        checkpoint="s3a://bucket/connmon/",
        events_topic="prod.events",
        partials_topic="prod.partials",
        aggregates_topic="prod.aggregates",
        findings_topic="prod.findings",
        deadletter_topic="prod.dead",
        status_topic="prod.status",
        state_buckets=64,
        state_max_series_per_bucket=500,
        max_offsets_per_trigger=1000,
    ).validate()
    text = describe(s)
    for name in ("prod.events", "prod.partials", "prod.aggregates", "prod.findings", "prod.dead"):
        assert f"Kafka topic {name} " in text, name
    assert "-> Kafka topic prod.status " in text
    assert "checkpoint s3a://bucket/connmon/ingest" in text
    assert "checkpoint s3a://bucket/connmon/state" in text
    assert "over 64 buckets" in text and "at most 500 series" in text
    assert "at most 1000 records a batch" in text
    assert all(kind in text for kind in KINDS)
    # The partials topic is the ingest query's sink and the state query's source.
    assert text.index("Sink: Kafka topic prod.partials") < text.index("Query state")
    assert text.index("Source: Kafka topic prod.partials") > text.index("Query state")
    assert "temporary folder" in describe(JobSettings())


def test_the_documented_command_prints_it_without_spark_and_a_wrong_setting_is_named():
    """The command as docs/job.md gives it."""
    (doc,) = re.findall(r"`connmon (job --describe [^`]*)`", (ROOT / "docs/job.md").read_text())
    run = [sys.executable, "-m", "streaming", *shlex.split(doc)]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "over 1024 buckets" in ok.stdout and "pyspark" not in ok.stderr.lower()
    assert "checkpoint s3a://connmon/ckpt/state" in ok.stdout
    run = [sys.executable, "-m", "streaming", "job", "--describe"]
    bad = subprocess.run([*run, "--state-buckets", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "state-buckets" in bad.stderr
