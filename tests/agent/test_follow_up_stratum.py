"""Follow-ups are a review stratum: a doubted answer ("are you sure?" in the same session, or the
app's own ``follow_up`` feedback on it) enters the review queue at ``follow_up_rate``, through
the SDK and a real agent with the shipped patterns."""

from __future__ import annotations

import math

import yaml

import rag_monitor
from rag_monitor.agent.follow_ups import DETECTED
from rag_monitor.config_files import config_path
from tests.services import wait_until

RATE = 0.5
SESSIONS = 120
"""Per arm: detected from text, marked by the app, and not followed up at all."""


def _binomial_bound(n: int, p: float) -> float:
    """Half-width of a 4-sigma interval on the count of n draws at probability p (false alarm < 1e-4)."""
    return 4 * math.sqrt(n * p * (1 - p))


def test_detected_and_marked_follow_ups_enter_the_queue_at_the_stratum_rate(start_agent, tmp_path):
    shipped = yaml.safe_load(config_path("sampling_config", "default").read_text())
    sampling = tmp_path / "sampling.yaml"
    sampling.write_text(yaml.safe_dump({**shipped, "base_rate": 0.0, "low_confidence_rate": 0.0,
                                        "refusal_rate": 0.0, "follow_up_rate": RATE}))
    agent = start_agent(sampling_config=str(sampling), regeneration_check_interval_s=0.2)
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="r1")

    def ask(text: str, session: str):
        with monitor.query(text, session_id=session) as q:
            q.answer(f"Our answer to: {text}")
        return q.trace_id

    detected, marked, plain, follow_up_queries = [], [], [], []
    for i in range(SESSIONS):
        detected.append(ask(f"does plan {i} include roaming in Spain", f"detected-{i}"))
        follow_up_queries.append(ask(["Are you sure?", "¿Estás SEGURO?", "But what about Portugal?",
                                      "Das ist falsch."][i % 4], f"detected-{i}"))
        marked.append(ask(f"what is the refund window for order {i}", f"marked-{i}"))
        monitor.feedback(marked[-1], "follow_up")  # the app's own "ask again" button on this answer
        plain.append(ask(f"how do I change my billing address {i}", f"plain-{i}"))
        ask(f"and where do I see invoice {i}", f"plain-{i}")  # a next question that doubts nothing
    assert monitor.force_flush(30)
    wait_until(lambda: agent.metric_sum("rag_feedback_total", kind="follow_up") >= 2 * SESSIONS,
               timeout=120, what="every follow-up stored and counted")
    assert agent.metric_sum("rag_feedback_total", kind="follow_up") == 2 * SESSIONS  # counted once each

    store = agent.store
    for name, traces in (("detected", detected), ("marked", marked)):
        queued = [t for t in traces if store.queue.item_for_trace(t) is not None]
        assert abs(len(queued) - SESSIONS * RATE) <= _binomial_bound(SESSIONS, RATE), (name, len(queued))
        for trace_id in queued:
            item = store.queue.item_for_trace(trace_id)
            assert (item.stratum, item.weight) == ("follow_up", 1 / RATE)
    # The answer doubted is the one reviewed, with the signal on it (for the signal validation).
    for trace_id in detected:
        (event,) = store.feedback.for_trace(trace_id)
        assert (event.kind, event.reason) == ("follow_up", DETECTED)
    assert all(store.queue.item_for_trace(t) is None for t in plain + follow_up_queries)
    total_queued = sum(store.queue.item_for_trace(t) is not None for t in detected + marked)
    assert agent.metric("rag_sampled_total", {"stratum": "follow_up"}) == total_queued
    monitor.shutdown()
