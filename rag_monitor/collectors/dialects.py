"""One trace's spans -> one ``QueryRecord``, whichever instrumentation emitted them.

    record = build_record(spans)            # None when the trace is not a RAG query
    record.dialect                          # "sdk", "openinference" or "genai"

Three dialects, one record for the same pipeline:

- ``sdk``: this project's SDK: root span ``rag.query``, stages named by ``rag.stage``,
  OpenInference attributes for documents, embeddings and tokens.
- ``openinference``: LangChain / LlamaIndex instrumentors. Stages come from the span kind; the
  instrumentors nest spans of one kind (LlamaIndex ``.retrieve`` > ``._retrieve``, ``.predict``
  > ``.chat``), so the outermost span of a kind times the stage and only call spans with no
  call span of their kind below them are counted as calls (tokens live on the inner one).
- ``genai``: OTel GenAI conventions: ``gen_ai.operation.name`` chat / text_completion ->
  generate, embeddings -> embed, retrieval -> retrieve.

Every LLM, embedding and rerank call becomes a ``ModelCall`` with its own model and tokens
(``usage.py``); documents and vectors are read by ``documents.py``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_monitor import semconv as sc
from rag_monitor.collectors.documents import HIDDEN_VALUE, assign_embeddings, documents, genai_documents, output_document_ids, vectors
from rag_monitor.collectors.otlp import STATUS_ERROR, Span
from rag_monitor.collectors.usage import (
    CALL_EMBEDDING, CALL_LLM, CALL_RERANK, cache_lookups, call_kind, has_tokens, model_call, retrieval_call,
)
from rag_monitor.collectors.values import (
    as_float,
    as_int,
    as_text,
    chat_answer,
    chat_query,
    input_text,
    optional_str,
    output_text,
    string_list,
)
from rag_monitor.record import HIDDEN_FIELDS, Document, Feedback, FilterApplied, QueryRecord, StageTiming

__all__ = ["DialectSettings", "build_record", "detect_dialect", "feedback_from_span", "is_feedback_span", "lost_root"]

OPENINFERENCE_STAGE_BY_KIND = {
    sc.SPAN_KIND_RETRIEVER: sc.STAGE_RETRIEVE,
    sc.SPAN_KIND_RERANKER: sc.STAGE_RERANK,
    sc.SPAN_KIND_LLM: sc.STAGE_GENERATE,
    sc.SPAN_KIND_EMBEDDING: sc.STAGE_EMBED,
}
GENAI_STAGE_BY_OPERATION = {
    sc.GEN_AI_OPERATION_CHAT: sc.STAGE_GENERATE,
    sc.GEN_AI_OPERATION_TEXT_COMPLETION: sc.STAGE_GENERATE,
    sc.GEN_AI_OPERATION_GENERATE_CONTENT: sc.STAGE_GENERATE,
    sc.GEN_AI_OPERATION_EMBEDDINGS: sc.STAGE_EMBED,
    sc.GEN_AI_OPERATION_RETRIEVAL: sc.STAGE_RETRIEVE,
}

_QUERY_STAGES = frozenset({sc.STAGE_RETRIEVE, sc.STAGE_RERANK, sc.STAGE_GENERATE})


@dataclass(frozen=True, slots=True)
class DialectSettings:
    """The attribute mapping an operator can tune in ``rag_monitor/defaults/collectors/ingest.yaml`` (``mapping:``)."""

    document_id_metadata_keys: tuple[str, ...] = ("id", "doc_id", "document_id", "source", "file_name", "url")
    """Metadata keys tried, in order, for a document id when the span has no ``document.id``."""
    query_input_keys: tuple[str, ...] = ("query", "question", "input", "query_str")
    """Keys of a JSON ``input.value`` object that hold the user's query."""
    answer_output_keys: tuple[str, ...] = ("answer", "output", "response", "result", "text")
    document_committed_at_metadata_keys: tuple[str, ...] = (sc.DOCUMENT_COMMITTED_AT_KEY, "last_modified", "updated_at", "last_modified_date")
    """Metadata keys tried, in order, for the commit time of the document version a query was served
    (Unix seconds, ISO 8601 or a date: LlamaIndex's file readers set ``last_modified_date``)."""

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> DialectSettings:
        data = data or {}
        if "limits" in data or "mapping" in data:  # a whole ingest.yaml, not just its mapping
            data = data.get("mapping") or {}
        data = dict(data)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown mapping key(s) {unknown}; known: {sorted(known)}")
        return cls(**{k: tuple(v) for k, v in data.items()})


