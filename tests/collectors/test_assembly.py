from __future__ import annotations

from rag_monitor import semconv as sc
from rag_monitor.collectors import Span, TraceAssembler


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _trace(n: int, with_vector: list[float] | None = None) -> list[Span]:
    """A small SDK-shaped trace: root, retrieve, generate (+ embed)."""
    trace_id = f"{n + 1:032x}"
    root_id = f"{n + 1:016x}"
    resource = {"service.name": "svc"}

    def span(i, name, parent, attrs):
        return Span(trace_id, f"{(n + 1) * 100 + i:016x}" if i else root_id, parent, name, 1, 10 + i, 100 - i, attributes=attrs, resource=resource)

    spans = [
        span(1, "retrieve", root_id, {sc.RAG_STAGE: "retrieve", "retrieval.documents.0.document.id": "d1", "retrieval.documents.0.document.content": "c"}),
        span(2, "generate", root_id, {sc.RAG_STAGE: "generate", sc.LLM_TOKEN_COUNT_PROMPT: 10, sc.LLM_TOKEN_COUNT_COMPLETION: 2}),
        span(0, sc.RAG_QUERY_SPAN_NAME, None, {sc.INPUT_VALUE: f"q{n}", sc.OUTPUT_VALUE: f"a{n}"}),
    ]
    if with_vector is not None:
        spans.insert(0, span(3, "embed", root_id, {sc.RAG_STAGE: "embed", sc.EMBEDDING_MODEL_NAME: "m", sc.RAG_EMBEDDING_ROLE: "query",
                                                   "embedding.embeddings.0.embedding.vector": with_vector}))
    return spans


def _feedback(n: int, kind: str = "thumbs_down") -> Span:
    return Span(f"{n + 1:032x}", f"{(n + 1) * 100 + 9:016x}", f"{n + 1:016x}", sc.RAG_FEEDBACK_SPAN_NAME, 1, 200, 201,
                attributes={sc.RAG_FEEDBACK_KIND: kind, sc.RAG_FEEDBACK_REASON: "wrong"})


def test_out_of_order_across_batches_root_last():
    assembler = TraceAssembler()
    a, b = _trace(1), _trace(2)
    assert assembler.add([a[1], b[0]]).records == []
    assert assembler.add([b[1], a[0]]).records == []
    assert assembler.pending_traces == 2
    out = assembler.add([b[2], a[2]])  # both roots in the last batch
    assert sorted(r.query for r in out.records) == ["q1", "q2"]
    record = next(r for r in out.records if r.query == "q1")
    assert [s.name for s in record.stages] == ["retrieve", "generate"] and record.prompt_tokens == 10
    assert assembler.pending_traces == 0


def test_root_first_then_late_spans_and_late_feedback():
    assembler = TraceAssembler()
    spans = _trace(3)
    out = assembler.add([spans[2], _feedback(3)])  # root with its feedback in one batch
    assert len(out.records) == 1 and [f.kind for f in out.records[0].feedback] == ["thumbs_down"]
    late = assembler.add([spans[0], _feedback(3, "regenerate")])
    assert late.records == [] and late.dropped_spans["late_span"] == 1 and late.late_spans == [spans[0]]
    assert [(lf.trace_id, lf.feedback.kind, lf.known_trace) for lf in late.late_feedback] == [(spans[0].trace_id, "regenerate", True)]


def test_feedback_for_an_unknown_trace_is_reported_not_buffered():
    assembler = TraceAssembler()
    out = assembler.add([_feedback(7)])
    assert [(lf.feedback.kind, lf.known_trace) for lf in out.late_feedback] == [("thumbs_down", False)]
    assert assembler.pending_traces == 0


def test_missing_root_times_out_and_is_counted():
    clock = FakeClock()
    assembler = TraceAssembler(root_timeout_s=30, clock=clock)
    assembler.add([Span("a" * 32, "b" * 16, "c" * 16, "http.get", 3, 1, 2)])  # nothing RAG-shaped, root never comes
    assembler.add(_trace(4)[:2])  # RAG stages whose root never comes
    clock.now += 29
    assert assembler.expire().dropped_traces == {} and assembler.pending_traces == 2
    clock.now += 2
    out = assembler.expire()
    assert out.dropped_traces["root_timeout"] == 1
    assert out.partial_traces == 1 and out.records == []  # stages without their query: not a query
    assert assembler.pending_traces == 0


