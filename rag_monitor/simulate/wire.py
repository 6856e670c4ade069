"""Scenario -> OTLP/HTTP protobuf request bodies, the way real instrumentations send them.

SDK queries go through the project's own SDK (an in-memory exporter captures its spans, whose
clock times are then replaced by the simulated ones); the other dialects are built span by span
in the shapes the instrumentors emit (DEPENDENCIES.md): LangChain (attributes and document ids
in metadata JSON), LlamaIndex (nested retriever / LLM / embedding spans, tokens on the inner
LLM span only) and OTel ``gen_ai.*``. Each trace's spans are spread over ``requests`` export
requests with the root last (or never, when it is lost); roots arrive in query order.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from rag_monitor import semconv as sc
from rag_monitor.sdk.ids import RootDerivedIdGenerator, root_span_id
from rag_monitor.simulate.scenario import Scenario, SimQuery
from rag_monitor.simulate.truth import Truth, expected

CACHED_PROMPT_OI = "llm.token_count.prompt_details.cache_read"
CACHED_PROMPT_GENAI = "gen_ai.usage.cache_read.input_tokens"
_BATCH_POSITIONS = 12  # four traces' worth of span positions per export request
_LATE = 2 * _BATCH_POSITIONS


@dataclass
class Batch:
    spans: list[ReadableSpan]

    def body(self, spans: list[ReadableSpan] | None = None) -> bytes:
        return encode_spans(self.spans if spans is None else spans).SerializeToString()

    def split(self, replicas: int) -> dict[int, bytes]:
        """One body per replica, routed by trace id (as a load-balancing Collector does)."""
        groups: dict[int, list[ReadableSpan]] = defaultdict(list)
        for span in self.spans:
            groups[span.context.trace_id % replicas].append(span)
        return {replica: self.body(spans) for replica, spans in groups.items()}


@dataclass
class Traffic:
    scenario: Scenario
    phases: list[list[Batch]] = field(default_factory=list)
    """Phase 0: the traffic; phase 1: feedback sent after the recent-records TTL."""
    truth: Truth | None = None

    @property
    def spans_sent(self) -> int:
        return sum(len(b.spans) for phase in self.phases for b in phase)


class _FixedIds(RootDerivedIdGenerator):
    """The SDK's id scheme with the simulator's trace ids (and seeded span ids)."""

    def __init__(self, seed: int):
        super().__init__()
        self._random.seed(seed)
        self.next_trace_id = 0

    def generate_trace_id(self) -> int:
        self._pending.trace_id = self.next_trace_id
        return self.next_trace_id


class _SdkApp:
    """The project's SDK, one monitor per (release, hidden) as an app would configure it."""

    def __init__(self, scenario: Scenario):
        self.scenario = scenario
        self.exporter = InMemorySpanExporter()
        self.ids = _FixedIds(scenario.seed)
        self.monitors: dict[tuple[str, bool], object] = {}

    def monitor(self, release: str, hidden: bool):
        import rag_monitor
        from rag_monitor.sdk.config import CaptureConfig

        key = (release, hidden)
        if key not in self.monitors:
            rng_owner = sorted(self.scenario.pii.values)[0] if self.scenario.pii.values else "owner@example-mail.com"
            capture = CaptureConfig(hide_inputs=hidden, hide_outputs=hidden, hide_document_content=hidden)
            m = rag_monitor.init(service_name=self.scenario.service, release=release, span_exporter=self.exporter,
                                 batch=False, capture=capture,
                                 resource_attributes={"deployment.owner": rng_owner,
                                                      "service.instance.id": f"sim-{self.scenario.seed}"})
            m._tracer.id_generator = self.ids
            self.monitors[key] = m
        return self.monitors[key]

    def take(self) -> list[ReadableSpan]:
        spans = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        return spans

    def shutdown(self) -> None:
        for m in self.monitors.values():
            m.shutdown()


def _docs(docs, pii_owner: str):
    return [{"id": d.id, "content": d.content, "score": 0.9 - i / 10, "metadata": {"owner": pii_owner, "rank": i}}
            for i, d in enumerate(docs)]