DEFAULT_SETTINGS = DialectSettings()


# --- small helpers -------------------------------------------------------------------------


def is_feedback_span(span: Span) -> bool:
    return span.name == sc.RAG_FEEDBACK_SPAN_NAME or sc.RAG_FEEDBACK_KIND in span.attributes


_FEEDBACK_PAYLOAD = {sc.FEEDBACK_CITATION_CLICK: sc.DOCUMENT_ID, sc.FEEDBACK_EDIT: sc.OUTPUT_VALUE}


def feedback_from_span(span: Span) -> Feedback | None:
    attrs = span.attributes
    kind = attrs.get(sc.RAG_FEEDBACK_KIND)
    if not isinstance(kind, str) or not kind:
        return None
    # The payload under its OpenInference name: the clicked citation's id, the edited answer.
    value = attrs.get(sc.RAG_FEEDBACK_VALUE, attrs.get(_FEEDBACK_PAYLOAD.get(kind, "")))
    if isinstance(value, (bool, int)):
        value = float(value)
    elif not isinstance(value, (float, str)):
        value = None
    reason = attrs.get(sc.RAG_FEEDBACK_REASON)
    return Feedback(kind=kind, time_ns=span.end_ns or span.start_ns, reason=str(reason) if reason else None, value=value,
                    span_id=span.span_id)


def _oi_kind(span: Span) -> str | None:
    kind = span.attributes.get(sc.OPENINFERENCE_SPAN_KIND)
    return kind.upper() if isinstance(kind, str) else None


def detect_dialect(spans: Sequence[Span]) -> str | None:
    """``sdk``, ``openinference``, ``genai`` or None (no RAG-shaped span in the trace)."""
    openinference = genai = False
    for span in spans:
        attrs = span.attributes
        if span.name == sc.RAG_QUERY_SPAN_NAME or sc.RAG_STAGE in attrs:
            return "sdk"
        if sc.OPENINFERENCE_SPAN_KIND in attrs:
            openinference = True
        elif sc.GEN_AI_OPERATION_NAME in attrs:
            genai = True
    return "openinference" if openinference else "genai" if genai else None


def _hidden(attrs: dict[str, Any]) -> list[str]:
    """What the app hid: ``rag.content.hidden``, or OpenInference's placeholder on the root."""
    marked = attrs.get(sc.RAG_CONTENT_HIDDEN)
    marked = {marked} if isinstance(marked, str) else set(marked) if isinstance(marked, list) else set()
    if attrs.get(sc.INPUT_VALUE) == HIDDEN_VALUE:
        marked.add("query")
    if attrs.get(sc.OUTPUT_VALUE) == HIDDEN_VALUE:
        marked.add("answer")
    return [name for name in HIDDEN_FIELDS if name in marked]


# --- the record builder ---------------------------------------------------------------------------


_BY_TIME = operator.attrgetter("start_ns", "end_ns")


