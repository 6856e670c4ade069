"""The agent end to end over real OTLP/HTTP: SDK -> receiver -> records, store and /metrics."""

from __future__ import annotations

import gzip
import json

import pytest

import rag_monitor
from rag_monitor import semconv
from rag_monitor.faithfulness.thresholds import shipped_calibration
from tests.services import wait_until


def run_query(monitor, question="How do I cancel my plan?", *, session="s1", release_docs=None, thumbs_down=False):
    with monitor.query(question, session_id=session, user_id="u1", tenant="acme", intent="billing") as q:
        with q.stage("rewrite"):
            pass
        q.filter(kind="relevance", predicate="locale = 'en-US'", candidates_in=40, candidates_out=12, excluded_ids=["doc-9"])
        with q.retrieve() as r:
            r.documents(release_docs or [
                {"id": "doc-1", "content": "Cancel under Settings > Billing.", "score": 0.82, "metadata": {"locale": "en-US"}},
                {"id": "doc-2", "content": "Refunds take 5 days.", "score": 0.41},
            ])
        with q.rerank(model="bge-reranker-v2-m3", top_k=1) as rr:
            rr.documents([{"id": "doc-1", "content": "Cancel under Settings > Billing.", "score": 0.9}])
        with q.context(document_ids=["doc-1"]):
            pass
        with q.generate(model="gpt-4o-mini") as g:
            g.tokens(prompt=812, completion=64)
        q.answer("Cancel under Settings > Billing.", citations=["doc-1"], confidence=0.82)
    return q.trace_id


@pytest.fixture
def sdk(running_agent):
    monitor = rag_monitor.init(service_name="support-bot", endpoint=running_agent.otlp_url, release="2026.11.30")
    yield monitor
    monitor.shutdown()


def test_sdk_query_becomes_a_record_and_metrics(running_agent, sdk):
    trace_id = run_query(sdk)
    assert sdk.force_flush()
    wait_until(lambda: running_agent.store.recent.get(trace_id) is not None, timeout=10, what="the record in the store")

    record = running_agent.store.recent.get(trace_id)
    assert record.query == "How do I cancel my plan?"
    assert record.answer == "Cancel under Settings > Billing."
    assert record.release == "2026.11.30" and record.tenant == "acme" and record.session_id == "s1"
    assert [d.id for d in record.delivered] == ["doc-1"]
    assert [d.id for d in record.retrieved] == ["doc-1", "doc-2"]
    assert record.filters[0].kind == "relevance" and record.filters[0].excluded_ids == ["doc-9"]
    assert (record.prompt_tokens, record.completion_tokens, record.llm_model) == (812, 64, "gpt-4o-mini")
    assert {s.name for s in record.stages} >= {"rewrite", "filter", "retrieve", "rerank", "context", "generate"}

    rv = {"release": "2026.11.30", "variant": "production"}
    assert running_agent.metric("rag_queries_total", {**rv, "intent": "billing", "tenant": "acme"}) == 1
    assert running_agent.metric("rag_stage_duration_seconds_count", {**rv, "stage": "retrieve"}) == 1
    assert running_agent.metric("rag_tokens_total", {**rv, "kind": "prompt", "model": "gpt-4o-mini"}) == 812
    assert running_agent.metric("rag_query_cost_usd_count", rv) == 1
    assert running_agent.metric("rag_filter_exclusions_total", {**rv, "filter_kind": "relevance", "outcome": "removed_topk"}) == 1
    assert running_agent.metric("rag_release_first_seen_timestamp_seconds", {"service": "support-bot", "release": "2026.11.30"}) > 0
    text = running_agent.scrape()
    assert 'rag_query_duration_seconds_bucket{le="0.005",release="2026.11.30",variant="production"}' in text


def test_late_thumbs_down_pulls_the_query_into_review(running_agent, sdk):
    trace_id = run_query(sdk)
    sdk.force_flush()
    wait_until(lambda: running_agent.store.recent.get(trace_id) is not None, timeout=10, what="the record")
    sdk.feedback(trace_id, "thumbs_down", reason="wrong")
    sdk.force_flush()
    wait_until(lambda: running_agent.store.queue.item_for_trace(trace_id) is not None, timeout=10, what="the review item")
    item = running_agent.store.queue.item_for_trace(trace_id)
    assert item.stratum == "thumbs_down" and item.inclusion_prob == 1.0
    assert running_agent.metric("rag_feedback_total", {"release": "2026.11.30", "variant": "production", "kind": "thumbs_down"}) == 1
    assert running_agent.metric("rag_sampled_total", {"stratum": "thumbs_down"}) == 1


