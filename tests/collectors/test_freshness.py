"""Index events and served versions out of spans; per-call prices; the SDK's index_event and cache."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from rag_monitor import semconv as sc
from rag_monitor.collectors import PriceTable
from rag_monitor.collectors.freshness import IndexEvent, parse_time, served_versions, split_index_events
from rag_monitor.collectors.otlp import Span
from rag_monitor.record import Document, ModelCall, QueryRecord
from tests.collectors.helpers import assemble, decode

T = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize("value, expected", [
    (T, T), (int(T), T), (T * 1000, T), (str(T), T), ("2026-01-01T00:00:00Z", T), ("2026-01-01T01:00:00+01:00", T),
    ("2026-01-01T00:00:00", T), ("2026-01-01", T),
    (None, None), (True, None), ("yesterday", None), (float("nan"), None), (-5, None), ("", None), ([T], None),
])
def test_parse_time(value, expected):
    assert parse_time(value) == expected


def _span(n: int, **attrs) -> Span:
    return Span(f"{n:032x}", f"{n:016x}", None, sc.RAG_INDEX_SPAN_NAME, 1, int((T + 50) * 1e9), int((T + 60) * 1e9), attributes=attrs)


def test_index_spans_are_taken_out_and_bad_ones_counted():
    query = Span("f" * 32, "e" * 16, None, sc.RAG_QUERY_SPAN_NAME, 1, 0, 1, attributes={})
    spans = [
        _span(1, **{sc.RAG_INDEX_DOCUMENT_ID: "a", sc.RAG_INDEX_COMMITTED_AT: T, sc.RAG_INDEX_INDEXED_AT: T + 30, sc.RAG_INDEX_SOURCE: "wiki"}),
        query,
        _span(2, **{sc.RAG_INDEX_DOCUMENT_ID: "b", sc.RAG_INDEX_COMMITTED_AT: "2026-01-01"}),  # indexed: the span's end
        _span(3, **{sc.RAG_INDEX_DOCUMENT_ID: "c", sc.RAG_INDEX_COMMITTED_AT: "soon"}),
        _span(4, **{sc.RAG_INDEX_DOCUMENT_ID: "", sc.RAG_INDEX_COMMITTED_AT: T}),
    ]
    events, invalid, rest = split_index_events(spans)
    assert events == [IndexEvent("a", T, T + 30, "wiki"), IndexEvent("b", T, T + 60)]
    assert [e.lag_s for e in events] == [30, 60]
    assert invalid == 2 and rest == [query]
    assert split_index_events([query]) == ([], 0, [query])


def test_served_versions_from_the_delivered_documents_metadata():
    record = QueryRecord("1" * 32, "2" * 16, 0, 1, retrieved=[
        Document("a", metadata={"committed_at": T}), Document("b", metadata={"last_modified_date": "2026-01-01"}),
        Document("c", metadata={"committed_at": "n/a"}), Document("d"), Document(None, metadata={"committed_at": T}),
    ])
    keys = ("committed_at", "last_modified_date")
    assert served_versions(record, keys) == {"a": T, "b": T}
    record.delivered = [record.retrieved[1]]  # the reranker kept one: what the generator was served
    assert served_versions(record, keys) == {"b": T}
    record.delivered = [Document("a"), Document("d")]  # the reranker dropped the metadata: the retrieved copy's
    assert served_versions(record, keys) == {"a": T}


def test_the_sdk_sends_index_events_and_cache_lookups():
    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="svc", span_exporter=exporter, batch=False)
    try:
        monitor.index_event("doc-1", datetime.fromtimestamp(T, timezone.utc), indexed_at=T + 12.5, source="s3")
        with monitor.query("q") as q:
            q.cache("embedding", hit=True)
            q.cache("embedding", hit=True)
            q.cache("response", hit=False)
            with q.retrieve(data_source="support-kb") as r:
                r.documents([{"id": "doc-1", "content": "x", "metadata": {"committed_at": T}}])
            with pytest.raises(ValueError, match="cache kind"):
                q.cache("kv", hit=True)
        for bad in ({"document_id": ""}, {"committed_at": "yesterday"}, {"committed_at": datetime(2026, 1, 1)},
                    {"indexed_at": float("inf")}):
            with pytest.raises(ValueError):
                monitor.index_event(**{"document_id": "d", "committed_at": T, **bad})
    finally:
        monitor.shutdown()
    spans = exporter.get_finished_spans()
    (index,) = [s for s in spans if s.name == sc.RAG_INDEX_SPAN_NAME]
    assert index.parent is None and index.start_time == index.end_time == int((T + 12.5) * 1e9)
    events, _, _ = split_index_events(decode(spans))
    assert events == [IndexEvent("doc-1", T, T + 12.5, "s3")]
    record = assemble([s for s in spans if s.name != sc.RAG_INDEX_SPAN_NAME])
    assert record.cache == {"embedding": {"hit": 2}, "response": {"miss": 1}}
    assert ModelCall("retrieval", "support-kb") in record.model_calls
    assert served_versions(record, ("committed_at",)) == {"doc-1": T}


def test_a_disabled_monitor_still_checks_its_arguments():
    monitor = rag_monitor.init(service_name="svc", enabled=False)
    monitor.index_event("d", T)
    with pytest.raises(ValueError):
        monitor.index_event("d", "yesterday")
    with monitor.query("q") as q:
        q.cache("retrieval", hit=False)
        with pytest.raises(ValueError):
            q.cache("kv", hit=False)


def test_per_call_prices_and_prompt_cache_savings():
    prices = PriceTable.from_mapping({
        "models": {"gpt-4o*": {"input": 2.5, "output": 10, "cached_input": 1.25}, "gemini*": {"input": 0.1, "output": 0.4}},
        "calls": {"rerank-*": {"per_1k_calls": 2.0}, "rerank-v3.5": {"per_call": 0.003}, "support-kb": {"per_call": 0.0004}},
    })
    assert prices.call_cost(ModelCall("rerank", "rerank-v3.5", 500)) == 0.003  # most specific pattern, tokens ignored
    assert prices.call_cost(ModelCall("rerank", "rerank-english-v3.0")) == pytest.approx(0.002)
    assert prices.call_cost(ModelCall("retrieval", "Support-KB")) == 0.0004
    assert prices.call_cost(ModelCall("retrieval", "pgvector")) is None and not prices.unknown_models
    assert prices.cache_saving(ModelCall("llm", "gpt-4o", 1000, 100, 800)) == pytest.approx(800 * 1.25 / 1e6)
    assert prices.cache_saving(ModelCall("llm", "gemini-2", 1000, 100, 800)) == 0  # no cached rate: no discount
    assert prices.cache_saving(ModelCall("llm", "unknown", 1000, 100, 800)) == 0
    for bad in ({"per_call": -1}, {"per_call": 1, "per_1k_calls": 2}, {"usd": 1}, {"per_call": "cheap"}, 3):
        with pytest.raises(ValueError, match="x-rerank"):
            PriceTable.from_mapping({"calls": {"x-rerank": bad}})
    with pytest.raises(ValueError, match="'calls' must map"):
        PriceTable.from_mapping({"calls": ["rerank"]})


def test_a_document_id_with_pii_gets_one_pseudonym_in_index_events_and_retrievals():
    import json

    from rag_monitor.collectors.redaction import Redactor

    meta = json.dumps({"committed_at": "2026-01-01T00:00:00Z"})
    spans = [_span(1, **{sc.RAG_INDEX_DOCUMENT_ID: "alice@example.com.pdf", sc.RAG_INDEX_COMMITTED_AT: "2026-01-01T00:00:00Z"}),
             Span("3" * 32, "4" * 16, None, "retrieve", 1, 0, 1,
                  attributes={"retrieval.documents.0.document.id": "alice@example.com.pdf", "retrieval.documents.0.document.metadata": meta})]
    Redactor().redact_spans(spans)
    events, _, _ = split_index_events(spans)
    retrieved_id = spans[1].attributes["retrieval.documents.0.document.id"]
    assert "alice" not in retrieved_id and events[0].document_id == retrieved_id
    assert events[0].committed_at == T and json.loads(spans[1].attributes["retrieval.documents.0.document.metadata"]) == {"committed_at": "2026-01-01T00:00:00Z"}
