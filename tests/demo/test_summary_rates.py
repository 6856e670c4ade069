"""The demo summary's unsupported-rate line: the three rates side by side, read from the gauges the
agent exports (never mixed: each names its basis)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from rag_monitor.demo.summary import _three_ways
from rag_monitor.review.unsupported import UnsupportedRateCollector


class Exported(Collector):
    def collect(self):
        fam = UnsupportedRateCollector.families()
        key = ["r2", "production", "support-v1"]
        for bound, v in (("estimate", 0.31), ("lower", 0.24), ("upper", 0.38)):
            fam["ppi"].add_metric([*key, bound], v)
            fam["human"].add_metric([*key, bound], v + 0.02 if bound == "estimate" else v + (-0.05 if bound == "lower" else 0.05))
        fam["labels"].add_metric(key, 42)
        fam["ppi"].add_metric(["r2", "shadow", "support-v1", "estimate"], 0.9)  # a shadow candidate: not this line
        yield from fam.values()


def test_the_summary_shows_humans_only_and_prediction_powered_with_the_labels():
    registry = CollectorRegistry()
    registry.register(Exported())
    assert _three_ways(registry, "r2") == "humans only  33% [ 19%,  43%], prediction-powered  31% [ 24%,  38%] (42 labels)"
    assert _three_ways(registry, "r1") == "humans only -, prediction-powered - (0 labels)"
