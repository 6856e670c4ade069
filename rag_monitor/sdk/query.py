"""Query and stage handles: one span per query, one child span per pipeline stage.

A handle starts its span when it is created. Used in a ``with`` (or ``async with``) block it
times the block; used bare (``q.filter(...)``, ``q.embed(...)``) it records a zero-length
span that ends with the query::

    with monitor.query("How do I cancel?", session_id="s1") as q:
        q.filter(kind="relevance", predicate="locale = 'en-US'", candidates_in=40, candidates_out=12)
        with q.retrieve() as r:
            r.documents([{"id": "doc-1", "content": "...", "score": 0.82}])
        with q.generate(model="gpt-x") as g:
            g.tokens(prompt=812, completion=64)
        q.answer("Cancel under Settings > Billing.", citations=["doc-1"])

Every stage is parented on its query's root span explicitly, never on whatever context is
current, so concurrent queries (threads, asyncio tasks) cannot leak into each other.
Our own failures are logged and swallowed; the app's exceptions are recorded on the span
and re-raised unchanged.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode

from rag_monitor import semconv
from rag_monitor.sdk._logging import log
from rag_monitor.sdk.config import CaptureConfig
from rag_monitor.sdk.handles import Stage, _SpanHandle
from rag_monitor.sdk.ids import format_trace_id
from rag_monitor.sdk.noop import NOOP_QUERY, NOOP_STAGE, NoopQuery, NoopStage, check_cache_kind, check_filter_kind
from rag_monitor.sdk.stages import FilterStage, GenerateStage, RerankStage, RetrieveStage
from rag_monitor.sdk.streaming import StreamingMethods, cancel_reason

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Tracer

__all__ = ["FilterStage", "GenerateStage", "Query", "RerankStage", "RetrieveStage", "ShadowQuery", "Stage", "current_query"]

_KIND = semconv.OPENINFERENCE_SPAN_KIND
_STAGE = semconv.RAG_STAGE
_CHAIN = semconv.SPAN_KIND_CHAIN

_EMPTY_CONTEXT = Context()

_current_query: contextvars.ContextVar[Query | NoopQuery] = contextvars.ContextVar(
    "rag_monitor_current_query", default=NOOP_QUERY
)


def current_query() -> Query | NoopQuery:
    """The query whose ``with`` block is running in this thread or task, else a no-op query.

    Tasks and ``asyncio.to_thread`` inherit it; an executor's threads only through
    ``rag_monitor.sdk.submit(executor, fn)`` (or ``bind(fn)``).
    """
    return _current_query.get()


class Query(StreamingMethods, _SpanHandle):
    """One RAG query: the root span of its own trace. Create with ``Monitor.query``."""

    __slots__ = ("_tracer", "_parent", "_stages", "_token", "_cache", "_shadows", "_shadow_args",
                 "_t0", "_streams", "_block_done", "_answered", "_cancel_reason")

    def __init__(self, tracer: Tracer, span: Any, capture: CaptureConfig, truncated: list[str] | None) -> None:
        super().__init__(span, capture)
        self._truncated = truncated
        self._tracer = tracer
        # Stages are parented on this context explicitly: never on the (shared) current one.
        self._parent = trace.set_span_in_context(span, _EMPTY_CONTEXT)
        self._stages: list[Stage] = []
        self._token: contextvars.Token | None = None
        self._cache: dict[str, int] | None = None
        self._shadows: Any = None  # the monitor's shadow runner source (``Monitor.shadow_runner``)
        self._shadow_args: tuple[Any, ...] = ()  # (text, tenant, intent) a candidate gets
        self._t0 = time.perf_counter()  # time to first token counts from here: what the user waits
        self._streams = 0  # open q.stream(...) wrappers: while any is open, the block's exit does not end the query
        self._block_done = False
        self._answered = False
        self._cancel_reason: str | None = None

    @property
    def trace_id(self) -> str:
        """32 hex digits: hand it to ``Monitor.feedback`` later (another request or process)."""
        return format_trace_id(self._span.get_span_context().trace_id)

    @property
    def span_id(self) -> str:
        return f"{self._span.get_span_context().span_id:016x}"

    def __enter__(self) -> Query:
        self._entered = True
        try:
            self._token = _current_query.set(self)
        except Exception:  # noqa: BLE001
            log.internal_error("query enter")
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if self._token is not None:
            try:
                _current_query.reset(self._token)
            except ValueError:  # exited in another context than entered (a handed-over task)
                pass
            self._token = None
        self._block_done = True
        if exc is not None:
            self._mark_cancelled(cancel_reason(exc))
        elif self._streams:
            return False  # a stream outlives the block (a streamed response body): it ends the query
        self._exit(exc)
        return False

    async def __aenter__(self) -> Query:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    def end(self, end_time_ns: int | None = None) -> None:
        """End the query: bare stages end as instants, open ones now, then the root span."""
        if self._ended:
            return
        try:
            for stage in self._stages:
                if not stage._ended:
                    if stage._entered:
                        stage.end()
                    else:
                        stage._end_unentered()
            self._stages.clear()
        except Exception:  # noqa: BLE001
            log.internal_error("query end")
        super().end(end_time_ns)

    def shadow(self, variant: str, candidate: Any) -> Any:
        """Run ``candidate(ctx)`` as shadow pipeline ``variant`` off the request path (``sdk.shadow``).

        Call it inside the query's block. Returns at once: a ``Future`` when the candidate was
        admitted, None when this query was not in the sampled share, every slot was taken (counted
        in ``Monitor.shadow_stats()``) or the query has ended.
        """
        if not variant or not isinstance(variant, str):
            raise ValueError(f"shadow variant={variant!r}: a non-empty candidate name is required")
        try:
            runner = self._shadows.shadow_runner if self._shadows is not None else None
            if runner is None or self._ended:
                return None
            return runner.submit(self, variant, candidate, *self._shadow_args)
        except Exception:  # noqa: BLE001
            log.internal_error("shadow")
            return None

    # --- stages ---------------------------------------------------------------------------

    def _start(
        self, cls: type[Stage], name: str, attrs: dict[str, Any], truncated: list[str] | None = None,
        start_time_ns: int | None = None,
    ) -> Stage | NoopStage:
        try:
            span = self._tracer.start_span(name, context=self._parent, attributes=attrs, start_time=start_time_ns)
            stage = cls(span, self._capture)
            stage._truncated = truncated
            if isinstance(stage, GenerateStage):
                stage._query_t0 = self._t0
                stage._query_start_ns = getattr(self._span, "start_time", None)
            if self._ended:
                # The query is over: nothing will end this stage later.
                stage._end_unentered()
            else:
                self._stages.append(stage)
            return stage
        except Exception:  # noqa: BLE001
            log.internal_error(f"stage {name}")
            return NOOP_STAGE

    def stage(self, name: str, kind: str = _CHAIN, *, start_time_ns: int | None = None) -> Stage | NoopStage:
        """Any named stage (``"rewrite"``, or the app's own), as a CHAIN span unless ``kind`` says.

        Every stage method takes ``start_time_ns``: with ``stage.end(end_time_ns)`` it records a stage
        at times the app knows (a replayed query's, like ``monitor.query(start_time_ns=...)``); None: now."""
        return self._start(Stage, name, {_KIND: kind, _STAGE: name}, start_time_ns=start_time_ns)

    def filter(
        self,
        kind: str,
        predicate: str | None = None,
        candidates_in: int | None = None,
        candidates_out: int | None = None,
        excluded_ids: Sequence[Any] | None = None,
        excluded_documents: Sequence[Any] | None = None,
        *,
        start_time_ns: int | None = None,
    ) -> FilterStage | NoopStage:
        """A filter as applied: ``kind`` is ``"entitlement"`` or ``"relevance"`` (else ValueError).

        ``excluded_documents`` (dicts like ``retrieve``'s) carry the removed documents' content,
        so reviewers can judge blind whether the filter dropped a relevant one.
        """
        check_filter_kind(kind)
        truncated = None
        try:
            attrs: dict[str, Any] = {_KIND: _CHAIN, _STAGE: semconv.STAGE_FILTER, semconv.RAG_FILTER_KIND: kind}
            if predicate is not None:
                predicate = str(predicate)
                limit = self._capture.max_string_length
                if limit and len(predicate) > limit:
                    predicate = predicate[:limit]
                    truncated = [semconv.RAG_FILTER_PREDICATE]
                    attrs[semconv.RAG_TRUNCATED] = (semconv.RAG_FILTER_PREDICATE,)
                attrs[semconv.RAG_FILTER_PREDICATE] = predicate
            if candidates_in is not None:
                attrs[semconv.RAG_FILTER_CANDIDATES_IN] = int(candidates_in)
            if candidates_out is not None:
                attrs[semconv.RAG_FILTER_CANDIDATES_OUT] = int(candidates_out)
            if excluded_ids is not None:
                attrs[semconv.RAG_FILTER_EXCLUDED_IDS] = tuple(str(i) for i in excluded_ids)
        except Exception:  # noqa: BLE001 - e.g. candidates_in="many": keep the span, drop the junk
            log.internal_error("filter arguments")
            attrs = {_KIND: _CHAIN, _STAGE: semconv.STAGE_FILTER, semconv.RAG_FILTER_KIND: kind}
        stage = self._start(FilterStage, semconv.STAGE_FILTER, attrs, truncated, start_time_ns)
        if excluded_documents is not None:
            stage.excluded_documents(excluded_documents)
        return stage

    def retrieve(self, data_source: str | None = None, *, start_time_ns: int | None = None) -> RetrieveStage | NoopStage:
        """A retrieval (RETRIEVER span); call ``documents()`` on it.

        ``data_source`` names the index searched (``gen_ai.data_source.id``): the agent prices the
        call when ``rag_monitor/defaults/collectors/prices.yaml`` has a per-call price for it. A document's metadata
        may carry ``committed_at`` (the version served) for the stale-index share.
        """
        attrs: dict[str, Any] = {_KIND: semconv.SPAN_KIND_RETRIEVER, _STAGE: semconv.STAGE_RETRIEVE}
        if data_source is not None:
            attrs[semconv.GEN_AI_DATA_SOURCE_ID] = str(data_source)
        return self._start(RetrieveStage, semconv.STAGE_RETRIEVE, attrs, start_time_ns=start_time_ns)

    def cache(self, kind: str, hit: bool, count: int = 1) -> None:
        """Lookups in one of the app's caches during this query: ``kind`` is ``"embedding"``,
        ``"retrieval"`` or ``"response"`` (else ValueError); ``hit`` whether they were served from it."""
        check_cache_kind(kind)
        try:
            key = semconv.cache_attribute(kind, bool(hit))
            counts = self._cache if self._cache is not None else {}
            self._cache = counts
            counts[key] = counts.get(key, 0) + int(count)
            self._set({key: counts[key]})
        except Exception:  # noqa: BLE001
            log.internal_error("cache")

    def rerank(self, model: str | None = None, top_k: int | None = None, *,
               start_time_ns: int | None = None) -> RerankStage | NoopStage:
        """A rerank (RERANKER span); call ``documents()`` with its output."""
        attrs: dict[str, Any] = {_KIND: semconv.SPAN_KIND_RERANKER, _STAGE: semconv.STAGE_RERANK}
        if model is not None:
            attrs[semconv.RERANKER_MODEL_NAME] = str(model)
        if top_k is not None:
            try:
                attrs[semconv.RERANKER_TOP_K] = int(top_k)
            except (TypeError, ValueError):
                log.warning("bad-top-k", "rag_monitor: ignored top_k=%r (not an int)", top_k)
        return self._start(RerankStage, semconv.STAGE_RERANK, attrs, start_time_ns=start_time_ns)

    def embed(
        self,
        model: str | None = None,
        vectors: Iterable[Iterable[float]] | None = None,
        texts: Iterable[Any] | None = None,
        tokens: int | None = None,
        role: str = semconv.EMBEDDING_ROLE_QUERY,
        *,
        start_time_ns: int | None = None,
    ) -> Stage | NoopStage:
        """Embeddings (EMBEDDING span), so the agent can watch drift and price the call.

        ``role`` says whose vectors these are: ``"query"`` (the default: the query's vector) or
        ``"document"``; ``tokens`` are the input tokens the embedding call used.
        """
        attrs: dict[str, Any] = {_KIND: semconv.SPAN_KIND_EMBEDDING, _STAGE: semconv.STAGE_EMBED}
        if model is not None:
            attrs[semconv.EMBEDDING_MODEL_NAME] = str(model)
        if role in semconv.EMBEDDING_ROLES:
            attrs[semconv.RAG_EMBEDDING_ROLE] = role
        else:
            log.warning("bad-embedding-role", "rag_monitor: ignored role=%r (use 'query' or 'document')", role)
        try:
            if tokens is not None:
                attrs[semconv.LLM_TOKEN_COUNT_PROMPT] = attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = int(tokens)
        except (TypeError, ValueError):
            log.warning("bad-tokens", "rag_monitor: ignored tokens=%r (not an int)", tokens)
        stage = self._start(Stage, semconv.STAGE_EMBED, attrs, start_time_ns=start_time_ns)
        if (vectors is None and texts is None) or not stage.is_recording:
            return stage
        try:
            capture = self._capture
            more: dict[str, Any] = {}
            prefix = semconv.EMBEDDING_EMBEDDINGS
            if vectors is not None and not capture.hide_embedding_vectors:
                for i, vector in enumerate(vectors):
                    more[f"{prefix}.{i}.{semconv.EMBEDDING_VECTOR}"] = tuple(map(float, vector))
            if texts is not None:
                for i, text in enumerate(texts):
                    if capture.hide_embedding_text:
                        break  # hidden text is not sent
                    key = f"{prefix}.{i}.{semconv.EMBEDDING_TEXT}"
                    more[key] = stage._clip(key, text)
            stage._set(more)
        except Exception:  # noqa: BLE001 - e.g. a vector with a non-number in it
            log.internal_error("embed vectors")
        return stage

    def context(self, document_ids: Iterable[Any] | None = None, tokens: int | None = None, *,
                start_time_ns: int | None = None) -> Stage | NoopStage:
        """The context delivered to the generator: document ids in prompt order."""
        attrs: dict[str, Any] = {_KIND: _CHAIN, _STAGE: semconv.STAGE_CONTEXT}
        try:
            if document_ids is not None:
                attrs[semconv.RAG_CONTEXT_DOCUMENT_IDS] = tuple(str(i) for i in document_ids)
            if tokens is not None:
                attrs[semconv.RAG_CONTEXT_TOKENS] = int(tokens)
        except Exception:  # noqa: BLE001
            log.internal_error("context arguments")
        return self._start(Stage, semconv.STAGE_CONTEXT, attrs, start_time_ns=start_time_ns)

    def generate(self, model: str | None = None, provider: str | None = None, *,
                 start_time_ns: int | None = None) -> GenerateStage | NoopStage:
        """The LLM call (LLM span); call ``tokens()`` and, when streaming, ``first_token()``."""
        attrs: dict[str, Any] = {
            _KIND: semconv.SPAN_KIND_LLM,
            _STAGE: semconv.STAGE_GENERATE,
            semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_CHAT,
        }
        if model is not None:
            attrs[semconv.LLM_MODEL_NAME] = attrs[semconv.GEN_AI_REQUEST_MODEL] = str(model)
        if provider is not None:
            attrs[semconv.LLM_PROVIDER] = attrs[semconv.GEN_AI_PROVIDER_NAME] = str(provider)
        return self._start(GenerateStage, semconv.STAGE_GENERATE, attrs, start_time_ns=start_time_ns)

    # --- outcome --------------------------------------------------------------------------

    def answer(
        self,
        text: Any,
        citations: Iterable[Any] | None = None,
        confidence: float | None = None,
        refused: bool = False,
    ) -> None:
        """The answer the user got, the document ids it cites and the pipeline's confidence."""
        try:
            attrs: dict[str, Any] = {semconv.RAG_ANSWER_REFUSED: bool(refused)}
            self._text(attrs, semconv.OUTPUT_VALUE, text, self._capture.hide_outputs)
            if citations is not None:
                attrs[semconv.RAG_CITATIONS] = tuple(str(c) for c in citations)
            if confidence is not None:
                attrs[semconv.RAG_ANSWER_CONFIDENCE] = float(confidence)
            self._answered = True
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("answer")

    def refuse(self, reason: str | None = None, answer: Any = None) -> None:
        """The pipeline declined to answer (``answer`` is the message the user saw, if any)."""
        try:
            attrs: dict[str, Any] = {semconv.RAG_ANSWER_REFUSED: True}
            self._answered = self._answered or answer is not None
            self._text(attrs, semconv.OUTPUT_VALUE, answer, self._capture.hide_outputs)
            if reason is not None:
                attrs[semconv.RAG_ANSWER_REFUSAL_REASON] = self._clip(semconv.RAG_ANSWER_REFUSAL_REASON, reason)
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("refuse")


class ShadowQuery(Query):
    """A shadow candidate's query: feedback on it is refused, writes after its deadline ignored."""

    __slots__ = ()

    def shadow(self, variant: str, candidate: Any) -> None:
        """A shadow is never shadowed itself."""
        return None

    def _set(self, attrs: dict[str, Any]) -> None:
        if not self._ended:  # a timed-out candidate may still be writing: its span is closed
            super()._set(attrs)

    def _timed_out(self, timeout_s: float) -> None:
        """End the span now, as an error: the candidate overran its deadline."""
        if self._ended:
            return
        try:
            self._span.set_status(Status(StatusCode.ERROR, f"shadow candidate timed out after {timeout_s:g}s"))
        except Exception:  # noqa: BLE001
            log.internal_error("shadow timeout status")
        self.end()
