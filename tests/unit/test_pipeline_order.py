"""Records completed by one OTLP request are observed in the order their queries started, not in
the order their spans happen to sit in the request (exporters group spans by resource and scope,
so a trace whose feedback span comes from another resource can come first)."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from rag_monitor import semconv as sc
from rag_monitor.agent.service import Agent
from rag_monitor.settings import load_settings

APP = Resource({sc.SERVICE_NAME: "bot", sc.SERVICE_VERSION: "r1"})
FEEDBACK_APP = Resource({sc.SERVICE_NAME: "bot-feedback"})
T0 = 1_790_000_000 * 10**9


def _query(trace_id: int, start_ns: int) -> list[ReadableSpan]:
    root = SpanContext(trace_id, trace_id & (2**64 - 1), False, TraceFlags(1))
    retrieve = ReadableSpan("retrieve", SpanContext(trace_id, 7, False, TraceFlags(1)), root, APP,
                            {sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER", sc.RAG_STAGE: "retrieve"},
                            start_time=start_ns + 1000, end_time=start_ns + 2000)
    query = ReadableSpan(sc.RAG_QUERY_SPAN_NAME, root, None, APP,
                         {sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: "How do I cancel my plan?",
                          sc.SESSION_ID: "s1", sc.RAG_RELEASE: "r1"}, start_time=start_ns, end_time=start_ns + 3000)
    return [retrieve, query]


def _thumbs_up(trace_id: int) -> ReadableSpan:
    parent = SpanContext(trace_id, trace_id & (2**64 - 1), True, TraceFlags(1))
    return ReadableSpan(sc.RAG_FEEDBACK_SPAN_NAME, SpanContext(trace_id, 9, False, TraceFlags(1)), parent, FEEDBACK_APP,
                        {sc.RAG_FEEDBACK_KIND: "thumbs_up"}, start_time=T0 + 20 * 10**9, end_time=T0 + 20 * 10**9)


def test_a_reask_in_the_same_request_as_its_original_is_a_regeneration(tmp_path):
    original, reask = 0xA1 << 64 | 1, 0xB2 << 64 | 2
    # The re-ask's feedback span, from another resource, is encoded first: its trace comes first.
    spans = [_thumbs_up(reask), *_query(original, T0), *_query(reask, T0 + 10 * 10**9)]
    agent = Agent(load_settings(overrides={"data_dir": str(tmp_path), "detector_profiles": "", "hhem_model_path": ""},
                                environ={}))
    agent.open()
    try:
        agent.pipeline.ingest(encode_spans(spans).SerializeToString(), "application/x-protobuf")
        assert agent.settle(10)  # the sinks (metrics, regeneration) consume off the request path
        agent.regeneration.tick()  # the regeneration job's check (it runs off the request path)
        assert agent.registry.get_sample_value("rag_queries_total", {"release": "r1", "variant": "production",
                                                                     "intent": "unknown", "tenant": "unknown"}) == 2
        assert agent.registry.get_sample_value("rag_regenerations_total", {"release": "r1", "variant": "production",
                                                                           "intent": "unknown", "source": "inferred"}) == 1
    finally:
        agent.close()