def test_full_buffer_evicts_the_oldest_trace():
    assembler = TraceAssembler(max_pending_traces=2)
    for n in range(3):
        out = assembler.add(_trace(n)[:1])
    assert out.dropped_traces["evicted"] == 1 and assembler.pending_traces == 2
    # The evicted trace (n=0) can no longer complete with its stages; the others can.
    assert [r.query for r in assembler.add([_trace(1)[2]]).records] == ["q1"]


def test_spans_per_trace_bounded():
    assembler = TraceAssembler(max_spans_per_trace=2)
    out = assembler.add(_trace(5)[:3])  # three distinct spans: a resent span is not a new one
    assert out.dropped_spans["trace_too_large"] == 1


def test_one_truncated_vector_never_fixes_the_dimension():
    assembler = TraceAssembler()
    first = assembler.add(_trace(1, with_vector=[0.1] * 3))  # the very first vector is truncated
    assert first.records[0].query_embedding == [0.1] * 3 and first.rejected_embeddings == 0
    for n in range(2, 7):  # the model's real dimension is not blocked by it
        out = assembler.add(_trace(n, with_vector=[0.1] * 4))
        assert out.rejected_embeddings == 0 and out.records[0].query_embedding == [0.1] * 4
    odd = assembler.add(_trace(7, with_vector=[0.1] * 3))  # a later stray vector is rejected, counted
    assert odd.rejected_embeddings == 1 and odd.records[0].query_embedding is None
    assert assembler.add(_trace(8, with_vector=[0.1] * 4)).records[0].query_embedding == [0.1] * 4


def test_a_real_change_of_dimension_wins_within_the_window():
    assembler = TraceAssembler()
    for n in range(3):
        assembler.add(_trace(n, with_vector=[0.1] * 4))
    accepted = [assembler.add(_trace(10 + n, with_vector=[0.2] * 6)).rejected_embeddings == 0 for n in range(4)]
    assert accepted == [False, False, True, True]  # the new dimension wins once it is the majority (ties: the newest)


def test_a_trace_whose_root_never_arrives_is_partial_not_a_query():
    clock = FakeClock()
    assembler = TraceAssembler(root_timeout_s=10, clock=clock)
    assert assembler.add(_trace(1)[:2]).records == []  # retrieve and generate; rag.query lost
    clock.now += 11
    out = assembler.expire()
    assert out.records == [] and out.partial_traces == 1 and out.assembled_without_root == 0


def test_an_openinference_trace_whose_topmost_span_is_a_stage_is_partial():
    clock = FakeClock()
    assembler = TraceAssembler(root_timeout_s=10, clock=clock)
    t, missing_root = "a" * 32, "b" * 16
    spans = [Span(t, "c" * 16, missing_root, "retriever", 1, 10, 20, attributes={sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER"}),
             Span(t, "d" * 16, missing_root, "llm", 1, 20, 90, attributes={sc.OPENINFERENCE_SPAN_KIND: "LLM", sc.LLM_TOKEN_COUNT_PROMPT: 5})]
    assembler.add(spans)
    clock.now += 11
    out = assembler.expire()
    assert out.records == [] and out.partial_traces == 1
    # a chain with a remote parent (an upstream service's context) is still a query
    chain = Span("e" * 32, "f" * 16, "9" * 16, "rag_chain", 1, 5, 95, attributes={sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: "q"})
    llm = Span("e" * 32, "1" * 16, "f" * 16, "llm", 1, 20, 90, attributes={sc.OPENINFERENCE_SPAN_KIND: "LLM"})
    assembler.add([llm, chain])
    clock.now += 11
    out = assembler.expire()
    assert [r.query for r in out.records] == ["q"] and out.assembled_without_root == 1 and out.partial_traces == 0


def test_not_rag_trace_counted():
    out = TraceAssembler().add([Span("e" * 32, "f" * 16, None, "GET /health", 2, 1, 2)])
    assert out.records == [] and out.dropped_traces["not_rag"] == 1


def test_completed_memory_is_bounded():
    assembler = TraceAssembler(completed_trace_memory=2)
    for n in range(3):
        assembler.add(_trace(n))
    out = assembler.add([_feedback(0)])  # trace 0 was forgotten: feedback still surfaces
    assert [lf.known_trace for lf in out.late_feedback] == [False]
    out = assembler.add([_feedback(2)])
    assert [lf.known_trace for lf in out.late_feedback] == [True]
