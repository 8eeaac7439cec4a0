"""The fast /metrics renderer yields exactly the samples of the client_python collector."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.exporter.collector import ConnmonCollector
from streaming.exporter.consumer import handle
from streaming.exporter.render import Renderer
from streaming.exporter.samples import NOW, aggregate, finding, status
from streaming.exporter.store import Store


def _samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _types(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_renderer_matches_the_collector(clock) -> None:
    store = Store(clock=clock, series_limit=5)
    handle(store, "aggregates", b"a", aggregate(), "x")
    odd = aggregate(side="broker", app="kafka-broker", peer_host="10.0.0.7", host='we"ird\\h')
    handle(store, "aggregates", b"b", odd, "x")
    handle(store, "aggregates", b"c", aggregate(host="c", close_wait_slope_per_s=None), "x")
    fired = finding(updated=clock.t, change="fired", first_fired_at="t0")
    handle(store, "findings", b"f", fired, "x")
    handle(store, "job_status", b"j", status(), "x")
    handle(store, "aggregates", b"d", aggregate(end=NOW - 6, host="over-the-limit"), "x")
    handle(store, "aggregates", b"bad", b"nope", "x")
    registry = CollectorRegistry()
    registry.register(ConnmonCollector(store))
    reference = generate_latest(registry).decode()
    fast = Renderer().render(store.snapshot())
    ref, got = _samples(reference), _samples(fast)
    assert len(ref) > 50
    assert ref.keys() == got.keys()
    for key, value in ref.items():
        assert math.isclose(value, got[key]), key
    assert _types(reference) == _types(fast)
    slopes = {dict(k[1])["host"] for k in got if k[0] == "connmon_close_wait_slope_per_second"}
    assert slopes == {"web-1", 'we"ird\\h'}  # host c's slope is unknown: no sample
    job = 'job_id="connmon-job",query="ingest"'
    assert f'connmon_job_host_clock_offset_seconds{{{job},host="web-7"}} 181.4' in fast
    assert "connmon_job_host_clock_offset_seconds{" + job + ',host="web-9"}' not in fast
    assert f'connmon_job_host_late_events_total{{{job},host="web-9"}} 12.0' in fast
    assert f'connmon_job_host_skewed_events_total{{{job},host="web-7"}} 5520.0' in fast
    fired = (
        'connmon_findings_fired_total{kind="close_wait_buildup",severity="critical",shard="0"} 1.0'
    )
    assert fired in fast


def test_client_library_info_matches_the_collector(clock) -> None:
    store = Store(clock=clock)
    handle(store, "aggregates", b"a", aggregate(), "x")
    lib = aggregate(host="lib", client_library="sarama", client_version="v1.43.2")
    handle(store, "aggregates", b"l", lib, "x")
    registry = CollectorRegistry()
    registry.register(ConnmonCollector(store))
    ref = _samples(generate_latest(registry).decode())
    got = _samples(Renderer().render(store.snapshot()))
    assert ref.keys() == got.keys()
    libraries = [dict(k[1]) for k in got if k[0] == "connmon_client_library_info"]
    assert [(x["host"], x["client_library"], x["client_version"]) for x in libraries] == [
        ("lib", "sarama", "1.43.2")
    ]


def test_expired_series_leave_the_label_cache(clock) -> None:
    store = Store(clock=clock, staleness_s=10)
    r = Renderer()
    for i in range(1200):
        handle(store, "aggregates", str(i).encode(), aggregate(host=f"h{i}"), "x")
    assert "h1199" in r.render(store.snapshot())
    clock.t += 100
    r.render(store.snapshot())
    assert r._labels == {}


def test_unchanged_sections_are_reused_and_changes_are_served(clock) -> None:
    store = Store(clock=clock)
    r = Renderer()
    handle(store, "aggregates", b"a", aggregate(close_wait_count=3), "x")
    handle(store, "findings", b"f", finding(), "x")
    first = r.parts(store.snapshot())
    handle(store, "job_status", b"j", status(), "x")  # only the small tail changes
    second = r.parts(store.snapshot())
    assert first[0] is second[0] and first[1] is second[1]
    assert b"connmon_job_batch_input_rows" in second[2].data
    handle(store, "aggregates", b"a", aggregate(sockets={"CLOSE_WAIT": 8}), "x")
    third = r.parts(store.snapshot())
    assert third[0] is not second[0] and third[1] is second[1]
    assert b'state="CLOSE_WAIT"} 8.0' in third[0].data
    assert _samples(r.render(store.snapshot())) == _samples(_reference(store))


def test_a_new_renderer_or_store_never_reuses_another_stores_sections(clock) -> None:
    r = Renderer()
    a, b = Store(clock=clock), Store(clock=clock)
    handle(a, "aggregates", b"a", aggregate(host="only-in-a"), "x")
    assert "only-in-a" in r.render(a.snapshot())
    assert "only-in-a" not in r.render(b.snapshot())


def _reference(store: Store) -> str:
    registry = CollectorRegistry()
    registry.register(ConnmonCollector(store))
    return generate_latest(registry).decode()


def test_every_gauge_the_parser_writes_has_a_section() -> None:
    """The renderer sorts gauges into per-metric sections; a gauge without one would fail."""
    from streaming.exporter import parse
    from streaming.exporter.render import SIMPLE_AGGREGATES

    written = {name for name, _ in parse._AGES + parse._COUNTS + parse._RATES}
    written |= {"connmon_close_wait_slope_per_second", parse.FD_USAGE}
    assert written <= set(SIMPLE_AGGREGATES)
