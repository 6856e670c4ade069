"""Model calls out of spans: which spans are LLM, embedding and rerank calls, with their model
and tokens (prompt, completion, cached prompt read and written), in the three dialects' attribute names; the
retrievals that name their data source (priced per call); the app's cache lookups."""

from __future__ import annotations

import json

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import Span
from rag_monitor.collectors.values import as_int
from rag_monitor.record import ModelCall

__all__ = ["CALL_EMBEDDING", "CALL_LLM", "CALL_RERANK", "CALL_RETRIEVAL", "cache_lookups", "call_kind", "model_call", "retrieval_call"]

CALL_LLM, CALL_EMBEDDING, CALL_RERANK, CALL_RETRIEVAL = "llm", "embedding", "rerank", "retrieval"
_BY_SPAN_KIND = {sc.SPAN_KIND_LLM: CALL_LLM, sc.SPAN_KIND_EMBEDDING: CALL_EMBEDDING, sc.SPAN_KIND_RERANKER: CALL_RERANK}
_BY_OPERATION = {
    sc.GEN_AI_OPERATION_CHAT: CALL_LLM,
    sc.GEN_AI_OPERATION_TEXT_COMPLETION: CALL_LLM,
    sc.GEN_AI_OPERATION_GENERATE_CONTENT: CALL_LLM,
    sc.GEN_AI_OPERATION_EMBEDDINGS: CALL_EMBEDDING,
}
_BY_STAGE = {sc.STAGE_GENERATE: CALL_LLM, sc.STAGE_EMBED: CALL_EMBEDDING, sc.STAGE_RERANK: CALL_RERANK}
_MODEL_KEYS = {
    CALL_LLM: (sc.LLM_MODEL_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL),
    CALL_EMBEDDING: (sc.EMBEDDING_MODEL_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL),
    CALL_RERANK: (sc.RERANKER_MODEL_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL),
}


def call_kind(span: Span) -> str | None:
    """``llm``, ``embedding``, ``rerank`` or None: from the OpenInference kind, else the GenAI
    operation, else the SDK stage (a ``generate`` stage is an LLM call whatever its kind)."""
    attrs = span.attributes
    kind = attrs.get(sc.OPENINFERENCE_SPAN_KIND)
    if isinstance(kind, str) and kind.upper() in _BY_SPAN_KIND:
        return _BY_SPAN_KIND[kind.upper()]
    operation = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if isinstance(operation, str) and operation in _BY_OPERATION:
        return _BY_OPERATION[operation]
    stage = attrs.get(sc.RAG_STAGE)
    return _BY_STAGE.get(stage) if isinstance(stage, str) else None


_PROMPT_KEYS = (sc.LLM_TOKEN_COUNT_PROMPT, sc.GEN_AI_USAGE_INPUT_TOKENS)
_COMPLETION_KEYS = (sc.LLM_TOKEN_COUNT_COMPLETION, sc.GEN_AI_USAGE_OUTPUT_TOKENS)
_CACHED_PROMPT_KEYS = (sc.LLM_TOKEN_COUNT_PROMPT_CACHE_READ, sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
_CACHE_WRITE_KEYS = (sc.LLM_TOKEN_COUNT_PROMPT_CACHE_WRITE, sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS)


def _first(attrs: dict, keys: tuple[str, ...]):
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            return value
    return None


def model_call(span: Span, kind: str) -> ModelCall:
    """The call ``span`` made. Tokens read from and written to the prompt cache are part of the
    prompt tokens in both conventions, whatever the provider's own usage says (OpenInference's
    Anthropic instrumentor adds them to Anthropic's cache-exclusive ``input_tokens``; GenAI's
    ``input_tokens`` include every cached part)."""
    a = span.attributes
    model = _first(a, _MODEL_KEYS[kind])
    prompt = max(as_int(_first(a, _PROMPT_KEYS)), 0)
    cached = min(max(as_int(_first(a, _CACHED_PROMPT_KEYS)), 0), prompt)
    written = min(max(as_int(_first(a, _CACHE_WRITE_KEYS)), 0), prompt - cached)
    requested, responded = _requested_and_response_model(a) if kind == CALL_LLM else (None, None)
    return ModelCall(
        kind=kind,
        model=str(model) if model not in (None, "") else None,
        input_tokens=prompt,
        output_tokens=max(as_int(_first(a, _COMPLETION_KEYS)), 0),
        cached_input_tokens=cached,
        cache_write_input_tokens=written,
        requested_model=requested,
        response_model=responded,
    )


def _requested_and_response_model(a: dict) -> tuple[str | None, str | None]:
    """(the model asked for, the model that answered) of an LLM span; either may be None.

    GenAI names both; OpenInference puts the requested one in ``llm.invocation_parameters``
    (JSON) and the provider's answer in ``llm.model_name``."""
    requested = a.get(sc.GEN_AI_REQUEST_MODEL)
    if requested in (None, ""):
        params = a.get(sc.LLM_INVOCATION_PARAMETERS)
        if isinstance(params, str) and '"model"' in params:
            try:
                parsed = json.loads(params)
            except ValueError:
                parsed = None
            requested = parsed.get("model") if isinstance(parsed, dict) else None
    responded = a.get(sc.GEN_AI_RESPONSE_MODEL)
    if responded in (None, "") and a.get(sc.LLM_INVOCATION_PARAMETERS) is not None:
        responded = a.get(sc.LLM_MODEL_NAME)
    text = lambda v: str(v)[:200] if v not in (None, "") and isinstance(v, (str, int, float)) else None  # noqa: E731
    return text(requested), text(responded)


def has_tokens(call: ModelCall) -> bool:
    return bool(call.input_tokens or call.output_tokens)


def retrieval_call(span: Span) -> ModelCall | None:
    """A retrieval as a call of its data source (``gen_ai.data_source.id``, else the vector store's
    ``db.system.name``), so a per-call price applies; None when the span names neither."""
    source = _first(span.attributes, (sc.GEN_AI_DATA_SOURCE_ID, sc.DB_SYSTEM_NAME))
    return None if source in (None, "") else ModelCall(kind=CALL_RETRIEVAL, model=str(source))


_CACHE_KEYS = [(kind, outcome, sc.cache_attribute(kind, hit)) for kind in sc.CACHE_KINDS for outcome, hit in (("hit", True), ("miss", False))]


def cache_lookups(attrs: dict) -> dict[str, dict[str, int]]:
    """``{"embedding": {"hit": 2, "miss": 1}, ...}`` from the root's ``rag.cache.*`` counts."""
    out: dict[str, dict[str, int]] = {}
    for kind, outcome, key in _CACHE_KEYS:
        n = as_int(attrs.get(key)) if key in attrs else 0
        if n > 0:
            out.setdefault(kind, {})[outcome] = n
    return out