class _Trace:
    """Index over one trace's spans: by id, children, ancestors."""

    def __init__(self, spans: Sequence[Span]):
        self.spans = sorted(spans, key=_BY_TIME)
        self.by_id = {s.span_id: s for s in self.spans}

    def ancestors(self, span: Span):
        seen = set()
        parent_id = span.parent_span_id
        while parent_id and parent_id in self.by_id and parent_id not in seen:
            seen.add(parent_id)
            parent = self.by_id[parent_id]
            yield parent
            parent_id = parent.parent_span_id

    def root(self, dialect: str) -> Span:
        """The span that stands for the query as a whole."""
        if dialect == "sdk":
            named = [s for s in self.spans if s.name == sc.RAG_QUERY_SPAN_NAME]
            if named:
                return named[0]
        candidates = [s for s in self.spans if not is_feedback_span(s)] or list(self.spans)
        if dialect == "openinference":
            # The outermost OpenInference span: the app's own HTTP server span may sit above it.
            oi = [s for s in candidates if _oi_kind(s) and not any(_oi_kind(a) for a in self.ancestors(s))]
            if oi:
                return min(oi, key=lambda s: (s.start_ns, -s.end_ns))
        tops = [s for s in candidates if s.parent_span_id is None or s.parent_span_id not in self.by_id]
        return min(tops or candidates, key=lambda s: (s.start_ns, -s.end_ns))

    def calls(self) -> dict[str, str]:
        """span id -> call kind of the spans that are model calls: innermost of their kind only
        (an LLM span with an LLM span below it is a wrapper, LlamaIndex ``.predict`` > ``.chat``)."""
        kinds = {s.span_id: kind for s in self.spans if (kind := call_kind(s)) is not None}
        wrappers = {(p.span_id, kinds[s.span_id]) for s in self.spans if s.span_id in kinds for p in self.ancestors(s)}
        return {span_id: kind for span_id, kind in kinds.items() if (span_id, kind) not in wrappers}


def _stage_name(span: Span, dialect: str) -> str | None:
    attrs = span.attributes
    stage = attrs.get(sc.RAG_STAGE)
    if isinstance(stage, str) and stage:
        return stage
    if dialect == "sdk":
        return None  # the SDK names every stage; other spans below it are detail
    kind = _oi_kind(span)
    if kind in OPENINFERENCE_STAGE_BY_KIND:
        return OPENINFERENCE_STAGE_BY_KIND[kind]
    operation = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if isinstance(operation, str):
        return GENAI_STAGE_BY_OPERATION.get(operation)
    return None


def lost_root(spans: Sequence[Span]) -> bool:
    """True when the span standing for the query is missing: an SDK trace without ``rag.query``,
    or another dialect's trace whose topmost span is one of its stages (a retrieval, an LLM
    call). Such a trace is not a query; the agent counts it apart."""
    dialect = detect_dialect(spans)
    if dialect is None:
        return False
    if dialect == "sdk":
        return not any(s.name == sc.RAG_QUERY_SPAN_NAME for s in spans)
    return _stage_name(_Trace(spans).root(dialect), dialect) is not None


