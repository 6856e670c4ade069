"""What the receiver does not keep is said in the response; a trace that lost its root is not a query;
a gzip body of several members is read whole, trailing garbage is a 400."""

from __future__ import annotations

import gzip

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from rag_monitor import semconv
from tests.services import wait_until

NOW = 1_700_000_000_000_000_000


def _request(trace_byte: int, stage_spans: int, root: bool) -> trace_service_pb2.ExportTraceServiceRequest:
    """An SDK-shaped trace: ``stage_spans`` retrieve stages under a ``rag.query`` root (sent or not)."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    root_id = bytes([trace_byte]) * 8
    for i in range(stage_spans):
        span = spans.add(trace_id=bytes([trace_byte]) * 16, span_id=bytes([trace_byte, i + 1]) * 4, parent_span_id=root_id,
                         name="retrieve", start_time_unix_nano=NOW + 10_000_000, end_time_unix_nano=NOW + 90_000_000)
        span.attributes.append(common_pb2.KeyValue(key=semconv.RAG_STAGE, value=common_pb2.AnyValue(string_value="retrieve")))
    if root:
        span = spans.add(trace_id=bytes([trace_byte]) * 16, span_id=root_id, name=semconv.RAG_QUERY_SPAN_NAME,
                         start_time_unix_nano=NOW, end_time_unix_nano=NOW + 100_000_000)
        span.attributes.append(common_pb2.KeyValue(key=semconv.INPUT_VALUE, value=common_pb2.AnyValue(string_value="q")))
    return request


def test_spans_over_the_per_trace_limit_are_reported_in_partial_success(start_agent, tmp_path):
    ingest = tmp_path / "ingest.yaml"
    ingest.write_text("limits:\n  max_spans_per_trace: 3\n")
    agent = start_agent(ingest_config=str(ingest))
    status, _, body = agent.post(_request(1, stage_spans=5, root=False).SerializeToString())
    assert status == 200
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(body)
    assert response.partial_success.rejected_spans == 2
    assert "max_spans_per_trace" in response.partial_success.error_message
    assert agent.metric("rag_agent_spans_dropped_total", {"reason": "trace_too_large"}) == 2


def test_a_trace_whose_root_never_arrives_is_counted_apart_not_as_a_query(start_agent):
    agent = start_agent(root_timeout_s=1.0)
    assert agent.post(_request(2, stage_spans=2, root=False).SerializeToString())[0] == 200
    wait_until(lambda: agent.metric("rag_agent_traces_partial_total") == 1, timeout=30, what="the partial trace counted")
    assert agent.metric_sum("rag_queries_total") == 0 and agent.metric_sum("rag_stage_duration_seconds_count") == 0
    assert agent.metric_sum("rag_query_duration_seconds_count") == 0 and agent.store.recent.get("02" * 16) is None


def test_multi_member_gzip_and_trailing_garbage_over_http(running_agent):
    body = gzip.compress(_request(3, 1, True).SerializeToString()) + gzip.compress(_request(4, 1, True).SerializeToString())
    status, _, _ = running_agent.post(body, headers={"Content-Encoding": "gzip"})
    assert status == 200
    wait_until(lambda: running_agent.metric_sum("rag_queries_total") == 2, timeout=10, what="both members' queries")
    status, _, body = running_agent.post(gzip.compress(_request(5, 1, True).SerializeToString()) + b"junk",
                                         headers={"Content-Encoding": "gzip"})
    assert status == 400 and b"trailing data" in body
    assert running_agent.store.recent.get("05" * 16) is None
