"""The shipped rules and routing on a real Prometheus and Alertmanager, fed by a hand-driven
/metrics built from AgentMetrics: a release that breaks faithfulness reaches the release
owners as a suspected regression; drift without a release reaches the ML/data receiver."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.alerts.metrics import AgentMetrics
from tests.alerting import AlertingStack, MetricsEndpoint
from tests.services import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVICE = "rag-app"
SCORER = "hhem-2.1-open"


class Traffic:
    """Answers queries in a background thread: one every 50 ms, scored with ``verdict``."""

    def __init__(self, metrics: AgentMetrics, release: str, verdict: str = "supported"):
        self.metrics, self.release, self.verdict = metrics, release, verdict
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        m = self.metrics
        while not self._stop.wait(0.05):
            release, verdict = self.release, self.verdict
            m.queries.labels(release=release, variant="production", intent="billing", tenant="acme").inc()
            m.query_duration.labels(release=release, variant="production").observe(0.3)
            m.query_cost.labels(release=release, variant="production").observe(0.001)
            # Sampled at p = 0.5: the weighted counter counts each answer twice.
            m.faithfulness_weighted.labels(release=release, variant="production", scorer=SCORER, verdict=verdict).inc(2.0)
            m.faithfulness_scored.labels(release=release, variant="production", scorer=SCORER, verdict=verdict).inc()

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def agent_with_old_release() -> AgentMetrics:
    metrics = AgentMetrics(CollectorRegistry())
    metrics.release_info.labels(service=SERVICE, release="r1").set(1)
    metrics.release_first_seen.labels(service=SERVICE, release="r1").set(time.time() - 86400)
    return metrics


def firing(alertname: str, receiver: str):
    return lambda a: a["labels"]["alertname"] == alertname and a["status"] == "firing" and a["receiver"] == receiver


def scalar(stack: AlertingStack, promql: str) -> float | None:
    result = stack.prometheus.query(promql)
    return float(result[0]["value"][1]) if result else None


def assert_rules_healthy(stack: AlertingStack) -> None:
    unhealthy = [r for r in stack.prometheus.rule_health() if r[1] == "err"]
    assert unhealthy == []


def test_a_release_that_breaks_faithfulness_pages_its_owners_as_a_regression(tmp_path):
    metrics = agent_with_old_release()
    with Traffic(metrics, "r1") as traffic, MetricsEndpoint(metrics.registry) as endpoint, \
            AlertingStack(tmp_path, [endpoint.target]) as stack:
        # Enough good answers for the sample guard, and no alert on them.
        wait_until(lambda: (scalar(stack, "rag:faithfulness_scored") or 0) >= 10, timeout=60, what="scored answers recorded")
        assert scalar(stack, "rag:faithfulness_unsupported_ratio") == 0
        assert [a for a in stack.prometheus.alerts() if a["labels"]["alertname"] == "RagFaithfulnessLow"] == []
        assert {r["metric"]["triage"] for r in stack.prometheus.query('rag:triage{guardrail="faithfulness"}')} == {"drift"}

        metrics.release_info.labels(service=SERVICE, release="r2").set(1)
        metrics.release_first_seen.labels(service=SERVICE, release="r2").set(time.time())
        traffic.release, traffic.verdict = "r2", "unsupported"

        alert = stack.webhook.wait_for_alert(firing("RagFaithfulnessLow", "release-owners"), timeout=90)
        assert alert["labels"]["triage"] == "regression"
        assert alert["labels"]["suspected_release"] == "r2"
        assert alert["labels"]["severity"] == "page"
        assert alert["labels"]["suspected_change"] == "release r2"
        assert alert["annotations"]["triage"] == "suspected regression after release r2: worse than what it replaced on this signal"
        assert "Phoenix" in alert["annotations"]["runbook"]
        # A page also reaches the on-call pager; nothing went to the drift receiver.
        stack.webhook.wait_for_alert(firing("RagFaithfulnessLow", "oncall-pager"), timeout=30)
        assert [a for a in stack.webhook.alerts if a["receiver"] == "ml-data"] == []
        assert_rules_healthy(stack)


def test_drift_without_a_release_reaches_the_ml_data_receiver(tmp_path):
    metrics = agent_with_old_release()
    drift = dict(signal="query_embedding", detector="mmd")
    with Traffic(metrics, "r1"), MetricsEndpoint(metrics.registry) as endpoint, AlertingStack(tmp_path, [endpoint.target]) as stack:
        metrics.drift_p_value.labels(**drift).set(0.001)
        metrics.drift_window_size.labels(**drift, window="current").set(500)
        metrics.drift_window_size.labels(**drift, window="reference").set(2000)
        metrics.drift_last_run.labels(**drift).set(time.time())
        metrics.drift_evidence.labels(**drift).set(9.5)
        metrics.drift_top_cluster.labels(**drift, direction="over", example="how do I buy crypto", current_share="0.118",
                                         reference_share="0.004").set(1)
        metrics.drift_detected.labels(**drift).set(0)
        wait_until(lambda: stack.prometheus.query("rag_drift_detected"), timeout=30, what="the drift verdict scraped")
        metrics.drift_detected.labels(**drift).set(1)

        alert = stack.webhook.wait_for_alert(firing("RagDriftDetected", "ml-data"), timeout=60)
        assert alert["labels"]["triage"] == "drift"
        assert "suspected_release" not in alert["labels"]
        assert alert["annotations"]["triage"] == (
            "suspected drift: the releases serving moved together and no change made this signal worse")
        assert alert["annotations"]["summary"] == (
            "Drift on query_embedding by mmd (evidence ln(1/p) = 9.5, at or above its page threshold).")
        assert alert["annotations"]["grew"] == (  # the alert names what changed
            'More queries like "how do I buy crypto": 0.118 of the current window against 0.004 of the reference')
        assert alert["annotations"]["shrank"] == "no cluster of queries is clearly less common than in the reference"
        assert [a for a in stack.webhook.alerts if a["receiver"] == "release-owners"] == []
        # Supported answers on enough traffic stay quiet meanwhile.
        assert [a for a in stack.prometheus.alerts() if a["labels"]["alertname"] == "RagFaithfulnessLow"] == []
        assert_rules_healthy(stack)
