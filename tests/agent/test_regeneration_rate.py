"""One regenerate click is one regenerated query in the rate a user reads: through the SDK, a real
agent, and a real Prometheus evaluating the shipped recording rule ``rag:regeneration_ratio``."""

from __future__ import annotations

import math
import time

import pytest

import rag_monitor
from tests.alerting import FAST_OVERRIDES, AlertingStack
from tests.services import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW_S = 60
"""The rule's window here: phase two (ten queries, one click) must be scraped well within it."""


def _value(stack, promql: str) -> tuple[float, float] | None:
    """(sample time, value) of a one-sample instant query, or None while it has none."""
    result = stack.prometheus.query(promql)
    return (float(result[0]["value"][0]), float(result[0]["value"][1])) if result else None


def test_one_regenerate_click_moves_the_regeneration_rate_by_exactly_one_query(start_agent, tmp_path):
    agent = start_agent(regeneration_check_interval_s=0.1)
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="r1")
    asked = [0]

    def ask(text: str, session: str):
        with monitor.query(text, session_id=session) as q:
            q.answer(f"answer to {text}")
        asked[0] += 1
        return q

    def click_regenerate(text: str, session: str) -> None:
        """What the app does on the button: the feedback on the answer, then the same question again."""
        monitor.feedback(ask(text, session), "regenerate")
        ask(text, session)

    def counted(stack=None) -> bool:
        """The agent (and Prometheus, when given) has every query and both signals of every click."""
        values = {"queries": agent.metric_sum("rag_queries_total"),
                  "regenerated": agent.metric_sum("rag_regenerated_queries_total"),
                  "explicit": agent.metric_sum("rag_regenerations_total", source="explicit"),
                  "inferred": agent.metric_sum("rag_regenerations_total", source="inferred")}
        if stack is not None:
            values = {k: (_value(stack, f"sum({m})") or (0, -1))[1] for k, m in (
                ("queries", "rag_queries_total"), ("regenerated", "rag_regenerated_queries_total"),
                ("explicit", 'rag_regenerations_total{source="explicit"}'),
                ("inferred", 'rag_regenerations_total{source="inferred"}'))}
        return values == {"queries": asked[0], "regenerated": clicks[0], "explicit": clicks[0], "inferred": clicks[0]}

    clicks = [0]
    overrides = {**FAST_OVERRIDES, "regeneration.window": f"{WINDOW_S}s"}
    target = f"127.0.0.1:{agent.agent.settings.http_port}"
    try:
        with AlertingStack(tmp_path / "alerting", [target], overrides) as stack:
            # Phase one: queries and a click, so every series the rate reads exists and is non-zero
            # (rate() then scales each alike), then flat for a whole window.
            for i in range(5):
                ask(f"what is the refund policy for order {i}", f"warm-{i}")
            click_regenerate("how do I cancel my plan", "warm-click")
            clicks[0] += 1
            assert monitor.force_flush(10)
            wait_until(counted, timeout=30, what="phase one counted by the agent")
            wait_until(lambda: counted(stack), timeout=30, what="phase one scraped by Prometheus")
            time.sleep(WINDOW_S + 2)  # the window slides past phase one: it now reads phase two alone

            # Phase two: eight questions and one regenerate click (the clicked query and its re-ask).
            started = time.time()
            for i in range(8):
                ask(f"which plans include roaming in country {i}", f"user-{i}")
            click_regenerate("why was my invoice charged twice", "user-click")
            clicks[0] += 1
            assert monitor.force_flush(10)
            wait_until(counted, timeout=30, what="phase two counted by the agent")
            wait_until(lambda: counted(stack), timeout=30, what="phase two scraped by Prometheus")
            scraped = time.time()
            wait_until(lambda: (_value(stack, "rag:regeneration_ratio") or (0, 0))[0] > scraped + 1, timeout=30,
                       what="a rule evaluation after the last scrape")
            at, ratio = _value(stack, "rag:regeneration_ratio")
            _, queries = _value(stack, "rag:regeneration_ratio:queries")
            assert at < started + WINDOW_S - 5, "phase two took longer than the rule's window allows"
    finally:
        monitor.shutdown()
    # Ten queries in the window, one of them regenerated: 1/10, not the 2/10 the two signals add up to.
    assert math.isclose(ratio, 1 / 10, rel_tol=1e-9), ratio
    assert math.isclose(ratio * 10, 1.0, rel_tol=1e-9)
    assert 10 - 1e-9 <= queries < 10.5  # rag:regeneration_ratio:queries: the window's ten, extrapolated a little