def build_record(spans: Sequence[Span], settings: DialectSettings = DEFAULT_SETTINGS) -> QueryRecord | None:
    """Assemble one trace's spans into a ``QueryRecord``; None if no span looks like a RAG query."""
    if not spans:
        return None
    dialect = detect_dialect(spans)
    if dialect is None:
        return None
    trace = _Trace(spans)
    root = trace.root(dialect)
    attrs = root.attributes
    resource = root.resource

    record = QueryRecord(
        trace_id=root.trace_id,
        root_span_id=root.span_id,
        start_ns=root.start_ns,
        end_ns=root.end_ns,
        dialect=dialect,
        service=as_text(resource.get(sc.SERVICE_NAME)),
        session_id=optional_str(attrs.get(sc.SESSION_ID)),
        user_id=optional_str(attrs.get(sc.USER_ID)),
        release=as_text(attrs.get(sc.RAG_RELEASE) or resource.get(sc.SERVICE_VERSION)),
        prompt_version=optional_str(attrs.get(sc.RAG_PROMPT_VERSION)),
        config_version=optional_str(attrs.get(sc.RAG_CONFIG_VERSION)),
        variant=as_text(attrs.get(sc.RAG_VARIANT)) or sc.VARIANT_PRODUCTION,
        tenant=optional_str(attrs.get(sc.RAG_TENANT)),
        intent=optional_str(attrs.get(sc.RAG_INTENT)),
        route=optional_str(attrs.get(sc.RAG_ROUTE)),
        refused=bool(attrs.get(sc.RAG_ANSWER_REFUSED, False)),
        confidence=as_float(attrs.get(sc.RAG_ANSWER_CONFIDENCE)),
        citations=string_list(attrs.get(sc.RAG_CITATIONS)),
        shadow_of=optional_str(attrs.get(sc.RAG_SHADOW_OF)),
        candidate=optional_str(attrs.get(sc.RAG_SHADOW_CANDIDATE)),
        error=(root.status_message or "error") if root.status_code == STATUS_ERROR else None,
        hidden=_hidden(attrs),
        cache=cache_lookups(attrs),
    )
    if "query" not in record.hidden:
        record.query = input_text(attrs.get(sc.INPUT_VALUE), settings)
    if "answer" not in record.hidden:
        record.answer = output_text(attrs.get(sc.OUTPUT_VALUE), settings)

    id_keys = settings.document_id_metadata_keys
    reranked: list[Document] | None = None
    context_ids: list[str] | None = None
    retriever_with_docs: set[str] = set()
    found_vectors: list = []
    chat_spans: list[Span] = []
    calls = trace.calls()

    for span in trace.spans:
        a = span.attributes
        kind = calls.get(span.span_id)
        if kind is not None:
            call = model_call(span, kind)
            if kind == CALL_LLM:
                record.model_calls.append(call)
                chat_spans.append(span)
            elif has_tokens(call) or (kind in (CALL_EMBEDDING, CALL_RERANK) and call.model):
                record.model_calls.append(call)  # a tokenless rerank may be priced per call
        if span is root:
            continue
        if is_feedback_span(span):
            feedback = feedback_from_span(span)
            if feedback is not None:
                record.feedback.append(feedback)
            continue
        stage = _stage_name(span, dialect)
        if stage is None:
            continue
        # Ancestors matter only where instrumentors nest spans (never in the SDK's flat stages).
        ancestors = list(trace.ancestors(span)) if dialect != "sdk" or span.parent_span_id != root.span_id else []
        nested = dialect != "sdk" and any(_stage_name(p, dialect) == stage for p in ancestors)
        if not nested:
            error = (span.status_message or "error") if span.status_code == STATUS_ERROR else None
            record.stages.append(StageTiming(stage, span.span_id, span.start_ns, span.end_ns, error))

        if stage == sc.STAGE_FILTER or sc.RAG_FILTER_KIND in a:
            record.filters.append(
                FilterApplied(
                    kind=as_text(a.get(sc.RAG_FILTER_KIND)) or sc.FILTER_RELEVANCE,
                    predicate=as_text(a.get(sc.RAG_FILTER_PREDICATE)),
                    candidates_in=as_int(a[sc.RAG_FILTER_CANDIDATES_IN]) if sc.RAG_FILTER_CANDIDATES_IN in a else None,
                    candidates_out=as_int(a[sc.RAG_FILTER_CANDIDATES_OUT]) if sc.RAG_FILTER_CANDIDATES_OUT in a else None,
                    excluded_ids=string_list(a.get(sc.RAG_FILTER_EXCLUDED_IDS)),
                    excluded_documents=documents(a, sc.RAG_FILTER_EXCLUDED_DOCUMENTS, id_keys),
                )
            )
        if sc.RAG_CONTEXT_DOCUMENT_IDS in a:
            context_ids = string_list(a[sc.RAG_CONTEXT_DOCUMENT_IDS])
        if stage == sc.STAGE_RETRIEVE:
            searched = None if nested else retrieval_call(span)
            if searched is not None:
                record.model_calls.append(searched)
            # Outermost retriever that has documents wins; an inner one repeats them (LlamaIndex).
            if not any(p.span_id in retriever_with_docs for p in ancestors):
                docs = documents(a, sc.RETRIEVAL_DOCUMENTS, id_keys, output_document_ids(a.get(sc.OUTPUT_VALUE))) or genai_documents(a)
                if docs:
                    retriever_with_docs.add(span.span_id)
                    record.retrieved.extend(docs)
            if not record.query and "query" not in record.hidden and isinstance(a.get(sc.GEN_AI_RETRIEVAL_QUERY_TEXT), str):
                record.query = a[sc.GEN_AI_RETRIEVAL_QUERY_TEXT]
        elif stage == sc.STAGE_RERANK and not nested:
            out = documents(a, sc.RERANKER_OUTPUT_DOCUMENTS, id_keys)
            if out:
                reranked = (reranked or []) + out
        elif stage == sc.STAGE_EMBED:
            items = vectors(a)
            if items:
                role = a.get(sc.RAG_EMBEDDING_ROLE)
                found_vectors.append((role if role in sc.EMBEDDING_ROLES else None, items))
            model = a.get(sc.EMBEDDING_MODEL_NAME) or a.get(sc.GEN_AI_REQUEST_MODEL)
            if model and record.embedding_model is None:
                record.embedding_model = str(model)
        elif stage == sc.STAGE_GENERATE:
            if sc.RAG_TIME_TO_FIRST_TOKEN in a and record.time_to_first_token_s is None:
                record.time_to_first_token_s = as_float(a[sc.RAG_TIME_TO_FIRST_TOKEN])

    if dialect != "sdk" and not any(st.name in _QUERY_STAGES for st in record.stages):
        # An instrumented app also traces work that is not a query (LlamaIndex embedding
        # documents while building an index): no retrieval and no generation, no record.
        return None
    _summarise_llm_calls(record)
    if not record.query and chat_spans and "query" not in record.hidden:
        record.query = chat_query(chat_spans[0])
    if not record.answer and chat_spans and "answer" not in record.hidden:
        record.answer = chat_answer(chat_spans[-1])
    if dialect != "sdk" and not record.session_id:
        record.session_id = optional_str(attrs.get(sc.GEN_AI_CONVERSATION_ID)) or next(
            (optional_str(s.attributes.get(sc.SESSION_ID) or s.attributes.get(sc.GEN_AI_CONVERSATION_ID)) for s in trace.spans if s.attributes.get(sc.SESSION_ID) or s.attributes.get(sc.GEN_AI_CONVERSATION_ID)),
            None,
        )

    # Without q.context(ids): the reranker's output, else the retrieved documents, less every
    # document a recorded filter (entitlement or relevance) removed: the generator never saw those.
    delivered = _not_excluded(reranked if reranked is not None else list(record.retrieved), record.filters)
    if context_ids is not None:
        known = {d.id: d for d in [*(reranked or []), *record.retrieved] if d.id is not None}
        delivered = [known.get(doc_id) or Document(id=doc_id) for doc_id in context_ids]
    record.delivered = delivered
    assign_embeddings(record, found_vectors)
    return record


def _not_excluded(docs: list[Document], filters: list[FilterApplied]) -> list[Document]:
    ids = {i for f in filters for i in f.excluded_ids} | {d.id for f in filters for d in f.excluded_documents if d.id}
    contents = {d.content for f in filters for d in f.excluded_documents if d.content}
    return [d for d in docs if not (d.id in ids if d.id is not None else d.content in contents)]


def _summarise_llm_calls(record: QueryRecord) -> None:
    """The record's LLM summary for existing readers: calls, tokens summed over every LLM call,
    and the model of the last one (the generator, which produced the answer). Cost comes from
    ``model_calls``, each call at its own model's price."""
    llm = [c for c in record.model_calls if c.kind == CALL_LLM]
    record.llm_calls = len(llm)
    record.prompt_tokens = sum(c.input_tokens for c in llm)
    record.completion_tokens = sum(c.output_tokens for c in llm)
    models = [c.model for c in llm if c.model]
    if models:
        record.llm_model = models[-1]


__all__ += ["CALL_EMBEDDING", "CALL_RERANK"]
