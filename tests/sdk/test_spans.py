"""The span tree and every attribute of a traced query, as DESIGN.md's span conventions say."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.trace import StatusCode

from rag_monitor import semconv
from rag_monitor.sdk.ids import root_span_id
from tests.sdk.conftest import spans_by_name

DOCS = [
    {"id": "doc-1", "content": "Cancel under Settings > Billing.", "score": 0.82, "metadata": {"locale": "en-US"}},
    {"id": "doc-2", "content": "Refunds take 5 days.", "score": 0.41, "metadata": {"locale": "en-US", "v": 2}},
]


def run_six_stage_query(monitor):
    with monitor.query(
        "How do I cancel?", session_id="s1", user_id="u1", tenant="acme", intent="billing", route="rag"
    ) as q:
        with q.stage("rewrite") as rw:
            rw.input("How do I cancel?")
            rw.output("cancel subscription")
        q.filter(kind="relevance", predicate="locale = 'en-US'", candidates_in=40, candidates_out=12,
                 excluded_ids=["doc-9"])
        with q.retrieve() as r:
            r.documents(DOCS)
        with q.rerank(model="bge-reranker-v2-m3", top_k=1) as rr:
            rr.input_documents(DOCS)
            rr.documents(DOCS[:1])
        q.context(document_ids=["doc-1"], tokens=120)
        with q.generate(model="gpt-x") as g:
            g.first_token()
            g.tokens(prompt=812, completion=64)
        q.answer("Cancel under Settings > Billing.", citations=["doc-1"], confidence=0.82)
    return q


def test_six_stage_query_span_tree_and_attributes(monitor, exporter):
    q = run_six_stage_query(monitor)
    spans = exporter.get_finished_spans()
    by_name = spans_by_name(spans)
    stages = {"rewrite", "filter", "retrieve", "rerank", "context", "generate"}
    assert set(by_name) == {semconv.RAG_QUERY_SPAN_NAME} | stages

    root = by_name[semconv.RAG_QUERY_SPAN_NAME]
    trace_id = root.context.trace_id
    assert q.trace_id == f"{trace_id:032x}"
    assert root.parent is None
    assert root.context.span_id == root_span_id(trace_id)
    assert root.resource.attributes[semconv.SERVICE_NAME] == "support-bot"
    assert root.resource.attributes[semconv.SERVICE_VERSION] == "2026.11.30"
    assert dict(root.attributes) == {
        semconv.OPENINFERENCE_SPAN_KIND: "CHAIN",
        semconv.INPUT_VALUE: "How do I cancel?",
        semconv.OUTPUT_VALUE: "Cancel under Settings > Billing.",
        semconv.SESSION_ID: "s1",
        semconv.USER_ID: "u1",
        semconv.RAG_RELEASE: "2026.11.30",
        semconv.RAG_VARIANT: "production",
        semconv.RAG_TENANT: "acme",
        semconv.RAG_INTENT: "billing",
        semconv.RAG_ROUTE: "rag",
        semconv.RAG_ANSWER_REFUSED: False,
        semconv.RAG_ANSWER_CONFIDENCE: 0.82,
        semconv.RAG_CITATIONS: ("doc-1",),
    }
    assert root.status.status_code is StatusCode.UNSET

    for name, span in by_name.items():
        assert span.context.trace_id == trace_id
        if span is not root:
            assert span.parent.span_id == root.context.span_id, name
            assert span.attributes[semconv.RAG_STAGE] == name
            assert root.start_time <= span.start_time <= span.end_time <= root.end_time

    assert dict(by_name["rewrite"].attributes) == {
        semconv.OPENINFERENCE_SPAN_KIND: "CHAIN",
        semconv.RAG_STAGE: "rewrite",
        semconv.INPUT_VALUE: "How do I cancel?",
        semconv.OUTPUT_VALUE: "cancel subscription",
    }
    assert dict(by_name["filter"].attributes) == {
        semconv.OPENINFERENCE_SPAN_KIND: "CHAIN",
        semconv.RAG_STAGE: "filter",
        semconv.RAG_FILTER_KIND: "relevance",
        semconv.RAG_FILTER_PREDICATE: "locale = 'en-US'",
        semconv.RAG_FILTER_CANDIDATES_IN: 40,
        semconv.RAG_FILTER_CANDIDATES_OUT: 12,
        semconv.RAG_FILTER_EXCLUDED_IDS: ("doc-9",),
    }
    # A bare q.filter(...) is an instant.
    assert by_name["filter"].start_time == by_name["filter"].end_time

    retrieved = dict(by_name["retrieve"].attributes)
    assert retrieved == {
        semconv.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
        semconv.RAG_STAGE: "retrieve",
        "retrieval.documents.0.document.id": "doc-1",
        "retrieval.documents.0.document.content": "Cancel under Settings > Billing.",
        "retrieval.documents.0.document.score": 0.82,
        "retrieval.documents.0.document.metadata": '{"locale": "en-US"}',
        "retrieval.documents.1.document.id": "doc-2",
        "retrieval.documents.1.document.content": "Refunds take 5 days.",
        "retrieval.documents.1.document.score": 0.41,
        "retrieval.documents.1.document.metadata": '{"locale": "en-US", "v": 2}',
    }
    assert json.loads(retrieved["retrieval.documents.1.document.metadata"]) == {"locale": "en-US", "v": 2}

    reranked = dict(by_name["rerank"].attributes)
    assert reranked[semconv.OPENINFERENCE_SPAN_KIND] == "RERANKER"
    assert reranked[semconv.RERANKER_MODEL_NAME] == "bge-reranker-v2-m3"
    assert reranked[semconv.RERANKER_TOP_K] == 1
    assert reranked["reranker.input_documents.1.document.id"] == "doc-2"
    assert reranked["reranker.output_documents.0.document.id"] == "doc-1"
    assert reranked["reranker.output_documents.0.document.score"] == 0.82
    assert "reranker.output_documents.1.document.id" not in reranked
    assert len(reranked) == 2 + 2 + 4 * 2 + 4  # kind, stage, model, top_k, 2 inputs, 1 output

    assert dict(by_name["context"].attributes) == {
        semconv.OPENINFERENCE_SPAN_KIND: "CHAIN",
        semconv.RAG_STAGE: "context",
        semconv.RAG_CONTEXT_DOCUMENT_IDS: ("doc-1",),
        semconv.RAG_CONTEXT_TOKENS: 120,
    }

    generated = dict(by_name["generate"].attributes)
    # Time to first token counts from the query's start (what the user waits), the stage's own beside it.
    ttft = generated.pop(semconv.RAG_TIME_TO_FIRST_TOKEN)
    stage_ttft = generated.pop(semconv.RAG_STAGE_TIME_TO_FIRST_TOKEN)
    assert 0 <= stage_ttft <= (by_name["generate"].end_time - by_name["generate"].start_time) / 1e9
    assert stage_ttft <= ttft <= (by_name["generate"].end_time - root.start_time) / 1e9
    assert generated == {
        semconv.OPENINFERENCE_SPAN_KIND: "LLM",
        semconv.RAG_STAGE: "generate",
        semconv.LLM_MODEL_NAME: "gpt-x",
        semconv.GEN_AI_REQUEST_MODEL: "gpt-x",
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.LLM_TOKEN_COUNT_PROMPT: 812,
        semconv.LLM_TOKEN_COUNT_COMPLETION: 64,
        semconv.LLM_TOKEN_COUNT_TOTAL: 876,
        semconv.GEN_AI_USAGE_INPUT_TOKENS: 812,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 64,
    }


def test_embed_records_vectors_and_texts(monitor, exporter):
    with monitor.query("q") as q:
        q.embed(model="all-MiniLM-L6-v2", vectors=[[0.1, 0.2, 0.3]], texts=["q"])
    embed = spans_by_name(exporter.get_finished_spans())["embed"]
    assert dict(embed.attributes) == {
        semconv.OPENINFERENCE_SPAN_KIND: "EMBEDDING",
        semconv.RAG_STAGE: "embed",
        semconv.EMBEDDING_MODEL_NAME: "all-MiniLM-L6-v2",
        semconv.RAG_EMBEDDING_ROLE: "query",
        "embedding.embeddings.0.embedding.vector": (0.1, 0.2, 0.3),
        "embedding.embeddings.0.embedding.text": "q",
    }


def test_embed_documents_with_their_token_count(monitor, exporter):
    with monitor.query("q") as q:
        q.embed(model="text-embedding-3-small", vectors=[[0.1, 0.2]], tokens=42, role="document")
        with q.generate(model="gpt-4o") as g:
            g.tokens(prompt=1000, completion=200, cached_prompt=800)
    spans = spans_by_name(exporter.get_finished_spans())
    embed, generate = spans["embed"].attributes, spans["generate"].attributes
    assert embed[semconv.RAG_EMBEDDING_ROLE] == "document" and embed[semconv.LLM_TOKEN_COUNT_PROMPT] == 42
    assert generate[semconv.LLM_TOKEN_COUNT_PROMPT_CACHE_READ] == generate[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 800


def test_timed_filter_with_result_and_refusal(monitor, exporter):
    with monitor.query("q", variant="candidate") as q:
        with q.filter(kind="entitlement", predicate="tenant = 'acme'", candidates_in=10) as f:
            f.result(candidates_out=0, excluded_ids=[])
        q.refuse(reason="no eligible documents", answer="I can't help with that.")
    by_name = spans_by_name(exporter.get_finished_spans())
    flt = by_name["filter"].attributes
    assert flt[semconv.RAG_FILTER_KIND] == "entitlement"
    assert flt[semconv.RAG_FILTER_CANDIDATES_OUT] == 0
    assert flt[semconv.RAG_FILTER_EXCLUDED_IDS] == ()
    root = by_name[semconv.RAG_QUERY_SPAN_NAME].attributes
    assert root[semconv.RAG_ANSWER_REFUSED] is True
    assert root[semconv.OUTPUT_VALUE] == "I can't help with that."
    assert root["rag.answer.refusal_reason"] == "no eligible documents"
    assert root[semconv.RAG_VARIANT] == "candidate"


def test_shadow_query_names_the_production_trace(monitor, exporter):
    with monitor.query("q") as prod:
        pass
    with monitor.query("q", variant="shadow", shadow_of=prod.trace_id.upper()) as shadow:
        pass
    root = [s for s in exporter.get_finished_spans() if s.context.trace_id == int(shadow.trace_id, 16)][0]
    assert root.attributes[semconv.RAG_SHADOW_OF] == prod.trace_id
    assert root.attributes[semconv.RAG_VARIANT] == "shadow"


def test_developer_errors_raise_value_error_with_the_value(monitor):
    with pytest.raises(ValueError, match="'staging'"):
        monitor.query("q", variant="staging")
    with pytest.raises(ValueError, match="'nope'"):
        monitor.query("q", shadow_of="nope")
    with monitor.query("q") as q:
        with pytest.raises(ValueError, match="'recency'"):
            q.filter(kind="recency")


def test_query_links_to_the_apps_own_span_but_starts_its_own_trace(monitor, exporter):
    from opentelemetry.sdk.trace import TracerProvider

    app_tracer = TracerProvider().get_tracer("app")
    with app_tracer.start_as_current_span("http request") as app_span:
        with monitor.query("q") as q:
            pass
    root = exporter.get_finished_spans()[0]
    assert root.parent is None
    assert root.context.trace_id != app_span.get_span_context().trace_id
    assert [link.context.span_id for link in root.links] == [app_span.get_span_context().span_id]
    assert root.context.span_id == root_span_id(int(q.trace_id, 16))


async def test_async_with_works_for_query_and_every_stage(monitor, exporter):
    async with monitor.query("q") as q:
        async with q.stage("rewrite"):
            await asyncio.sleep(0)
        async with q.filter(kind="relevance", candidates_in=3, candidates_out=2):
            pass
        async with q.retrieve() as r:
            r.documents(["plain text document"])
        async with q.rerank(model="m") as rr:
            rr.documents(["plain text document"])
        async with q.embed(model="e", vectors=[[1.0]]):
            pass
        async with q.context(document_ids=["d"]):
            pass
        async with q.generate(model="g") as g:
            g.tokens(prompt=1, completion=2)
        assert monitor.current_query() is q
    by_name = spans_by_name(exporter.get_finished_spans())
    assert len(by_name) == 8
    assert by_name["retrieve"].attributes["retrieval.documents.0.document.content"] == "plain text document"
    assert all(s.parent.span_id == by_name["rag.query"].context.span_id for s in by_name.values() if s.parent)
    assert monitor.current_query().trace_id == "0" * 32


def test_stage_started_after_the_query_ended_still_ends(monitor, exporter):
    with monitor.query("q") as q:
        pass
    q.context(document_ids=["late"])
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["rag.query", "context"]


def test_a_replayed_query_records_its_stages_at_the_times_given(monitor, exporter):
    """Stages take ``start_time_ns`` like the query: a replay (or the demo's scripted timings) records
    the times the app knows, and time to first token is measured on those times, not the clock."""
    t0 = 1_700_000_000_000_000_000
    ms = 1_000_000
    with monitor.query("How do I cancel?", start_time_ns=t0) as q:
        with q.retrieve(start_time_ns=t0 + 5 * ms) as r:
            r.documents(DOCS)
            r.end(t0 + 35 * ms)
        q.filter(kind="relevance", candidates_in=2, candidates_out=1, start_time_ns=t0 + 35 * ms)
        q.context(document_ids=["doc-1"], start_time_ns=t0 + 35 * ms)
        with q.generate(model="gpt-x", start_time_ns=t0 + 40 * ms) as g:
            g.first_token(time_ns=t0 + 140 * ms)
            g.end(t0 + 240 * ms)
        q.end(t0 + 250 * ms)
    spans = spans_by_name(exporter.get_finished_spans())
    times = {name: ((s.start_time - t0) // ms, (s.end_time - t0) // ms) for name, s in spans.items()}
    assert times == {"rag.query": (0, 250), "retrieve": (5, 35), "filter": (35, 35), "context": (35, 35), "generate": (40, 240)}
    generate = spans["generate"].attributes
    assert generate[semconv.RAG_TIME_TO_FIRST_TOKEN] == pytest.approx(0.14)
    assert generate[semconv.RAG_STAGE_TIME_TO_FIRST_TOKEN] == pytest.approx(0.1)
