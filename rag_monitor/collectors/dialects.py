"""One trace's spans -> one ``QueryRecord``, whichever instrumentation emitted them.

    record = build_record(spans)            # None when the trace is not a RAG query
    record.dialect                          # "sdk", "openinference" or "genai"

Three dialects, one record for the same pipeline:

- ``sdk``: this project's SDK: root span ``rag.query``, stages named by ``rag.stage``,
  OpenInference attributes for documents, embeddings and tokens.
- ``openinference``: LangChain / LlamaIndex instrumentors. Stages come from the span kind; the
  instrumentors nest spans of one kind (LlamaIndex ``.retrieve`` > ``._retrieve``, ``.predict``
  > ``.chat``), so the outermost span of a kind times the stage and only LLM spans with no LLM
  span below them are counted as calls (tokens live on the inner one).
- ``genai``: OTel GenAI conventions: ``gen_ai.operation.name`` chat / text_completion ->
  generate, embeddings -> embed, retrieval -> retrieve.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import STATUS_ERROR, Span
from rag_monitor.record import Document, Feedback, FilterApplied, QueryRecord, StageTiming

__all__ = ["DialectSettings", "build_record", "detect_dialect", "feedback_from_span", "is_feedback_span"]

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
    """The attribute mapping an operator can tune in ``collectors/ingest.yaml`` (``mapping:``)."""

    document_id_metadata_keys: tuple[str, ...] = ("id", "doc_id", "document_id", "source", "file_name", "url")
    """Metadata keys tried, in order, for a document id when the span has no ``document.id``."""
    query_input_keys: tuple[str, ...] = ("query", "question", "input", "query_str")
    """Keys of a JSON ``input.value`` object that hold the user's query."""
    answer_output_keys: tuple[str, ...] = ("answer", "output", "response", "result", "text")

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


def feedback_from_span(span: Span) -> Feedback | None:
    attrs = span.attributes
    kind = attrs.get(sc.RAG_FEEDBACK_KIND)
    if not isinstance(kind, str) or not kind:
        return None
    value = attrs.get(sc.RAG_FEEDBACK_VALUE)
    if isinstance(value, (bool, int)):
        value = float(value)
    elif not isinstance(value, (float, str)):
        value = None
    reason = attrs.get(sc.RAG_FEEDBACK_REASON)
    return Feedback(kind=kind, time_ns=span.end_ns or span.start_ns, reason=str(reason) if reason else None, value=value,
                    span_id=span.span_id)


def _json_object(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else 0
    except (TypeError, ValueError):
        return 0


def _string_list(value: Any) -> list[str]:
    value = _json_object(value)
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)] if value else []


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


_DOCUMENT_FIELDS = (sc.DOCUMENT_ID, sc.DOCUMENT_CONTENT, sc.DOCUMENT_SCORE, sc.DOCUMENT_METADATA)


def _documents(attrs: dict[str, Any], prefix: str, settings: DialectSettings) -> list[Document]:
    """Parse ``{prefix}.{i}.document.{field}`` attributes into Documents, in index order.

    OpenInference indexes are dense from 0, so look the fields up index by index (a few dict
    lookups per document) instead of parsing every attribute key.
    """
    documents = []
    get = attrs.get
    index = 0
    while True:
        base = f"{prefix}.{index}."
        doc_id, content, score, metadata = (get(base + name) for name in _DOCUMENT_FIELDS)
        if doc_id is None and content is None and score is None and metadata is None:
            break
        index += 1
        metadata = _json_object(metadata)
        if not isinstance(metadata, dict):
            metadata = {} if metadata in (None, "") else {"value": metadata}
        if doc_id in (None, ""):
            doc_id = next((metadata[k] for k in settings.document_id_metadata_keys if metadata.get(k) not in (None, "")), None)
        documents.append(
            Document(
                id=None if doc_id is None else str(doc_id),
                content=_text(content),
                score=_float(score),
                metadata=metadata,
            )
        )
    return documents


def _genai_documents(attrs: dict[str, Any]) -> list[Document]:
    """``gen_ai.retrieval.documents``: a JSON array of ``{"id", "score", "content"?}`` objects."""
    value = _json_object(attrs.get(sc.GEN_AI_RETRIEVAL_DOCUMENTS))
    if not isinstance(value, list):
        return []
    documents = []
    for item in value:
        if isinstance(item, dict):
            metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
            doc_id = item.get("id")
            documents.append(
                Document(None if doc_id is None else str(doc_id), _text(item.get("content")), _float(item.get("score")), metadata)
            )
    return documents


def _vectors(attrs: dict[str, Any]) -> list[tuple[int, list[float], str | None]]:
    """(index, vector, text) of every ``embedding.embeddings.{i}.embedding.vector``."""
    out = []
    prefix = sc.EMBEDDING_EMBEDDINGS + "."
    suffix = "." + sc.EMBEDDING_VECTOR
    for key, value in attrs.items():
        if key.startswith(prefix) and key.endswith(suffix) and isinstance(value, list):
            index = key[len(prefix) : -len(suffix)]
            if index.isdigit():
                text = attrs.get(f"{prefix}{index}.{sc.EMBEDDING_TEXT}")
                out.append((int(index), value, text if isinstance(text, str) else None))
    out.sort(key=lambda item: item[0])
    return out