def test_thumbs_down_for_an_expired_query_is_counted(running_agent, sdk):
    sdk.feedback("0123456789abcdef0123456789abcdef", "thumbs_down")
    sdk.force_flush()
    wait_until(lambda: running_agent.metric("rag_review_pull_expired_total") == 1, timeout=10, what="the expired pull count")


def test_regenerations_explicit_and_inferred(running_agent, sdk):
    first = run_query(sdk, "How do I cancel my plan?", session="s9")
    run_query(sdk, "how do I cancel my plan", session="s9")  # a near-duplicate re-ask
    sdk.feedback(first, "regenerate")
    sdk.force_flush()
    rv = {"release": "2026.11.30", "variant": "production", "intent": "billing"}  # per intent too
    wait_until(lambda: running_agent.metric("rag_regenerations_total", {**rv, "source": "explicit"}) == 1, timeout=10, what="explicit")
    wait_until(lambda: running_agent.metric("rag_regenerations_total", {**rv, "source": "inferred"}) == 1,
               timeout=10, what="inferred (the regeneration job's next tick)")
    assert running_agent.metric("rag_regenerations_total", {**rv, "source": "explicit"}) == 1
    # Two signals of one regeneration: the click and the re-ask name the same query.
    assert running_agent.metric("rag_regenerated_queries_total", rv) == 1


def test_refusal_and_error_are_counted(running_agent, sdk):
    with sdk.query("What is the CEO's salary?") as q:
        q.answer("I can't answer that from the documents I have.", refused=True)
    with pytest.raises(RuntimeError):
        with sdk.query("boom"):
            raise RuntimeError("app failure")
    sdk.force_flush()
    rv = {"release": "2026.11.30", "variant": "production"}
    wait_until(lambda: running_agent.metric("rag_query_errors_total", rv) == 1, timeout=10, what="the error count")
    assert running_agent.metric("rag_refusals_total", rv) == 1


def test_bearer_token_is_required_when_configured(start_agent):
    agent = start_agent(otlp_token="s3cret")
    status, headers, _ = agent.post(b"", headers={})
    assert status == 401 and headers.get("WWW-Authenticate") == "Bearer"
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, token="s3cret")
    try:
        with monitor.query("q") as q:
            q.answer("a")
        monitor.force_flush()
        wait_until(lambda: agent.metric_sum("rag_queries_total") == 1, timeout=10, what="the authorised query")
    finally:
        monitor.shutdown()


def test_review_items_survive_an_agent_restart_exactly_once(start_agent, tmp_path):
    data_dir = str(tmp_path / "durable")
    agent = start_agent(data_dir=data_dir)
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
    try:
        trace_ids = [run_query(monitor, f"question {i}") for i in range(3)]
        monitor.force_flush()
        for trace_id in trace_ids:
            monitor.feedback(trace_id, "thumbs_down")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.store.queue.depth().get("queued") == 3, timeout=10, what="three queued items")
    agent.agent.stop()

    restarted = start_agent(data_dir=data_dir)
    assert restarted.store.queue.depth().get("queued") == 3
    claimed = [restarted.store.review.claim("alice", 60) for _ in range(4)]
    assert sorted(item.trace_id for item in claimed[:3]) == sorted(trace_ids) and claimed[3] is None


def test_the_agent_says_when_it_has_no_hhem_weights(start_agent, caplog):
    import logging

    caplog.set_level(logging.WARNING)
    agent = start_agent(hhem_model_path="", offline_scorer="support")
    assert "no HHEM-2.1-Open weights configured" in caplog.text
    shipped = shipped_calibration("support-v1", "1")["threshold"]
    assert f'rag_scorer_info{{scorer="support-v1",threshold="{shipped:g}",threshold_source="shipped",version="1"}} 1.0' in agent.scrape()
    assert agent.metric_sum("rag_scorer_info", scorer="hhem-2.1-open") == 0
