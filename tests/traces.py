"""SDK-shaped traces as OTLP protobuf bodies, split however a test needs: children in one
request, the root in a later one, feedback after that."""

from __future__ import annotations

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import Span, encode_export_request

T0 = 1_700_000_000_000_000_000


def trace_id_of(i: int, prefix: int = 0x5E) -> str:
    return (prefix << 120 | i + 1).to_bytes(16, "big").hex()


def _span_id(trace_id: str, n: int) -> str:
    return f"{int(trace_id[-12:], 16) % 2**40:010x}{n:06x}"


def root_span(trace_id: str, *, release: str = "r1", service: str = "svc", **attrs) -> Span:
    return Span(trace_id, _span_id(trace_id, 1), None, sc.RAG_QUERY_SPAN_NAME, 1, T0, T0 + 500_000_000,
                attributes={sc.OPENINFERENCE_SPAN_KIND: sc.SPAN_KIND_CHAIN, sc.INPUT_VALUE: f"question {trace_id[-4:]}",
                            sc.OUTPUT_VALUE: "Cancel under Settings, then Billing.", sc.RAG_RELEASE: release, **attrs},
                resource={sc.SERVICE_NAME: service})


def child_spans(trace_id: str, service: str = "svc") -> list[Span]:
    """A filter that removed one document and a retrieval of two documents."""
    root = _span_id(trace_id, 1)
    resource = {sc.SERVICE_NAME: service}
    prefix = f"{sc.RETRIEVAL_DOCUMENTS}."
    documents = {}
    for i, doc in enumerate(["doc-1", "doc-2"]):
        documents[f"{prefix}{i}.{sc.DOCUMENT_ID}"] = doc
        documents[f"{prefix}{i}.{sc.DOCUMENT_CONTENT}"] = f"To cancel, open Settings, then Billing ({doc})."
    return [
        Span(trace_id, _span_id(trace_id, 2), root, "filter", 1, T0 + 10_000_000, T0 + 20_000_000,
             attributes={sc.OPENINFERENCE_SPAN_KIND: sc.SPAN_KIND_CHAIN, sc.RAG_STAGE: sc.STAGE_FILTER,
                         sc.RAG_FILTER_KIND: "relevance", sc.RAG_FILTER_CANDIDATES_IN: 3,
                         sc.RAG_FILTER_CANDIDATES_OUT: 2, sc.RAG_FILTER_EXCLUDED_IDS: ["doc-9"]},
             resource=resource),
        Span(trace_id, _span_id(trace_id, 3), root, "retrieve", 1, T0 + 20_000_000, T0 + 120_000_000,
             attributes={sc.OPENINFERENCE_SPAN_KIND: sc.SPAN_KIND_RETRIEVER, sc.RAG_STAGE: sc.STAGE_RETRIEVE,
                         **documents},
             resource=resource),
    ]


def feedback_span(trace_id: str, kind: str = "thumbs_down", n: int = 9) -> Span:
    return Span(trace_id, _span_id(trace_id, n), _span_id(trace_id, 1), sc.RAG_FEEDBACK_SPAN_NAME, 1,
                T0 + 9_000_000_000, T0 + 9_000_000_000,
                attributes={sc.RAG_FEEDBACK_KIND: kind, sc.RAG_FEEDBACK_REASON: "wrong"},
                resource={sc.SERVICE_NAME: "svc"})


def body(spans: list[Span]) -> bytes:
    return encode_export_request(spans)