def _sdk_query(app: _SdkApp, q: SimQuery, pii_value: str) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """Run the query through the SDK; returns (query spans, feedback spans)."""
    monitor = app.monitor(q.release, q.hidden)
    app.ids.next_trace_id = q.trace_id
    stages = iter(q.stages)
    try:
        with monitor.query(q.query, session_id=q.session_id, user_id=q.user_id, tenant=q.tenant, intent=q.intent,
                           variant=q.variant, shadow_of=q.shadow_of) as handle:
            handle.set_attribute("app.tags", ("web", "eu", pii_value))
            handle.set_attribute("app.request", json.dumps({"client": {"contact": pii_value, "tier": "gold"}}))
            embed = q.calls[0]
            with handle.embed(model=embed.model) as e:
                e.set_attribute(sc.LLM_TOKEN_COUNT_PROMPT, embed.input_tokens)
                e.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, embed.input_tokens)
            next(stages)
            if q.error is not None:
                with handle.retrieve():
                    next(stages)
                    raise RuntimeError(q.error)
            for f in q.filters:
                ids = [d.id for d in f.excluded] if f.report in ("ids", "both") else None
                documents = _docs(f.excluded, pii_value) if f.report in ("documents", "both") else None
                with handle.filter(f.kind, predicate=f"tenant = '{q.tenant}' AND owner <> '{pii_value}'",
                                   candidates_in=f.candidates_in, candidates_out=f.candidates_out,
                                   excluded_ids=ids, excluded_documents=documents):
                    next(stages)
            with handle.retrieve() as r:
                r.documents(_docs(q.retrieved, pii_value))
            stage = next(stages)
            stage = next(stages)
            if stage.name == "rerank":
                try:
                    with handle.rerank(model="rerank-v3", top_k=len(q.delivered)) as rr:
                        rr.documents(_docs(q.delivered, pii_value))
                        if stage.error:
                            raise TimeoutError(stage.error)
                except TimeoutError:
                    pass
                stage = next(stages)
            with handle.context(document_ids=[d.id for d in q.delivered]):
                pass
            for call in q.calls[1:]:
                next(stages)
                with handle.generate(model=call.model, provider="openai") as g:
                    g.tokens(prompt=call.input_tokens, completion=call.output_tokens)
                    if call.cached_input_tokens:
                        g.set_attribute(CACHED_PROMPT_OI, call.cached_input_tokens)
                    if q.ttft_s is not None and call is q.calls[-1]:
                        g.set_attribute(sc.RAG_TIME_TO_FIRST_TOKEN, q.ttft_s)
            if q.refused:
                handle.refuse(reason=f"policy, user {pii_value}", answer=q.answer)
            else:
                handle.answer(q.answer, citations=[d.id for d in q.delivered[:1]] + [pii_value], confidence=q.confidence)
    except RuntimeError:
        pass
    spans = app.take()
    _retime(spans, q)
    return spans, _feedback_spans(app, q, monitor)


def _retime(spans: list[ReadableSpan], q: SimQuery) -> None:
    """Give the SDK's spans the simulated times: the root the query's, stages in creation order."""
    stages = iter(q.stages)
    for span in sorted(spans, key=lambda s: s.start_time):
        if span.name == sc.RAG_QUERY_SPAN_NAME:
            span._start_time, span._end_time = q.start_ns, q.end_ns
        else:
            stage = next(stages)
            span._start_time, span._end_time = stage.start_ns, stage.end_ns


def _feedback_spans(app: _SdkApp, q: SimQuery, monitor) -> list[ReadableSpan]:
    out = []
    for fb in q.feedback:
        monitor.feedback(q.trace_hex, fb.kind, reason=fb.reason)
        (span,) = app.take()
        span._context = SpanContext(q.trace_id, fb.span_id, is_remote=False, trace_flags=TraceFlags(1))
        out.append(span)
    return out


# --- hand-built dialects ---------------------------------------------------------------------


class _Builder:
    def __init__(self, q: SimQuery, scope: str, version: str, pii_value: str, service: str):
        self.q = q
        self.resource = Resource({sc.SERVICE_NAME: service, sc.SERVICE_VERSION: q.release,
                                  "host.owner": pii_value})
        self.scope = InstrumentationScope(scope, version, None, {"maintainer": pii_value})
        self.root_id = root_span_id(q.trace_id)
        self.spans: list[ReadableSpan] = []
        self._n = 0

    def span(self, name, start, end, attrs, parent=None, events=(), error: str | None = None) -> int:
        self._n += 1
        span_id = self.root_id if parent is None else (self.root_id ^ (self._n * 0x9E3779B97F4A7C15)) & (2**64 - 1) or 1
        status = Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET)
        parent_ctx = None if parent is None else SpanContext(self.q.trace_id, parent, False)
        self.spans.append(ReadableSpan(
            name, SpanContext(self.q.trace_id, span_id, False, TraceFlags(1)), parent_ctx, self.resource,
            attrs, [Event(e[0], e[1], timestamp=start) for e in events], (), status=status, start_time=start,
            end_time=end, instrumentation_scope=self.scope))
        return span_id


