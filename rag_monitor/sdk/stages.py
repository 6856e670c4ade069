"""The stage handles with something of their own to record: documents, filter outcomes, tokens."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from rag_monitor import semconv
from rag_monitor.sdk._logging import log
from rag_monitor.sdk.config import CaptureConfig
from rag_monitor.sdk.handles import Stage

__all__ = ["FilterStage", "GenerateStage", "RerankStage", "RetrieveStage"]


class _DocumentKeys:
    """Flattened attribute keys per document index, built once (f-strings cost on the hot path)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._keys: list[tuple[str, str, str, str]] = []

    def __getitem__(self, i: int) -> tuple[str, str, str, str]:
        keys = self._keys
        while len(keys) <= i:
            p = f"{self._prefix}.{len(keys)}."
            keys.append(
                (
                    p + semconv.DOCUMENT_ID,
                    p + semconv.DOCUMENT_CONTENT,
                    p + semconv.DOCUMENT_SCORE,
                    p + semconv.DOCUMENT_METADATA,
                )
            )
        return keys[i]


_RETRIEVED_KEYS = _DocumentKeys(semconv.RETRIEVAL_DOCUMENTS)
_RERANK_IN_KEYS = _DocumentKeys(semconv.RERANKER_INPUT_DOCUMENTS)
_RERANK_OUT_KEYS = _DocumentKeys(semconv.RERANKER_OUTPUT_DOCUMENTS)
_EXCLUDED_KEYS = _DocumentKeys(semconv.RAG_FILTER_EXCLUDED_DOCUMENTS)


def _document_fields(doc: Any) -> tuple[Any, Any, Any, Any]:
    """(id, content, score, metadata) of a dict, a plain string or an object with attributes."""
    if isinstance(doc, dict):
        content = doc.get("content")
        if content is None:
            content = doc.get("page_content", doc.get("text"))
        return doc.get("id"), content, doc.get("score"), doc.get("metadata")
    if isinstance(doc, str):
        return None, doc, None, None
    content = getattr(doc, "content", None)
    if content is None:
        content = getattr(doc, "page_content", getattr(doc, "text", None))
    if content is None and getattr(doc, "id", None) is None:
        raise TypeError(f"not a document: {type(doc).__name__}")
    return getattr(doc, "id", None), content, getattr(doc, "score", None), getattr(doc, "metadata", None)


class _DocumentStage(Stage):
    __slots__ = ()

    def _documents(self, keys: _DocumentKeys, docs: Iterable[Any]) -> None:
        if not self._span.is_recording():
            return
        try:
            hide = self._capture.hide_document_content
            attrs: dict[str, Any] = {}
            i = 0
            for doc in docs:
                try:
                    if type(doc) is dict and "content" in doc:  # the common shape, without a call
                        doc_id, content = doc.get("id"), doc["content"]
                        score, metadata = doc.get("score"), doc.get("metadata")
                    else:
                        doc_id, content, score, metadata = _document_fields(doc)
                    if score is not None:
                        score = float(score)
                    if metadata is not None and not isinstance(metadata, str):
                        metadata = json.dumps(metadata, default=str, ensure_ascii=False)
                except Exception as err:  # noqa: BLE001 - junk from the app: skip that one document
                    log.warning("bad-document", "rag_monitor: skipped a document it cannot read: %r", err)
                    continue
                id_key, content_key, score_key, metadata_key = keys[i]
                i += 1
                if doc_id is not None:
                    attrs[id_key] = str(doc_id)
                if content is not None and not hide:
                    attrs[content_key] = self._clip(content_key, content)
                if score is not None:
                    attrs[score_key] = score
                if metadata is not None:
                    attrs[metadata_key] = self._clip(metadata_key, metadata)
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("documents")


class FilterStage(_DocumentStage):
    """A filter: ``result()`` records its outcome when it is known only after filtering."""

    __slots__ = ()

    def result(self, candidates_out: int | None = None, excluded_ids: Iterable[Any] | None = None) -> None:
        try:
            attrs: dict[str, Any] = {}
            if candidates_out is not None:
                attrs[semconv.RAG_FILTER_CANDIDATES_OUT] = int(candidates_out)
            if excluded_ids is not None:
                attrs[semconv.RAG_FILTER_EXCLUDED_IDS] = tuple(str(i) for i in excluded_ids)
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("filter.result")

    def excluded_documents(self, docs: Iterable[Any]) -> None:
        """The documents the filter removed, with content, so reviewers can judge them blind."""
        self._documents(_EXCLUDED_KEYS, docs)


