"""Every kind of change is a change: from the SDK to a real agent's /metrics, a provider's new
response model under one requested name, a new prompt or config version and a new index build
each count once (``rag_change_events_total{kind}``) with the latest one's time and value
(``rag_change_last_timestamp_seconds{kind, change}``), which the triage rules compare across."""

from __future__ import annotations

import time

import pytest

import rag_monitor
from rag_monitor.agent.changes import ChangeTracker
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors.otlp import Span
from tests.services import wait_until

pytestmark = pytest.mark.integration


def _ask(monitor, requested: str, answered: str, variant: str | None = None) -> None:
    with monitor.query("What is the refund window?", session_id="s1") as q:
        with q.retrieve() as r:
            r.documents([{"id": "doc-a", "content": "policy text"}])
        with q.generate(model=requested) as g:
            g.tokens(prompt=100, completion=10)
            g.response_model(answered)
        q.answer("30 days.")


def test_model_prompt_config_and_index_changes_reach_the_metrics(start_agent):
    agent = start_agent()
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1", batch=False,
                               prompt_version="p1", config_version="c1")
    try:
        for _ in range(3):
            _ask(monitor, "gpt-4o-mini", "gpt-4o-mini-2024-07-18")
        monitor.index_event("doc-a", committed_at=time.time() - 60, source="kb", index_version="build-1")
        wait_until(lambda: agent.metric("rag_queries_total", {"release": "r1", "variant": "production", "intent": "unknown", "tenant": "unknown"}) == 3,
                   timeout=30, what="the first queries counted")
        # First sightings are baselines, not changes.
        assert not agent.metric("rag_change_events_total", {"kind": "model"})

        before = time.time()
        _ask(monitor, "gpt-4o-mini", "gpt-4o-mini-2024-11-20")      # the provider's silent update
        _ask(monitor, "gpt-4o-mini", "gpt-4o-mini-2024-07-18")      # old and new alternate in a rollout: counted once
        monitor.prompt_version, monitor.config_version = "p2", "c2"
        _ask(monitor, "gpt-4o-mini", "gpt-4o-mini-2024-11-20")
        for doc in ("doc-a", "doc-b", "doc-c"):                      # one bulk load, three documents: one change
            monitor.index_event(doc, committed_at=time.time() - 30, source="kb", index_version="build-2")
        for kind in ("model", "prompt", "config", "index"):
            wait_until(lambda kind=kind: agent.metric("rag_change_events_total", {"kind": kind}) == 1, timeout=30, what=f"the {kind} change")
        changed = {"model": "gpt-4o-mini-2024-11-20", "prompt": "p2", "config": "c2", "index": "build-2"}
        for kind, value in changed.items():
            at = agent.metric("rag_change_last_timestamp_seconds", {"kind": kind, "change": value})
            assert at is not None and at >= before - 60, (kind, at)
    finally:
        monitor.shutdown()


def _span(attrs, **kw) -> Span:
    return Span(trace_id="a" * 32, span_id="b" * 16, parent_span_id=None, name="chat", kind=3, start_ns=1, end_ns=2, attributes=attrs)


def test_an_openinference_llm_span_names_the_requested_and_the_response_model():
    from rag_monitor.collectors.usage import model_call

    oi = model_call(_span({"llm.model_name": "gpt-4o-2024-08-06", "llm.invocation_parameters": '{"model": "gpt-4o", "temperature": 0}'}), "llm")
    assert (oi.requested_model, oi.response_model) == ("gpt-4o", "gpt-4o-2024-08-06")
    genai = model_call(_span({"gen_ai.request.model": "claude-sonnet-4", "gen_ai.response.model": "claude-sonnet-4-20250514"}), "llm")
    assert (genai.requested_model, genai.response_model) == ("claude-sonnet-4", "claude-sonnet-4-20250514")
    # llm.model_name alone could be either: no change is read from it.
    assert model_call(_span({"llm.model_name": "gpt-4o"}), "llm").response_model is None


def test_a_replica_keeps_one_series_per_kind_and_ignores_older_reports():
    metrics = AgentMetrics()
    tracker = ChangeTracker(metrics, clock=lambda: 1000.0)
    assert not tracker.note("prompt", "svc", "p1")
    assert tracker.note("prompt", "svc", "p2")
    assert tracker.note("prompt", "svc", "p3", at=900.0) is True  # counted, but older than p2's: p2 stays the latest
    samples = {s.labels["change"]: s.value for s in metrics.change_last.collect()[0].samples}
    assert samples == {"p2": 1000.0}
    assert metrics.registry.get_sample_value("rag_change_events_total", {"kind": "prompt"}) == 2