def _oi_docs(prefix: str, docs, pii_value: str, with_ids: bool) -> dict:
    attrs = {}
    for i, d in enumerate(docs):
        p = f"{prefix}.{i}."
        attrs[p + sc.DOCUMENT_CONTENT] = d.content
        attrs[p + sc.DOCUMENT_METADATA] = json.dumps({"doc_id": d.id, "owner": pii_value})
        if with_ids:
            attrs[p + sc.DOCUMENT_ID] = d.id
            attrs[p + sc.DOCUMENT_SCORE] = 0.9 - i / 10
    return attrs


def _openinference(q: SimQuery, pii_value: str, service: str) -> list[ReadableSpan]:
    llama = q.dialect == "llamaindex"
    b = _Builder(q, "openinference.instrumentation." + ("llama_index" if llama else "langchain"),
                 "4.6" if llama else "0.1.80", pii_value, service)
    kind = sc.OPENINFERENCE_SPAN_KIND
    root = b.span("RetrieverQueryEngine.query" if llama else "RunnableSequence", q.start_ns, q.end_ns, {
        kind: sc.SPAN_KIND_CHAIN, sc.INPUT_VALUE: q.query, sc.OUTPUT_VALUE: q.answer, sc.SESSION_ID: q.session_id,
        sc.USER_ID: q.user_id, sc.METADATA: json.dumps({"session_id": q.session_id, "caller": {"email": pii_value}}),
    }, error=q.error)
    stages = iter(q.stages)
    embed, calls = q.calls[0], q.calls[1:]
    st = next(stages)
    embed_attrs = {kind: sc.SPAN_KIND_EMBEDDING, sc.EMBEDDING_MODEL_NAME: embed.model,
                   f"{sc.EMBEDDING_EMBEDDINGS}.0.{sc.EMBEDDING_TEXT}": q.query}
    if embed.input_tokens:
        embed_attrs.update({sc.LLM_TOKEN_COUNT_PROMPT: embed.input_tokens, sc.LLM_TOKEN_COUNT_TOTAL: embed.input_tokens})
    st_retrieve = next(stages)
    if llama:  # .retrieve > ._retrieve > embedding: the outer retriever has the documents
        outer = b.span("BaseRetriever.retrieve", st_retrieve.start_ns, st_retrieve.end_ns,
                       {kind: sc.SPAN_KIND_RETRIEVER, sc.INPUT_VALUE: q.query,
                        **_oi_docs(sc.RETRIEVAL_DOCUMENTS, q.retrieved, pii_value, True)}, root)
        inner = b.span("VectorIndexRetriever._retrieve", st_retrieve.start_ns + 1000, st_retrieve.end_ns - 1000,
                       {kind: sc.SPAN_KIND_RETRIEVER}, outer)
        b.span("OpenAIEmbedding.get_query_embedding", st.start_ns, st.end_ns, embed_attrs, inner)
    else:
        b.span("OpenAIEmbeddings", st.start_ns, st.end_ns, embed_attrs, root)
        b.span("VectorStoreRetriever", st_retrieve.start_ns, st_retrieve.end_ns,
               {kind: sc.SPAN_KIND_RETRIEVER, sc.INPUT_VALUE: q.query,
                **_oi_docs(sc.RETRIEVAL_DOCUMENTS, q.retrieved, pii_value, False)}, root)
        b.span("ChatPromptTemplate", st_retrieve.end_ns, st_retrieve.end_ns + 1000,
               {kind: sc.SPAN_KIND_CHAIN, "llm.prompt_template.variables": json.dumps({"question": q.query})}, root)
    if q.error is None:
        for call in calls:
            st = next(stages)
            llm = {kind: sc.SPAN_KIND_LLM, sc.LLM_MODEL_NAME: call.model,
                   sc.LLM_TOKEN_COUNT_PROMPT: call.input_tokens, sc.LLM_TOKEN_COUNT_COMPLETION: call.output_tokens,
                   sc.LLM_TOKEN_COUNT_TOTAL: call.input_tokens + call.output_tokens,
                   f"{sc.LLM_INPUT_MESSAGES}.0.{sc.MESSAGE_ROLE}": "user",
                   f"{sc.LLM_INPUT_MESSAGES}.0.{sc.MESSAGE_CONTENT}": q.query,
                   f"{sc.LLM_OUTPUT_MESSAGES}.0.{sc.MESSAGE_ROLE}": "assistant",
                   f"{sc.LLM_OUTPUT_MESSAGES}.0.{sc.MESSAGE_CONTENT}": q.answer if call is calls[-1] else "route: kb"}
            if call.cached_input_tokens:
                llm[CACHED_PROMPT_OI] = call.cached_input_tokens
            events = [("log", {"message": f"prompt built for {pii_value}"})]
            if llama:  # .predict (no tokens) > .chat (the call)
                outer = b.span("LLM.predict", st.start_ns, st.end_ns, {kind: sc.SPAN_KIND_LLM}, root)
                b.span("OpenAI.chat", st.start_ns + 1000, st.end_ns - 1000, llm, outer, events)
            else:
                b.span("ChatOpenAI", st.start_ns, st.end_ns, llm, root, events)
    return b.spans


