"""Every model call with its own model and tokens, in the three dialects; hidden content; the
query's vector identified, never guessed; LangChain document ids from ``Document.id``."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

import rag_monitor
from rag_monitor import semconv as sc
from rag_monitor.agent.observe import RegenerationDetector
from rag_monitor.collectors import PriceTable
from rag_monitor.record import ModelCall
from rag_monitor.sdk import CaptureConfig
from tests.collectors.helpers import assemble, memory_tracer
from tests.collectors.test_dialects import instrumented


def _calls(record):
    return [(c.kind, c.model, c.input_tokens, c.output_tokens, c.cached_input_tokens) for c in record.model_calls]


def _cache_writes(record):
    return [c.cache_write_input_tokens for c in record.model_calls]


def test_sdk_router_generator_and_embedding_calls():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="svc", span_exporter=exporter, batch=False)
    try:
        with monitor.query("How do I cancel?") as q:
            q.embed(model="text-embedding-3-small", vectors=[[0.1, 0.2]], texts=["How do I cancel?"], tokens=7)
            with q.stage("route", kind=sc.SPAN_KIND_LLM) as route:
                route.set_attribute(sc.LLM_MODEL_NAME, "gpt-4o-mini")
                route.set_attribute(sc.LLM_TOKEN_COUNT_PROMPT, 1000)
                route.set_attribute(sc.LLM_TOKEN_COUNT_COMPLETION, 10)
            with q.generate(model="gpt-4o") as g:
                g.tokens(prompt=1000, completion=200, cached_prompt=600, cache_write_prompt=300)
            q.answer("Settings > Billing.")
    finally:
        monitor.shutdown()
    record = assemble(exporter.get_finished_spans())
    assert sorted(_calls(record)) == sorted([
        ("embedding", "text-embedding-3-small", 7, 0, 0), ("llm", "gpt-4o-mini", 1000, 10, 0), ("llm", "gpt-4o", 1000, 200, 600),
    ])
    assert sorted(_cache_writes(record)) == [0, 0, 300]
    # the summary existing readers use: the generator's model, the LLM calls' tokens
    assert (record.llm_model, record.llm_calls, record.prompt_tokens, record.completion_tokens) == ("gpt-4o", 2, 2000, 210)
    assert record.query_embedding == [0.1, 0.2]


def test_openinference_two_models_and_cache_read():
    with memory_tracer() as (provider, exporter):
        tracer = provider.get_tracer("oi")
        with tracer.start_as_current_span("rag_chain") as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: "q"})
            with tracer.start_as_current_span("embedder") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "EMBEDDING", sc.EMBEDDING_MODEL_NAME: "text-embedding-3-small",
                                  sc.LLM_TOKEN_COUNT_PROMPT: 5})
            with tracer.start_as_current_span("retriever") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER", "retrieval.documents.0.document.id": "d1"})
            with tracer.start_as_current_span("router") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "LLM", sc.LLM_MODEL_NAME: "gpt-4o-mini",
                                  sc.LLM_TOKEN_COUNT_PROMPT: 1000, sc.LLM_TOKEN_COUNT_COMPLETION: 10})
            with tracer.start_as_current_span("predict") as outer:  # LlamaIndex-style wrapper: one call
                outer.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "LLM"})
                with tracer.start_as_current_span("chat") as s:
                    s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "LLM", sc.LLM_MODEL_NAME: "gpt-4o", sc.LLM_TOKEN_COUNT_PROMPT: 1000,
                                      sc.LLM_TOKEN_COUNT_COMPLETION: 200, sc.LLM_TOKEN_COUNT_PROMPT_CACHE_READ: 900})
        record = assemble(exporter.get_finished_spans())
    assert _calls(record) == [("embedding", "text-embedding-3-small", 5, 0, 0), ("llm", "gpt-4o-mini", 1000, 10, 0),
                              ("llm", "gpt-4o", 1000, 200, 900)]
    assert record.llm_model == "gpt-4o" and record.llm_calls == 2


def test_genai_embeddings_chat_and_cache_read_tokens():
    with memory_tracer() as (provider, exporter):
        tracer = provider.get_tracer("app")
        with tracer.start_as_current_span("answer", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("embeddings text-embedding-3-large") as s:
                s.set_attributes({sc.GEN_AI_OPERATION_NAME: "embeddings", sc.GEN_AI_REQUEST_MODEL: "text-embedding-3-large",
                                  sc.GEN_AI_USAGE_INPUT_TOKENS: 12})
            with tracer.start_as_current_span("retrieval kb") as s:
                s.set_attributes({sc.GEN_AI_OPERATION_NAME: "retrieval", sc.GEN_AI_RETRIEVAL_QUERY_TEXT: "q"})
            with tracer.start_as_current_span("chat claude") as s:
                s.set_attributes({sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "claude-3-5-haiku",
                                  sc.GEN_AI_USAGE_INPUT_TOKENS: 3000, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 50,
                                  sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 2500, sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 400})
        record = assemble(exporter.get_finished_spans())
    assert _calls(record) == [("embedding", "text-embedding-3-large", 12, 0, 0), ("llm", "claude-3-5-haiku", 3000, 50, 2500)]
    assert _cache_writes(record) == [0, 400]  # GenAI's input_tokens include the cache reads and writes


def test_a_tokenless_rerank_is_a_call_priced_per_call_or_free():
    with memory_tracer() as (provider, exporter):
        tracer = provider.get_tracer("oi")
        with tracer.start_as_current_span("rag_chain") as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: "q"})
            with tracer.start_as_current_span("rerank-free") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "RERANKER", sc.RERANKER_MODEL_NAME: "bge-reranker"})
            with tracer.start_as_current_span("rerank-paid") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "RERANKER", sc.RERANKER_MODEL_NAME: "rerank-v3.5", sc.LLM_TOKEN_COUNT_PROMPT: 400})
        record = assemble(exporter.get_finished_spans())
    assert record.model_calls == [ModelCall("rerank", "bge-reranker"), ModelCall("rerank", "rerank-v3.5", 400)]
    prices = PriceTable.from_mapping({"models": {}, "calls": {"rerank-v3.5": {"per_1k_calls": 2.0}}})
    # per call (2 USD per 1,000 searches) whatever tokens it reports; no tokens and no row: nothing to price
    assert [prices.call_cost(c) for c in record.model_calls] == [None, pytest.approx(0.002)]
    assert not prices.unknown_models


# --- hidden content ------------------------------------------------------------------------------


def _hidden_query_records(capture):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="svc", span_exporter=exporter, batch=False, capture=capture)
    records = []
    try:
        for question in ("What is my balance?", "How do I close my account?"):
            exporter.clear()
            with monitor.query(question, session_id="s1") as q:
                with q.retrieve() as r:
                    r.documents([{"id": "d1", "content": "secret text"}])
                q.answer("private answer")
            records.append(assemble(exporter.get_finished_spans()))
    finally:
        monitor.shutdown()
    return records


def test_hidden_content_is_marked_and_never_compared(tmp_path):
    from rag_monitor.store import open_store

    records = _hidden_query_records(CaptureConfig(hide_inputs=True, hide_outputs=True, hide_document_content=True))
    for record in records:
        assert record.hidden == ["query", "answer", "documents"]
        assert (record.query, record.answer, record.retrieved[0].content, record.retrieved[0].id) == ("", "", "", "d1")
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        detector = RegenerationDetector(store.session_windows, window_s=600, similarity=0.8)
        # two different hidden questions in one session: no inferred regeneration (not two equal placeholders)
        for record in records:
            detector.offer([record], lambda r: (r.release, r.variant, "unknown"))
        assert detector.tick() == 0
    finally:
        store.close()


def test_openinference_placeholder_counts_as_hidden():
    with memory_tracer() as (provider, exporter):
        tracer = provider.get_tracer("oi")
        with tracer.start_as_current_span("rag_chain") as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: "__REDACTED__", sc.OUTPUT_VALUE: "__REDACTED__"})
            with tracer.start_as_current_span("retriever") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER", "retrieval.documents.0.document.id": "d1",
                                  "retrieval.documents.0.document.content": "__REDACTED__"})
        record = assemble(exporter.get_finished_spans())
    assert record.hidden == ["query", "answer"] and (record.query, record.answer) == ("", "")
    assert record.retrieved[0].content == ""


def test_hidden_records_are_not_embedded_for_drift(tmp_path):
    from rag_monitor.agent.drift.feed import DriftFeed
    from rag_monitor.detectors.profiles import DriftProfile
    from rag_monitor.store import open_store

    embedded: list[str] = []

    def embedder(texts):
        embedded.extend(texts)
        return [[1.0, 0.0] for _ in texts]

    profiles = [DriftProfile(n, s, "mmd", reference_size=10, current_size=10, min_current=2, current_max_age_s=None, interval_s=1, page_threshold=20)
                for n, s in (("q", "query_embedding"), ("d", "document_embedding"))]
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        feed = DriftFeed(store.reservoirs, profiles, embedder=embedder, embedding_model="m")
        hidden = _hidden_query_records(CaptureConfig(hide_inputs=True, hide_document_content=True))[0]
        hidden.query_embedding = [0.5, 0.5]  # a vector of hidden content is not used either
        feed.offer([hidden])
        feed.tick()
        assert embedded == [] and store.reservoirs.info("query_embedding", "current") is None
        visible = _hidden_query_records(CaptureConfig())[0]
        feed.offer([visible])
        feed.tick()
        assert embedded == ["What is my balance?", "secret text"]
    finally:
        store.close()


# --- query embedding identified; LangChain Document.id -------------------------------------------------


def test_a_document_vector_without_text_is_never_the_query_vector():
    with memory_tracer() as (provider, exporter):
        tracer = provider.get_tracer("oi")
        with tracer.start_as_current_span("rag_chain") as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: "q"})
            with tracer.start_as_current_span("doc-embedder") as s:  # vectors of documents, no text, no role
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "EMBEDDING", "embedding.embeddings.0.embedding.vector": [0.9, 0.1]})
            with tracer.start_as_current_span("retriever") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER", "retrieval.documents.0.document.id": "d1"})
            with tracer.start_as_current_span("embed-docs") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "EMBEDDING", sc.RAG_EMBEDDING_ROLE: "document",
                                  "embedding.embeddings.0.embedding.vector": [0.3, 0.7]})
            with tracer.start_as_current_span("embed-query") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "EMBEDDING", "embedding.embeddings.0.embedding.vector": [0.2, 0.8],
                                  "embedding.embeddings.0.embedding.text": "q"})
        record = assemble(exporter.get_finished_spans())
    assert record.query_embedding == [0.2, 0.8] and record.document_embeddings == [[0.3, 0.7]]


def test_langchain_document_id_from_the_retriever_output():
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough
    from openinference.instrumentation.langchain import LangChainInstrumentor

    class Retriever(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            return [Document(id="kb-17", page_content="Cancel under Settings.", metadata={"source": "/kb/billing.md"}),
                    Document(page_content="Refunds take five days.", metadata={"source": "/kb/refunds.md"})]

    for exporter in instrumented(LangChainInstrumentor(), "lc-app", "1"):
        chain = ({"context": Retriever(), "question": RunnablePassthrough()}
                 | ChatPromptTemplate.from_template("{context} {question}") | FakeListChatModel(responses=["ok"]) | StrOutputParser())
        chain.invoke("How do I cancel?")
        record = assemble(exporter.get_finished_spans())
    # Document.id first; the metadata source only for the document without one
    assert [d.id for d in record.retrieved] == ["kb-17", "/kb/refunds.md"]
