"""The latency histograms resolve every stage, from a sub-millisecond filter to a slow generation.

Read the way a user reads them: the demo summary's p50/p95/p99 (Prometheus' ``histogram_quantile``
over the agent's buckets).
"""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.alerts.metrics import LATENCY_BUCKETS, AgentMetrics
from rag_monitor.demo.summary import quantiles_by

# (stage, low, high) in seconds: uniform durations, as fast and slow as RAG stages get.
STAGES = (("filter", 0.00005, 0.0003), ("retrieve", 0.0008, 0.004), ("rerank", 0.02, 0.08), ("generate", 1.5, 25.0))


def _exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.fixture(scope="module")
def observed():
    rng = random.Random(5)
    metrics = AgentMetrics(CollectorRegistry())
    true: dict[str, list[float]] = {name: [] for name, *_ in STAGES}
    fast_queries = []
    for _ in range(4000):
        for name, low, high in STAGES:
            seconds = rng.uniform(low, high)
            true[name].append(seconds)
            metrics.stage_duration.labels(name, "r1", "production").observe(seconds)
        # A cached answer: the query is its retrieve stage plus a little.
        retrieve = true["retrieve"][-1]
        fast_queries.append(retrieve + 0.0005)
        metrics.query_duration.labels("r1", "production").observe(fast_queries[-1])
    return metrics.registry, true


def test_every_stage_quantile_is_within_a_quarter_of_the_truth(observed):
    registry, true = observed
    estimates = quantiles_by(registry, "rag_stage_duration_seconds", "stage")
    for name, *_ in STAGES:
        for q, estimate in zip((0.5, 0.95, 0.99), estimates[name]):
            exact = _exact(true[name], q)
            assert estimate == pytest.approx(exact, rel=0.25), (name, q, estimate, exact)
    # Sub-millisecond stages are not all read as the lowest bucket's bound.
    assert estimates["filter"][1] < 0.001 and estimates["retrieve"][1] > 0.002


def test_a_query_reads_no_faster_than_its_own_releases_stage():
    """r1 answers in ~3 ms; r2 (a slow retrieval) in ~160 ms. Pooled over both, retrieve's p50
    read above r1's query p50; the summary compares each release with its own stages."""
    from rag_monitor.demo.summary import render_stages, stage_quantiles

    rng = random.Random(9)
    metrics = AgentMetrics(CollectorRegistry())
    for release, delay, n in (("r1", 0.0, 300), ("r2", 0.15, 200)):
        for _ in range(n):
            retrieve = delay + rng.uniform(0.0015, 0.0035)
            metrics.stage_duration.labels("retrieve", release, "production").observe(retrieve)
            metrics.stage_duration.labels("filter", release, "production").observe(rng.uniform(0.0001, 0.0003))
            metrics.query_duration.labels(release, "production").observe(retrieve + 0.0004)
    registry = metrics.registry
    pooled = quantiles_by(registry, "rag_stage_duration_seconds", "stage")["retrieve"]
    queries = quantiles_by(registry, "rag_query_duration_seconds", "release")
    assert pooled[0] > queries["r1"][0]  # the old table's puzzle
    stages = stage_quantiles(registry, ["r1", "r2"])
    for release in ("r1", "r2"):
        assert all(q >= r for q, r in zip(queries[release], stages[release]["retrieve"])), release
    table = "\n".join(render_stages(stages))
    row = next(line for line in table.splitlines() if line.strip().startswith("filter"))
    assert row.split()[1].startswith("0.") and "r1" in table and "r2" in table  # sub-millisecond, not "0" or "5"


def test_buckets_span_a_tenth_of_a_millisecond_to_a_minute_at_most_1_7x_apart():
    assert LATENCY_BUCKETS[0] <= 0.0001 and LATENCY_BUCKETS[-1] >= 60
    below_30s = [b / a for a, b in zip(LATENCY_BUCKETS, LATENCY_BUCKETS[1:]) if b <= 30]
    assert max(below_30s) <= 1.7
