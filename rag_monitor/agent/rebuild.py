"""A query's trace rebuilt from its redacted record, for Phoenix, when its spans are gone.

The tail sampler (``agent/tail_sampling.py``) holds the spans of sampled-out traces for a short
while only; a thumbs-down (or a shadow pair) that arrives later still needs the trace in Phoenix,
because the review page and the golden set link to it. The recent-records cache keeps the whole
redacted record for ``recent_ttl_s`` (the window in which a complaint pulls a query into review),
so the trace is rebuilt from it: the root span (question, answer, release, session) and one span
per stage, with the original trace and span ids (links and annotations find them), the delivered
documents on the retrieval span, and ``rag.forward.rebuilt = true`` so nobody mistakes the
rebuilt trace for the app's own spans.

    spans = spans_from_record(record)
"""

from __future__ import annotations

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import STATUS_ERROR, STATUS_UNSET, Span
from rag_monitor.record import QueryRecord

REBUILT = "rag.forward.rebuilt"

_STAGE_KINDS = {sc.STAGE_RETRIEVE: sc.SPAN_KIND_RETRIEVER, sc.STAGE_GENERATE: sc.SPAN_KIND_LLM}


def spans_from_record(record: QueryRecord) -> list[Span]:
    resource = {sc.SERVICE_NAME: record.service or "unknown", sc.SERVICE_VERSION: record.release}
    attributes = {sc.OPENINFERENCE_SPAN_KIND: sc.SPAN_KIND_CHAIN, sc.INPUT_VALUE: record.query,
                  sc.OUTPUT_VALUE: record.answer, sc.RAG_RELEASE: record.release, sc.RAG_VARIANT: record.variant,
                  REBUILT: True}
    if record.session_id:
        attributes[sc.SESSION_ID] = record.session_id
    root = Span(record.trace_id, record.root_span_id, None, sc.RAG_QUERY_SPAN_NAME, 1, record.start_ns, record.end_ns,
                status_code=STATUS_ERROR if record.error else STATUS_UNSET, status_message=record.error or "",
                attributes=attributes, resource=resource)
    spans = [root]
    for stage in record.stages:
        if stage.span_id == record.root_span_id:
            continue
        attrs = {sc.OPENINFERENCE_SPAN_KIND: _STAGE_KINDS.get(stage.name, sc.SPAN_KIND_CHAIN), sc.RAG_STAGE: stage.name,
                 REBUILT: True}
        if stage.name == sc.STAGE_RETRIEVE:
            for i, doc in enumerate(record.delivered or record.retrieved):
                prefix = sc.retrieval_document_prefix(i)
                attrs[prefix + sc.DOCUMENT_ID] = doc.id or ""
                attrs[prefix + sc.DOCUMENT_CONTENT] = doc.content
        if stage.name == sc.STAGE_GENERATE and record.llm_model:
            attrs[sc.LLM_MODEL_NAME] = record.llm_model
        spans.append(Span(record.trace_id, stage.span_id, record.root_span_id, stage.name, 1, stage.start_ns,
                          stage.end_ns, status_code=STATUS_ERROR if stage.error else STATUS_UNSET,
                          status_message=stage.error or "", attributes=attrs, resource=resource))
    return spans