def _message_text(messages: Any, role: str, last: bool) -> str | None:
    """Text of the first/last message with ``role`` in a GenAI or OpenInference messages JSON."""
    messages = _json_object(messages)
    if not isinstance(messages, list):
        return None
    chosen = [m for m in messages if isinstance(m, dict) and m.get("role") == role]
    if not chosen:
        return None
    message = chosen[-1] if last else chosen[0]
    if isinstance(message.get("content"), str):
        return message["content"]
    parts = message.get("parts") or []
    texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)]
    return "".join(texts) if texts else None


def _oi_messages_text(attrs: dict[str, Any], prefix: str, role: str, last: bool) -> str | None:
    """OpenInference flattened messages: ``llm.output_messages.{i}.message.role|content``."""
    indexes = sorted(
        int(k[len(prefix) + 1 : -len(".message.role")])
        for k, v in attrs.items()
        if k.startswith(prefix + ".") and k.endswith(".message.role") and v == role and k[len(prefix) + 1 : -len(".message.role")].isdigit()
    )
    if not indexes:
        return None
    content = attrs.get(f"{prefix}.{indexes[-1] if last else indexes[0]}.{sc.MESSAGE_CONTENT}")
    return content if isinstance(content, str) else None


# --- the record builder ---------------------------------------------------------------------------


class _Trace:
    """Index over one trace's spans: by id, children, ancestors."""

    def __init__(self, spans: Sequence[Span]):
        self.spans = sorted(spans, key=lambda s: (s.start_ns, s.end_ns))
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
        service=_text(resource.get(sc.SERVICE_NAME)),
        session_id=_optional_str(attrs.get(sc.SESSION_ID)),
        user_id=_optional_str(attrs.get(sc.USER_ID)),
        release=_text(attrs.get(sc.RAG_RELEASE) or resource.get(sc.SERVICE_VERSION)),
        variant=_text(attrs.get(sc.RAG_VARIANT)) or sc.VARIANT_PRODUCTION,
        tenant=_optional_str(attrs.get(sc.RAG_TENANT)),
        intent=_optional_str(attrs.get(sc.RAG_INTENT)),
        route=_optional_str(attrs.get(sc.RAG_ROUTE)),
        refused=bool(attrs.get(sc.RAG_ANSWER_REFUSED, False)),
        confidence=_float(attrs.get(sc.RAG_ANSWER_CONFIDENCE)),
        citations=_string_list(attrs.get(sc.RAG_CITATIONS)),
        shadow_of=_optional_str(attrs.get(sc.RAG_SHADOW_OF)),
        error=(root.status_message or "error") if root.status_code == STATUS_ERROR else None,
    )
    record.query = _input_text(attrs.get(sc.INPUT_VALUE), settings)
    record.answer = _output_text(attrs.get(sc.OUTPUT_VALUE), settings)

    reranked: list[Document] | None = None
    context_ids: list[str] | None = None
    retriever_with_docs: set[str] = set()
    vectors: list[tuple[Span, list[tuple[int, list[float], str | None]]]] = []
    llm_models: list[str] = []
    chat_spans: list[Span] = []

    llm_wrappers: set[str] = set()  # span ids with a generate-stage span below them
    if dialect != "sdk":
        for span in trace.spans:
            if _stage_name(span, dialect) == sc.STAGE_GENERATE:
                llm_wrappers.update(p.span_id for p in trace.ancestors(span))

    for span in trace.spans:
        if span is root:
            continue
        a = span.attributes
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
                    kind=_text(a.get(sc.RAG_FILTER_KIND)) or sc.FILTER_RELEVANCE,
                    predicate=_text(a.get(sc.RAG_FILTER_PREDICATE)),
                    candidates_in=_int(a[sc.RAG_FILTER_CANDIDATES_IN]) if sc.RAG_FILTER_CANDIDATES_IN in a else None,
                    candidates_out=_int(a[sc.RAG_FILTER_CANDIDATES_OUT]) if sc.RAG_FILTER_CANDIDATES_OUT in a else None,
                    excluded_ids=_string_list(a.get(sc.RAG_FILTER_EXCLUDED_IDS)),
                    excluded_documents=_documents(a, sc.RAG_FILTER_EXCLUDED_DOCUMENTS, settings),
                )
            )
        if sc.RAG_CONTEXT_DOCUMENT_IDS in a:
            context_ids = _string_list(a[sc.RAG_CONTEXT_DOCUMENT_IDS])
        if stage == sc.STAGE_RETRIEVE:
            # Outermost retriever that has documents wins; an inner one repeats them (LlamaIndex).
            if not any(p.span_id in retriever_with_docs for p in ancestors):
                docs = _documents(a, sc.RETRIEVAL_DOCUMENTS, settings) or _genai_documents(a)
                if docs:
                    retriever_with_docs.add(span.span_id)
                    record.retrieved.extend(docs)
            if not record.query and isinstance(a.get(sc.GEN_AI_RETRIEVAL_QUERY_TEXT), str):
                record.query = a[sc.GEN_AI_RETRIEVAL_QUERY_TEXT]
        elif stage == sc.STAGE_RERANK and not nested:
            out = _documents(a, sc.RERANKER_OUTPUT_DOCUMENTS, settings)
            if out:
                reranked = (reranked or []) + out
        elif stage == sc.STAGE_EMBED:
            found = _vectors(a)
            if found:
                vectors.append((span, found))
            model = a.get(sc.EMBEDDING_MODEL_NAME) or a.get(sc.GEN_AI_REQUEST_MODEL)
            if model and record.embedding_model is None:
                record.embedding_model = str(model)
        elif stage == sc.STAGE_GENERATE:
            # Calls and tokens from the innermost LLM spans only: an LLM span with an LLM span
            # below it is a wrapper (LlamaIndex .predict > .chat) and would double count.
            has_llm_child = span.span_id in llm_wrappers
            if sc.RAG_TIME_TO_FIRST_TOKEN in a and record.time_to_first_token_s is None:
                record.time_to_first_token_s = _float(a[sc.RAG_TIME_TO_FIRST_TOKEN])
            if has_llm_child:
                continue
            record.llm_calls += 1
            chat_spans.append(span)
            prompt = a.get(sc.LLM_TOKEN_COUNT_PROMPT, a.get(sc.GEN_AI_USAGE_INPUT_TOKENS))
            completion = a.get(sc.LLM_TOKEN_COUNT_COMPLETION, a.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS))
            record.prompt_tokens += _int(prompt)
            record.completion_tokens += _int(completion)
            model = a.get(sc.LLM_MODEL_NAME) or a.get(sc.GEN_AI_REQUEST_MODEL) or a.get(sc.GEN_AI_RESPONSE_MODEL)
            if model:
                llm_models.append(str(model))

    if dialect != "sdk" and not any(st.name in _QUERY_STAGES for st in record.stages):
        # An instrumented app also traces work that is not a query (LlamaIndex embedding
        # documents while building an index): no retrieval and no generation, no record.
        return None
    if llm_models:
        record.llm_model = llm_models[-1]  # the call that produced the answer
    if not record.query and chat_spans:
        record.query = _chat_query(chat_spans[0])
    if not record.answer and chat_spans:
        record.answer = _chat_answer(chat_spans[-1])
    if dialect != "sdk" and not record.session_id:
        record.session_id = _optional_str(attrs.get(sc.GEN_AI_CONVERSATION_ID)) or next(
            (_optional_str(s.attributes.get(sc.SESSION_ID) or s.attributes.get(sc.GEN_AI_CONVERSATION_ID)) for s in trace.spans if s.attributes.get(sc.SESSION_ID) or s.attributes.get(sc.GEN_AI_CONVERSATION_ID)),
            None,
        )

    delivered = reranked if reranked is not None else list(record.retrieved)
    if context_ids is not None:
        known = {d.id: d for d in [*(reranked or []), *record.retrieved] if d.id is not None}
        delivered = [known.get(doc_id) or Document(id=doc_id) for doc_id in context_ids]
    record.delivered = delivered
    _assign_embeddings(record, vectors)
    return record