def _genai(q: SimQuery, pii_value: str, service: str) -> list[ReadableSpan]:
    b = _Builder(q, "opentelemetry.instrumentation.openai_v2", "2.1b0", pii_value, service)
    op = sc.GEN_AI_OPERATION_NAME
    root = b.span("POST /ask", q.start_ns, q.end_ns, {
        sc.GEN_AI_CONVERSATION_ID: q.session_id, sc.USER_ID: q.user_id, "http.client_ip": pii_value,
    }, error=q.error)
    stages = iter(q.stages)
    embed, calls = q.calls[0], q.calls[1:]
    st = next(stages)
    b.span(f"embeddings {embed.model}", st.start_ns, st.end_ns, {
        op: sc.GEN_AI_OPERATION_EMBEDDINGS, sc.GEN_AI_REQUEST_MODEL: embed.model,
        sc.GEN_AI_USAGE_INPUT_TOKENS: embed.input_tokens}, root)
    st = next(stages)
    documents = [{"id": d.id, "score": 0.5, "content": d.content} for d in q.retrieved]
    b.span("retrieval kb", st.start_ns, st.end_ns, {
        op: sc.GEN_AI_OPERATION_RETRIEVAL, sc.GEN_AI_RETRIEVAL_QUERY_TEXT: q.query,
        sc.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps(documents)}, root)
    if q.error is None:
        for call in calls:
            st = next(stages)
            answer = q.answer if call is calls[-1] else "route: kb"
            attrs = {op: sc.GEN_AI_OPERATION_CHAT, sc.GEN_AI_REQUEST_MODEL: call.model, sc.GEN_AI_RESPONSE_MODEL: call.model,
                     sc.GEN_AI_USAGE_INPUT_TOKENS: call.input_tokens, sc.GEN_AI_USAGE_OUTPUT_TOKENS: call.output_tokens,
                     sc.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [{"type": "text", "content": q.query}]}]),
                     sc.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])}
            if call.cached_input_tokens:
                attrs[CACHED_PROMPT_GENAI] = call.cached_input_tokens
            b.span(f"chat {call.model}", st.start_ns, st.end_ns, attrs, root,
                   [("gen_ai.client.inference.operation.details", {"note": f"billing contact {pii_value}"})])
    return b.spans


# --- requests ---------------------------------------------------------------------------------


def render(scenario: Scenario) -> Traffic:
    """Every query's spans, spread over export requests in order; feedback after the TTL apart."""
    import random

    rng = random.Random(scenario.seed ^ 0x5EED)
    app = _SdkApp(scenario)
    positions: dict[int, list[ReadableSpan]] = defaultdict(list)
    after_ttl: list[ReadableSpan] = []
    after_ttl_duplicates: list[ReadableSpan] = []
    try:
        for i, q in enumerate(scenario.queries):
            pii_value = scenario.pii.any(rng)
            if q.dialect == "sdk":
                spans, feedback = _sdk_query(app, q, pii_value)
            else:
                spans = _openinference(q, pii_value, scenario.service) if q.dialect in ("langchain", "llamaindex") \
                    else _genai(q, pii_value, scenario.service)
                feedback = _feedback_spans(app, q, app.monitor(q.release, False))
            root_at = i * 3 + 2
            root = [s for s in spans if s.context.span_id == root_span_id(q.trace_id)]
            rest = [s for s in spans if s not in root]
            for n, span in enumerate(rest):  # the other spans, spread over the trace's requests
                positions[root_at - (n % q.requests)].append(span)
            if not q.root_lost:
                positions[root_at].extend(root)
            for fb, span in zip(q.feedback, feedback):
                at = {"early": root_at, "late": root_at + _LATE}.get(fb.timing)
                if at is None:
                    after_ttl.append(span)
                    if fb.duplicated:
                        after_ttl_duplicates.append(span)
                    continue
                positions[at].append(span)
                if fb.duplicated:
                    positions[at + _LATE].append(span)
    finally:
        app.shutdown()
    batches: dict[int, list[ReadableSpan]] = defaultdict(list)
    for at in sorted(positions):
        batches[at // _BATCH_POSITIONS].extend(positions[at])
    phase0 = [Batch(batches[k]) for k in sorted(batches) if batches[k]]
    phase1 = [Batch(spans) for spans in (after_ttl, after_ttl_duplicates) if spans]
    traffic = Traffic(scenario, [phase0, phase1])
    traffic.truth = expected(scenario, spans_sent=traffic.spans_sent)
    return traffic
