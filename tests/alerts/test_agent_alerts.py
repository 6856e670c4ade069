"""The whole chain with real servers: SDK -> agent -> Prometheus (shipped rules) -> Alertmanager
(shipped routing) -> webhook. A new release whose answers stop being supported and whose latency
rises arrives as a suspected regression; the same breakage without a release arrives as drift."""

from __future__ import annotations

import threading
import time

import pytest

import rag_monitor
from tests.alerting import FAST_OVERRIDES, AlertingStack
from tests.services import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONTEXT = "Refunds for duplicate charges are issued within 5 business days to the original card."
SUPPORTED = "Refunds for duplicate charges are issued within 5 business days."
UNSUPPORTED = "Call Marta at extension 4471 and she will wire 300 euros by Friday."


class Traffic:
    """Queries through the SDK in a background thread until stopped; settings change live."""

    def __init__(self, endpoint: str, release: str, answer: str, seconds: float):
        self.monitor = rag_monitor.init(service_name="support-bot", endpoint=endpoint, release=release,
                                        schedule_delay_s=0.2)
        self.answer, self.seconds = answer, seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            now = time.time_ns()
            with self.monitor.query("When do I get my refund?", start_time_ns=now - int(self.seconds * 1e9)) as q:
                with q.retrieve() as r:
                    r.documents([{"id": "refunds-1", "content": CONTEXT}])
                q.answer(self.answer)
                q.end(end_time_ns=now)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.monitor.shutdown()


def start_scoring_agent(start_agent, tmp_path):
    (tmp_path / "sampling.yaml").write_text("base_rate: 1.0\n")  # score every answer: the test is small
    return start_agent(sampling_config=str(tmp_path / "sampling.yaml"), score_interval_s=0.5)


def firing(alertname: str, **labels: str):
    return lambda a: (a["status"] == "firing" and a["labels"]["alertname"] == alertname
                      and all(a["labels"].get(k) == v for k, v in labels.items()))


def test_new_release_breaking_answers_and_latency_pages_as_a_regression(start_agent, tmp_path):
    agent = start_scoring_agent(start_agent, tmp_path)
    agent.store.releases.note("support-bot", "r1", time.time() - 86400)  # r1 has been live for a day
    with AlertingStack(tmp_path / "stack", [f"127.0.0.1:{agent.agent.settings.http_port}"], FAST_OVERRIDES) as stack:
        with Traffic(agent.otlp_url, "r1", SUPPORTED, seconds=0.3):
            # Triage compares r2 with r1's last stable values: r1 serves until Prometheus has them.
            wait_until(lambda: {r["metric"]["guardrail"] for r in stack.prometheus.query('rag:triage:release_stable{release="r1"}')}
                       >= {"faithfulness", "latency"}, timeout=90, what="r1's stable faithfulness and latency")
        with Traffic(agent.otlp_url, "r2", UNSUPPORTED, seconds=12.0):
            faithfulness = stack.webhook.wait_for_alert(firing("RagFaithfulnessLow", triage="regression"), timeout=90)
            latency = stack.webhook.wait_for_alert(firing("RagQueryLatencyOverSLO", triage="regression", severity="page"), timeout=90)
    for alert in (faithfulness, latency):
        assert alert["labels"]["suspected_release"] == "r2"
        assert alert["labels"]["suspected_change"] == "release r2"
        assert "suspected regression after release r2" in alert["annotations"]["triage"]
        assert alert["annotations"]["runbook"]
    assert faithfulness["labels"]["scorer"] == "lexical-v1"
    assert faithfulness["receiver"] in ("oncall-pager", "release-owners")


def test_the_same_breakage_without_a_release_arrives_as_drift(start_agent, tmp_path):
    """Latency pages as drift; faithfulness does not page at all: with no human label and no release
    to compare with, the scorer's own flag rate (biased by its errors) is never read as the level."""
    agent = start_scoring_agent(start_agent, tmp_path)
    agent.store.releases.note("support-bot", "r1", time.time() - 86400)
    with AlertingStack(tmp_path / "stack", [f"127.0.0.1:{agent.agent.settings.http_port}"], FAST_OVERRIDES) as stack:
        with Traffic(agent.otlp_url, "r1", UNSUPPORTED, seconds=12.0):
            alert = stack.webhook.wait_for_alert(firing("RagQueryLatencyOverSLO", triage="drift", severity="page"), timeout=90)
            def scorer_rate() -> float:
                rows = stack.prometheus.query('rag:unsupported_rate_scorer{release="r1"}')
                return float(rows[0]["value"][1]) if rows else 0.0
            # The scorer flags most answers: the old scorer-only rule would have paged by now.
            wait_until(lambda: scorer_rate() > 0.2, timeout=60, what="the scorer's flag rate above 20%")
            faithfulness_alerts = stack.prometheus.query('ALERTS{alertname="RagFaithfulnessLow"}')
    assert "suspected drift" in alert["annotations"]["triage"]
    assert "suspected_release" not in alert["labels"]
    assert faithfulness_alerts == []
    assert not [a for a in stack.webhook.alerts if a["labels"]["alertname"] == "RagFaithfulnessLow"]
