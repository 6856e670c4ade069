"""Drift gauges: the page decision (not one p-value), the evidence, and the top cluster info series."""

from __future__ import annotations

import math
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from rag_monitor.agent.drift.export import DriftExporter
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.detectors.profiles import DriftProfile

PROFILE = DriftProfile("query-mmd", "query_embedding", "mmd")


def run(decision: bool, p_value: float, example: str | None, finished: float = 100.0):
    over = [{"cluster": 3, "current": 120, "reference": 8, "current_share": 0.12, "reference_share": 0.004, "z": 9.0,
             "examples": [{"trace_id": "a" * 32, "query": example}]}] if example is not None else []
    result = {"status": "done", "statistic": 0.01, "p_value": p_value, "decision": decision, "log_evidence": 9.5,
              "page_threshold": 7200.0, "n_reference": 2000, "n_current": 1000, "changes": {"over": over, "under": []}}
    return SimpleNamespace(result=result, finished_at=finished, started_at=finished - 1)


def test_gauges_follow_the_decision_and_the_top_cluster():
    registry = CollectorRegistry()
    exporter = DriftExporter(AgentMetrics(registry))
    labels = {"signal": "query_embedding", "detector": "mmd"}
    exporter.export(PROFILE, run(decision=False, p_value=0.001, example=None))
    assert registry.get_sample_value("rag_drift_detected", labels) == 0  # a small p-value alone is no page
    assert registry.get_sample_value("rag_drift_p_value", labels) == 0.001
    assert registry.get_sample_value("rag_drift_evidence_threshold", labels) == math.log(7200)

    exporter.export(PROFILE, run(decision=True, p_value=0.003, example="how   do I buy bitcoin " + "x" * 100))
    assert registry.get_sample_value("rag_drift_detected", labels) == 1
    assert registry.get_sample_value("rag_drift_evidence", labels) == 9.5
    info = [s for s in registry.collect() if s.name == "rag_drift_top_cluster_info"][0].samples
    assert len(info) == 1 and info[0].labels["direction"] == "over"
    assert info[0].labels["example"].startswith("how do I buy bitcoin x") and len(info[0].labels["example"]) == 80
    assert (info[0].labels["current_share"], info[0].labels["reference_share"]) == ("0.120", "0.004")

    exporter.export(PROFILE, run(decision=True, p_value=0.003, example="card not arrived"))
    info = [s for s in registry.collect() if s.name == "rag_drift_top_cluster_info"][0].samples
    assert [s.labels["example"] for s in info] == ["card not arrived"]  # the previous cluster's series is gone