def _assign_embeddings(record: QueryRecord, vectors: list[tuple[Span, list[tuple[int, list[float], str | None]]]]) -> None:
    """The query's vector: one whose text is the query, else the first of the first embed span."""
    for _span, found in vectors:
        for _index, vector, text in found:
            if record.query_embedding is None and (text is None or text == record.query):
                record.query_embedding = vector
            else:
                record.document_embeddings.append(vector)


def _input_text(value: Any, settings: DialectSettings) -> str:
    parsed = _json_object(value)
    if isinstance(parsed, dict):
        for key in settings.query_input_keys:
            if isinstance(parsed.get(key), str):
                return parsed[key]
        strings = [v for v in parsed.values() if isinstance(v, str)]
        return strings[0] if len(strings) == 1 else _text(value)
    return _text(value)


def _output_text(value: Any, settings: DialectSettings) -> str:
    parsed = _json_object(value)
    if isinstance(parsed, dict):
        for key in settings.answer_output_keys:
            if isinstance(parsed.get(key), str):
                return parsed[key]
    return _text(value)


def _chat_query(span: Span) -> str:
    a = span.attributes
    return (
        _message_text(a.get(sc.GEN_AI_INPUT_MESSAGES), "user", last=True)
        or _oi_messages_text(a, sc.LLM_INPUT_MESSAGES, "user", last=True)
        or _text(a.get(sc.GEN_AI_PROMPT))
    )


def _chat_answer(span: Span) -> str:
    a = span.attributes
    return (
        _message_text(a.get(sc.GEN_AI_OUTPUT_MESSAGES), "assistant", last=True)
        or _oi_messages_text(a, sc.LLM_OUTPUT_MESSAGES, "assistant", last=True)
        or _text(a.get(sc.GEN_AI_COMPLETION))
    )
