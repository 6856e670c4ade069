"""Spans from real instrumentation (the project's semconv via the OTel SDK, LangChain, LlamaIndex,
pydantic-ai's GenAI instrumentation) decoded and assembled into QueryRecords."""

from __future__ import annotations

import json

import pytest
from opentelemetry.trace import SpanKind

from rag_monitor import semconv as sc
from rag_monitor.collectors import TraceAssembler
from tests.collectors.helpers import assemble, decode, memory_tracer
from tests.services import require_module

DOCS = [("d1", "Cancel under Settings > Billing.", 0.9), ("d2", "Refunds take five days.", 0.7), ("d3", "Our office is in Lyon.", 0.2)]
QUERY, ANSWER = "How do I cancel?", "Cancel under Settings > Billing."


def _set_docs(span, prefix, docs):
    for i, (doc_id, content, score) in enumerate(docs):
        span.set_attribute(f"{prefix}.{i}.document.id", doc_id)
        span.set_attribute(f"{prefix}.{i}.document.content", content)
        span.set_attribute(f"{prefix}.{i}.document.score", score)
        span.set_attribute(f"{prefix}.{i}.document.metadata", json.dumps({"locale": "en"}))


def _sdk_semconv_trace(feedback: bool = True):
    """The SDK's span shapes, emitted with the plain OTel SDK and the semconv names."""
    with memory_tracer("support-bot", "2026.11.30") as (provider, exporter):
        tracer = provider.get_tracer("rag_monitor")
        with tracer.start_as_current_span(sc.RAG_QUERY_SPAN_NAME, kind=SpanKind.SERVER) as root:
            root.set_attributes(
                {
                    sc.OPENINFERENCE_SPAN_KIND: sc.SPAN_KIND_CHAIN, sc.INPUT_VALUE: QUERY, sc.SESSION_ID: "s1",
                    sc.USER_ID: "u1", sc.RAG_RELEASE: "2026.11.30", sc.RAG_VARIANT: "candidate", sc.RAG_TENANT: "acme",
                    sc.RAG_INTENT: "billing", sc.RAG_ANSWER_CONFIDENCE: 0.8,
                }
            )
            with tracer.start_as_current_span("embed") as s:
                s.set_attributes({sc.RAG_STAGE: "embed", sc.OPENINFERENCE_SPAN_KIND: "EMBEDDING", sc.EMBEDDING_MODEL_NAME: "minilm"})
                s.set_attribute("embedding.embeddings.0.embedding.vector", [0.1, 0.2, 0.3])
                s.set_attribute("embedding.embeddings.0.embedding.text", QUERY)
            with tracer.start_as_current_span("filter") as s:
                s.set_attributes({sc.RAG_STAGE: "filter", sc.RAG_FILTER_KIND: "relevance", sc.RAG_FILTER_PREDICATE: "locale = 'en'",
                                  sc.RAG_FILTER_CANDIDATES_IN: 40, sc.RAG_FILTER_CANDIDATES_OUT: 12, sc.RAG_FILTER_EXCLUDED_IDS: ["d9"]})
            with tracer.start_as_current_span("retrieve") as s:
                s.set_attributes({sc.RAG_STAGE: "retrieve", sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER"})
                _set_docs(s, sc.RETRIEVAL_DOCUMENTS, DOCS)
            with tracer.start_as_current_span("rerank") as s:
                s.set_attributes({sc.RAG_STAGE: "rerank", sc.OPENINFERENCE_SPAN_KIND: "RERANKER", sc.RERANKER_TOP_K: 2})
                _set_docs(s, sc.RERANKER_INPUT_DOCUMENTS, DOCS)
                _set_docs(s, sc.RERANKER_OUTPUT_DOCUMENTS, DOCS[:2])
            with tracer.start_as_current_span("generate") as s:
                s.set_attributes({sc.RAG_STAGE: "generate", sc.OPENINFERENCE_SPAN_KIND: "LLM", sc.LLM_MODEL_NAME: "gpt-4o-mini",
                                  sc.LLM_TOKEN_COUNT_PROMPT: 812, sc.LLM_TOKEN_COUNT_COMPLETION: 64,
                                  sc.GEN_AI_USAGE_INPUT_TOKENS: 812, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 64, sc.RAG_TIME_TO_FIRST_TOKEN: 0.25})
            root.set_attributes({sc.OUTPUT_VALUE: ANSWER, sc.RAG_CITATIONS: ["d1"]})
            if feedback:
                with tracer.start_as_current_span(sc.RAG_FEEDBACK_SPAN_NAME) as s:
                    s.set_attributes({sc.RAG_FEEDBACK_KIND: "thumbs_down", sc.RAG_FEEDBACK_REASON: "wrong"})
        return exporter.get_finished_spans()


def test_sdk_dialect_from_semconv_spans():
    record = assemble(_sdk_semconv_trace())
    assert record.dialect == "sdk" and record.service == "support-bot"
    assert (record.query, record.answer, record.session_id, record.user_id) == (QUERY, ANSWER, "s1", "u1")
    assert (record.release, record.variant, record.tenant, record.intent) == ("2026.11.30", "candidate", "acme", "billing")
    assert record.confidence == 0.8 and record.citations == ["d1"]
    assert [s.name for s in record.stages] == ["embed", "filter", "retrieve", "rerank", "generate"]
    assert [d.id for d in record.retrieved] == ["d1", "d2", "d3"] and record.retrieved[0].metadata == {"locale": "en"}
    assert [d.id for d in record.delivered] == ["d1", "d2"] and record.delivered[1].content == DOCS[1][1]
    assert (record.llm_model, record.prompt_tokens, record.completion_tokens, record.llm_calls) == ("gpt-4o-mini", 812, 64, 1)
    assert record.time_to_first_token_s == 0.25
    assert record.embedding_model == "minilm" and record.query_embedding == [0.1, 0.2, 0.3]
    f = record.filters[0]
    assert (f.kind, f.candidates_in, f.candidates_out, f.excluded_ids) == ("relevance", 40, 12, ["d9"])
    assert [(fb.kind, fb.reason) for fb in record.feedback] == [("thumbs_down", "wrong")]


def test_sdk_dialect_with_the_real_sdk():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rag_monitor import sdk

    exporter = InMemorySpanExporter()
    monitor = sdk.init(service_name="support-bot", release="r7", span_exporter=exporter)
    try:
        with monitor.query(QUERY, session_id="s1", user_id="u1", tenant="acme") as q:
            q.filter(kind="relevance", predicate="locale = 'en'", candidates_in=40, candidates_out=12, excluded_ids=["d9"])
            with q.retrieve() as r:
                r.documents([{"id": i, "content": c, "score": s} for i, c, s in DOCS])
            with q.rerank(model="bge", top_k=2) as rr:
                rr.documents([{"id": i, "content": c, "score": s} for i, c, s in DOCS[:2]])
            with q.generate(model="gpt-4o-mini") as g:
                g.tokens(prompt=812, completion=64)
            q.answer(ANSWER, citations=["d1"], confidence=0.8)
        monitor.feedback(q.trace_id, "thumbs_down", reason="wrong")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    out = TraceAssembler().add(decode(list(exporter.get_finished_spans())))
    assert len(out.records) == 1, out
    record = out.records[0]
    assert (record.dialect, record.query, record.answer, record.release, record.session_id) == ("sdk", QUERY, ANSWER, "r7", "s1")
    assert [s.name for s in record.stages] == ["filter", "retrieve", "rerank", "generate"]
    assert [d.id for d in record.delivered] == ["d1", "d2"] and len(record.retrieved) == 3
    assert (record.llm_model, record.prompt_tokens, record.completion_tokens, record.llm_calls) == ("gpt-4o-mini", 812, 64, 1)
    assert record.filters[0].excluded_ids == ["d9"] and record.citations == ["d1"]
    assert [fb.kind for fb in record.feedback] + [lf.feedback.kind for lf in out.late_feedback] == ["thumbs_down"]


def test_without_q_context_a_filtered_out_document_is_not_shown_as_delivered():
    """The app's filter removed d2 after retrieval; no q.context(): the reviewer's contexts leave it out."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rag_monitor import sdk
    from rag_monitor.review.blind import answer_view, candidates

    exporter = InMemorySpanExporter()
    monitor = sdk.init(service_name="support-bot", release="r7", span_exporter=exporter)
    try:
        with monitor.query(QUERY) as q:
            with q.retrieve() as r:
                r.documents([{"id": i, "content": c, "score": s} for i, c, s in DOCS])
            q.filter(kind="relevance", excluded_documents=[{"id": "d2", "content": DOCS[1][1]}])
            q.filter(kind="entitlement", excluded_ids=["d3"])
            q.answer(ANSWER)
        monitor.force_flush()
    finally:
        monitor.shutdown()
    (record,) = TraceAssembler().add(decode(list(exporter.get_finished_spans()))).records
    assert [d.id for d in record.delivered] == ["d1"] and len(record.retrieved) == 3
    assert answer_view(1, record)["contexts"] == [DOCS[0][1]]
    # d2 is still judged blind as a candidate (a relevance filter's removal); d3 (entitlement) never shown.
    assert sorted(c.document_id for c in candidates(1, record)[0]) == ["d1", "d2"]


# --- LangChain ----------------------------------------------------------------------------------


def instrumented(instrumentor, service: str, version: str):
    """Spans of ``service`` traced by a real OpenInference instrumentor into memory; uninstruments after."""
    with memory_tracer(service, version) as (provider, exporter):
        instrumentor.instrument(tracer_provider=provider)
        try:
            yield exporter
        finally:
            instrumentor.uninstrument()


@pytest.fixture
def langchain_instrumented():
    from openinference.instrumentation.langchain import LangChainInstrumentor

    yield from instrumented(LangChainInstrumentor(), "lc-app", "lc-1.0")


def test_langchain_openinference(langchain_instrumented):
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class KeywordRetriever(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            words = set(query.lower().strip("?").split())
            hits = [(i, c) for i, c, _ in DOCS if words & set(c.lower().strip(".").split())]
            return [Document(page_content=c, metadata={"doc_id": i}) for i, c in hits]

    class FakeChat(GenericFakeChatModel):
        @property
        def _identifying_params(self):
            return {"model_name": "gpt-4o-mini"}

    llm = FakeChat(messages=iter([AIMessage(content=ANSWER, usage_metadata={"input_tokens": 120, "output_tokens": 9, "total_tokens": 129})]))
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    chain = ({"context": KeywordRetriever(), "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()).with_config(
        run_name="rag_chain", metadata={"session_id": "s-lc"}
    )
    assert chain.invoke(QUERY) == ANSWER
    record = assemble(langchain_instrumented.get_finished_spans())
    assert record.dialect == "openinference"
    assert (record.query, record.answer, record.session_id, record.release, record.service) == (QUERY, ANSWER, "s-lc", "lc-1.0", "lc-app")
    assert [d.id for d in record.delivered] == ["d1"] and record.delivered[0].content == DOCS[0][1]
    assert record.delivered[0].metadata == {"doc_id": "d1"}
    assert (record.prompt_tokens, record.completion_tokens, record.llm_calls) == (120, 9, 1)
    assert record.llm_model == "gpt-4o-mini"
    assert {s.name for s in record.stages} == {"retrieve", "generate"}
    assert record.stage("retrieve").end_ns <= record.stage("generate").start_ns


# --- LlamaIndex ---------------------------------------------------------------------------------


@pytest.fixture
def llama_index_instrumented():
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    yield from instrumented(LlamaIndexInstrumentor(), "li-app", "li-2.0")


def test_llama_index_openinference(llama_index_instrumented):
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.llms.callbacks import llm_completion_callback
    from openinference.instrumentation import using_attributes

    class UsageMockLLM(MockLLM):
        """MockLLM that answers a fixed text and reports token usage like a real provider."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="gpt-4o-mini", num_output=16)

        @llm_completion_callback()
        def complete(self, prompt, formatted=False, **kwargs):
            return CompletionResponse(text=ANSWER, raw={"usage": {"prompt_tokens": 150, "completion_tokens": 11, "total_tokens": 161}})

    previous = Settings._llm, Settings._embed_model
    Settings.llm, Settings.embed_model = UsageMockLLM(), MockEmbedding(embed_dim=8)
    try:
        index = VectorStoreIndex.from_documents([Document(text=c, doc_id=i) for i, c, _ in DOCS])
        # Building the index traces document embedding and parsing: not queries, no records.
        build = TraceAssembler().add(decode(llama_index_instrumented.get_finished_spans()))
        assert build.records == [] and build.dropped_traces["not_rag"] >= 1
        llama_index_instrumented.clear()
        with using_attributes(session_id="s-li"):
            response = index.as_query_engine(similarity_top_k=2).query(QUERY)
    finally:
        Settings._llm, Settings._embed_model = previous
    assert str(response) == ANSWER
    spans = llama_index_instrumented.get_finished_spans()
    record = assemble(spans)
    assert record.dialect == "openinference"
    assert (record.query, record.answer, record.session_id, record.release) == (QUERY, ANSWER, "s-li", "li-2.0")
    assert len(record.delivered) == 2 and {d.content for d in record.delivered} <= {c for _, c, _ in DOCS}
    assert all(d.id and d.score is not None for d in record.delivered)
    # .predict wraps .complete: one call, tokens once.
    assert sum(1 for s in spans if s.attributes.get("openinference.span.kind") == "LLM") == 2
    assert (record.llm_calls, record.prompt_tokens, record.completion_tokens, record.llm_model) == (1, 150, 11, "gpt-4o-mini")
    # nested embedding spans too: one embedding call, one LLM call, each with its model
    assert sorted((c.kind, c.model, c.input_tokens, c.output_tokens) for c in record.model_calls) == [
        ("embedding", next(c.model for c in record.model_calls if c.kind == "embedding"), 0, 0), ("llm", "gpt-4o-mini", 150, 11)]
    # Nested same-kind spans time one stage each (outermost).
    assert sorted(s.name for s in record.stages) == ["embed", "generate", "retrieve"]
    assert record.query_embedding == [0.5] * 8


# --- OTel GenAI ---------------------------------------------------------------------------------


def test_genai_dialect_from_pydantic_ai():
    """pydantic-ai (installed with Phoenix) emits real gen_ai.* spans; the app's root and its
    retrieval span are hand-emitted with the OTel SDK (no installed package emits those)."""
    require_module("pydantic_ai")  # installed with arize-phoenix (the phoenix extra)
    from pydantic_ai import Agent
    from pydantic_ai.embeddings import Embedder
    from pydantic_ai.embeddings.test import TestEmbeddingModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.models.test import TestModel

    with memory_tracer("genai-app", "g-3") as (provider, exporter):
        settings = InstrumentationSettings(tracer_provider=provider, version=5)
        tracer = provider.get_tracer("app")
        embedder = Embedder(TestEmbeddingModel(), instrument=settings)
        agent = Agent(TestModel(custom_output_text=ANSWER))
        agent.instrument = settings
        with tracer.start_as_current_span("answer_question", kind=SpanKind.SERVER):
            embedder.embed_query_sync(QUERY)
            with tracer.start_as_current_span("retrieval support-kb", kind=SpanKind.CLIENT) as span:
                span.set_attributes({sc.GEN_AI_OPERATION_NAME: "retrieval", "gen_ai.retrieval.query.text": QUERY,
                                     "gen_ai.retrieval.documents": json.dumps([{"id": i, "score": s, "content": c} for i, c, s in DOCS[:2]])})
            result = agent.run_sync(QUERY, instructions="Context:\n" + "\n".join(c for _, c, _ in DOCS[:2]))
        assert result.output == ANSWER
        spans = exporter.get_finished_spans()
    chat = next(s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat")
    record = assemble(spans)
    assert record.dialect == "genai" and (record.query, record.answer, record.release) == (QUERY, ANSWER, "g-3")
    assert record.session_id == chat.attributes["gen_ai.conversation.id"]
    assert [d.id for d in record.delivered] == ["d1", "d2"]
    assert record.llm_model == "test" and record.llm_calls == 1
    assert (record.prompt_tokens, record.completion_tokens) == (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"])
    assert sorted(s.name for s in record.stages) == ["embed", "generate", "retrieve"]


def test_same_pipeline_same_record_across_dialects():
    """The SDK shapes and an OpenInference-only rendering of one pipeline give the same record."""
    sdk_record = assemble(_sdk_semconv_trace(feedback=False))
    with memory_tracer("support-bot", "2026.11.30") as (provider, exporter):
        tracer = provider.get_tracer("oi")
        with tracer.start_as_current_span("rag_chain") as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: QUERY, sc.SESSION_ID: "s1"})
            with tracer.start_as_current_span("retriever") as s:
                s.set_attribute(sc.OPENINFERENCE_SPAN_KIND, "RETRIEVER")
                _set_docs(s, sc.RETRIEVAL_DOCUMENTS, DOCS)
            with tracer.start_as_current_span("reranker") as s:
                s.set_attribute(sc.OPENINFERENCE_SPAN_KIND, "RERANKER")
                _set_docs(s, sc.RERANKER_OUTPUT_DOCUMENTS, DOCS[:2])
            with tracer.start_as_current_span("llm") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "LLM", sc.LLM_MODEL_NAME: "gpt-4o-mini",
                                  sc.LLM_TOKEN_COUNT_PROMPT: 812, sc.LLM_TOKEN_COUNT_COMPLETION: 64})
            root.set_attribute(sc.OUTPUT_VALUE, ANSWER)
        oi_record = assemble(exporter.get_finished_spans())
    keys = ("query", "answer", "session_id", "release", "service", "llm_model", "prompt_tokens", "completion_tokens", "llm_calls")
    assert {k: getattr(oi_record, k) for k in keys} == {k: getattr(sdk_record, k) for k in keys}
    assert oi_record.delivered == sdk_record.delivered and oi_record.retrieved == sdk_record.retrieved
