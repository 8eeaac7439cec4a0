"""Time to file descriptor exhaustion, measured: a real process with a soft limit of 256 leaks
CLOSE_WAIT sockets toward a real broker that reaps its idle connections, until socket() fails
with EMFILE. The real agent watches it; the job's replay windows its events; the prediction
made when half the headroom was used must be within 25% of the time really left."""

from __future__ import annotations

import json

from fd_leak import BROKER_OVERRIDES, leak_until_emfile, prediction_at_half

from streaming.detectors.config import DetectorConfig
from streaming.job.pipeline import replay

CFG = DetectorConfig().replace(window_s=10.0, watermark_s=10.0)


def test_the_time_to_emfile_is_predicted_within_a_quarter(kafka_cluster_factory, spark, tmp_path):
    cluster = kafka_cluster_factory(overrides=BROKER_OVERRIDES)
    run = leak_until_emfile(cluster, tmp_path, rate_per_s=2.0, limit=256)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run.events))
    result = replay(spark, str(tmp_path / "in"), CFG)
    p = prediction_at_half(result.aggregates, run, CFG)
    assert p.error <= 0.25, p
    # The finding the job published before EMFILE says so, and is critical by then.
    mine = [f for f in result.findings if f["app"] == "fd-leaker" and f["side"] == "client"]
    assert any(f["severity"] == "critical" and "file descriptors" in f["summary"] for f in mine)