class RetrieveStage(_DocumentStage):
    """A retrieval (RETRIEVER span): ``documents()`` records what came back, best first."""

    __slots__ = ()

    def documents(self, docs: Iterable[Any]) -> None:
        """Dicts ``{"id", "content", "score", "metadata"}``, strings, or objects with those attributes."""
        self._documents(_RETRIEVED_KEYS, docs)


class RerankStage(_DocumentStage):
    """A rerank (RERANKER span): ``documents()`` is its output, ``input_documents()`` its input."""

    __slots__ = ()

    def documents(self, docs: Iterable[Any]) -> None:
        self._documents(_RERANK_OUT_KEYS, docs)

    def input_documents(self, docs: Iterable[Any]) -> None:
        self._documents(_RERANK_IN_KEYS, docs)


class GenerateStage(Stage):
    """The LLM call (LLM span): token counts and time to first token."""

    __slots__ = ("_t0", "_query_t0", "_query_start_ns", "_first_token_seen")

    def __init__(self, span: Any, capture: CaptureConfig) -> None:
        super().__init__(span, capture)
        self._t0 = time.perf_counter()
        self._query_t0: float | None = None  # set by the query: time to first token counts from the query's start
        self._query_start_ns: int | None = None  # the query span's start (``first_token(time_ns)``)
        self._first_token_seen = False

    def tokens(self, prompt: int | None = None, completion: int | None = None, cached_prompt: int | None = None,
               cache_write_prompt: int | None = None) -> None:
        """Token counts of the call; ``cached_prompt`` is the part of ``prompt`` the provider read
        from its prompt cache (priced at the cached rate where the price table has one),
        ``cache_write_prompt`` the part it wrote to the cache (``cached_write`` rate). ``prompt``
        counts every input token, cached or not: for Anthropic, ``input_tokens`` +
        ``cache_read_input_tokens`` + ``cache_creation_input_tokens``; for OpenAI, ``prompt_tokens``."""
        try:
            attrs: dict[str, Any] = {}
            if prompt is not None:
                attrs[semconv.LLM_TOKEN_COUNT_PROMPT] = attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = int(prompt)
            if completion is not None:
                attrs[semconv.LLM_TOKEN_COUNT_COMPLETION] = attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = int(completion)
            if cached_prompt is not None:
                attrs[semconv.LLM_TOKEN_COUNT_PROMPT_CACHE_READ] = attrs[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = int(cached_prompt)
            if cache_write_prompt is not None:
                attrs[semconv.LLM_TOKEN_COUNT_PROMPT_CACHE_WRITE] = attrs[semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = int(cache_write_prompt)
            if prompt is not None and completion is not None:
                attrs[semconv.LLM_TOKEN_COUNT_TOTAL] = int(prompt) + int(completion)
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("tokens")

    def response_model(self, name: str) -> None:
        """The model the provider answered with (its response's ``model``, e.g.
        ``gpt-4o-mini-2024-07-18`` for a request of ``gpt-4o-mini``): a new one under the same
        requested name is a change the alerts' triage compares across."""
        try:
            if name:
                self._set({semconv.GEN_AI_RESPONSE_MODEL: str(name), semconv.LLM_MODEL_NAME: str(name)})
        except Exception:  # noqa: BLE001
            log.internal_error("response_model")

    def first_token(self, time_ns: int | None = None) -> None:
        """Call when the first token arrives (once; later calls are ignored): records the seconds since
        the query started (``rag.generation.time_to_first_token_s``, what the user waits) and since
        this stage started (``rag.generation.stage_time_to_first_token_s``, the model's own wait).

        ``time_ns``: when it arrived, for a stage recorded at times the app knows (``start_time_ns``),
        measured from the query's and the stage's span start times; None: now."""
        if self._first_token_seen:
            return
        self._first_token_seen = True
        try:
            stage_start_ns = getattr(self._span, "start_time", None)
            if time_ns is not None and stage_start_ns is not None:
                query_start_ns = self._query_start_ns if self._query_start_ns is not None else stage_start_ns
                self._set({semconv.RAG_TIME_TO_FIRST_TOKEN: (time_ns - query_start_ns) / 1e9,
                           semconv.RAG_STAGE_TIME_TO_FIRST_TOKEN: (time_ns - stage_start_ns) / 1e9})
                return
            now = time.perf_counter()
            start = self._query_t0 if self._query_t0 is not None else self._t0
            self._set({semconv.RAG_TIME_TO_FIRST_TOKEN: now - start, semconv.RAG_STAGE_TIME_TO_FIRST_TOKEN: now - self._t0})
        except Exception:  # noqa: BLE001
            log.internal_error("first_token")
