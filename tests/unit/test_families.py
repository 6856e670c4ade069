"""The per-query metric families expose what prometheus_client's own would, for the same updates."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rag_monitor.alerts.families import LeanCounter, LeanHistogram
from rag_monitor.alerts.metrics import LATENCY_BUCKETS, AgentMetrics


def samples(registry: CollectorRegistry, name: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples
            if s.name.startswith(name) and not s.name.endswith("_created")}


def test_a_histogram_buckets_and_sums_as_prometheus_client_does():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    lean = LeanHistogram("x_seconds", "X.", ["stage"], buckets=LATENCY_BUCKETS, registry=ours)
    reference = Histogram("x_seconds", "X.", ["stage"], buckets=LATENCY_BUCKETS, registry=theirs)
    # on a bound (le: counted in it), between bounds, below the first, above the last, zero
    values = [0.0, 0.00005, 0.0001, 0.00012, 0.05, 0.3, 1.0, 59.9, 60.0, 61.0, 1e9]
    for i, v in enumerate(values):
        for family in (lean, reference):
            family.labels("retrieve" if i % 2 else "generate").observe(v)
    lean.labels(stage="filter")  # created at 0 on first use, like prometheus_client's
    reference.labels(stage="filter")
    assert samples(ours, "x_seconds") == samples(theirs, "x_seconds")
    assert samples(ours, "x_seconds")[("x_seconds_count", (("stage", "filter"),))] == 0
    exposed = generate_latest(ours).decode()
    assert 'x_seconds_bucket{le="0.0001",stage="generate"} 2.0' in exposed  # 0.0 and 0.0001
    assert 'x_seconds_bucket{le="+Inf",stage="retrieve"} 5.0' in exposed


def test_a_counter_counts_as_prometheus_client_does():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    lean = LeanCounter("y_total", "Y.", ["kind", "model"], registry=ours)
    reference = Counter("y_total", "Y.", ["kind", "model"], registry=theirs)
    for family in (lean, reference):
        family.labels("prompt", "m").inc(120)
        family.labels(kind="completion", model="m").inc()
        family.labels("prompt", "m").inc(0.5)
    assert samples(ours, "y") == samples(theirs, "y") and len(samples(ours, "y")) == 2
    with pytest.raises(ValueError, match="non-negative"):
        lean.labels("prompt", "m").inc(-1)
    with pytest.raises(ValueError, match="2 label values expected, got 1"):
        lean.labels("prompt")
    with pytest.raises(ValueError, match="Duplicated timeseries"):  # the registry still sees the names
        Counter("y_total", "again", registry=ours)


def test_concurrent_updates_are_not_lost():
    registry = CollectorRegistry()
    counter = LeanCounter("z_total", "Z.", ["k"], registry=registry)
    histogram = LeanHistogram("z_seconds", "Z.", ["k"], buckets=(0.1, 1.0), registry=registry)

    def work():
        for _ in range(20_000):
            counter.labels("a").inc()
            histogram.labels("a").observe(0.5)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.get_sample_value("z_total", {"k": "a"}) == 80_000
    assert registry.get_sample_value("z_seconds_bucket", {"k": "a", "le": "1.0"}) == 80_000
    assert registry.get_sample_value("z_seconds_sum", {"k": "a"}) == 40_000


def test_the_agent_uses_them_for_what_it_counts_per_query():
    metrics = AgentMetrics()
    assert isinstance(metrics.queries, LeanCounter) and isinstance(metrics.stage_duration, LeanHistogram)
    metrics.stage_duration.labels("retrieve", "r1", "production").observe(0.02)
    assert metrics.registry.get_sample_value(
        "rag_stage_duration_seconds_bucket", {"stage": "retrieve", "release": "r1", "variant": "production", "le": "0.02"}) == 1
