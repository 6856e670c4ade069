"""Failure paths of the OTLP receiver (DESIGN.md, failure and bad input)."""

from __future__ import annotations

import gzip
import json
import sqlite3

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from rag_monitor import semconv


def request_with(attrs: dict[str, str], trace_byte: int = 1, root: bool = True) -> trace_service_pb2.ExportTraceServiceRequest:
    span = trace_pb2.Span(
        trace_id=bytes([trace_byte]) * 16, span_id=bytes([trace_byte]) * 8, name=semconv.RAG_QUERY_SPAN_NAME,
        start_time_unix_nano=1_700_000_000_000_000_000, end_time_unix_nano=1_700_000_000_500_000_000,
    )
    attrs = {semconv.OPENINFERENCE_SPAN_KIND: "CHAIN", **attrs}
    for key, value in attrs.items():
        span.attributes.append(common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value)))
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    return request


def test_malformed_protobuf_is_a_400_with_a_message(running_agent):
    status, headers, body = running_agent.post(b"\x0a\xff\xff\xff garbage")
    assert status == 400
    from google.rpc import status_pb2

    assert status_pb2.Status.FromString(body).message
    assert running_agent.metric("rag_agent_ingest_errors_total", {"reason": "malformed"}) == 1


def test_malformed_json_is_a_400_with_a_message(running_agent):
    status, _, body = running_agent.post(b"{not json", content_type="application/json")
    assert status == 400 and json.loads(body)["message"]


def test_unsupported_media_type_is_a_415(running_agent):
    status, _, _ = running_agent.post(b"hello", content_type="text/plain")
    assert status == 415


def test_oversized_body_is_a_413(start_agent):
    agent = start_agent(max_body_bytes=10_000)
    status, _, body = agent.post(b"\x00" * 20_000)
    assert status == 413
    # the same limit applies after decompression (a gzip bomb)
    status, _, _ = agent.post(gzip.compress(b"\x00" * 200_000), headers={"Content-Encoding": "gzip"})
    assert status == 413


def test_json_body_is_accepted_and_answered_in_json(running_agent):
    body = json_format.MessageToJson(request_with({semconv.INPUT_VALUE: "hi", semconv.OUTPUT_VALUE: "hello"})).encode()
    status, headers, response = running_agent.post(body, content_type="application/json")
    assert status == 200 and headers["content-type"].startswith("application/json")
    json.loads(response)
    assert running_agent.store.recent.get("01" * 16).answer == "hello"


def test_oversized_attribute_is_truncated_and_counted(start_agent):
    agent = start_agent(max_attribute_chars=100)
    status, _, _ = agent.post(request_with({semconv.INPUT_VALUE: "x" * 5000}).SerializeToString())
    assert status == 200
    assert len(agent.store.recent.get("01" * 16).query) <= 100
    assert agent.metric("rag_agent_attributes_truncated_total") == 1


def test_unknown_attribute_is_ignored(running_agent):
    body = request_with({semconv.INPUT_VALUE: "q", "app.some.thing": "x", "rag.unheard_of": "y"}).SerializeToString()
    status, _, _ = running_agent.post(body)
    assert status == 200
    assert running_agent.store.recent.get("01" * 16).query == "q"


def test_invalid_span_is_a_partial_success(running_agent):
    request = request_with({semconv.INPUT_VALUE: "q"})
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id = b"\x00" * 16  # an all-zero trace id is invalid
    bad.span_id = b"\x02" * 8
    status, _, body = running_agent.post(request.SerializeToString())
    assert status == 200
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(body)
    assert response.partial_success.rejected_spans == 1 and response.partial_success.error_message


def test_store_unavailable_is_a_503_with_retry_after_and_nothing_is_lost(start_agent):
    agent = start_agent(store_timeout_s=0.5)
    db_path = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    # Another process holds the SQLite write lock beyond the store's busy timeout.
    blocker = sqlite3.connect(db_path, timeout=1, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        status, headers, _ = agent.post(request_with({semconv.INPUT_VALUE: "during outage"}).SerializeToString())
        assert status == 503, (status, _)
        assert int(headers["Retry-After"]) > 0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    # The exporter retries after Retry-After: the same trace is assembled again, not lost as late.
    status, _, _ = agent.post(request_with({semconv.INPUT_VALUE: "during outage"}).SerializeToString())
    assert status == 200
    assert agent.store.recent.get("01" * 16).query == "during outage"
    assert agent.metric("rag_agent_ingest_errors_total", {"reason": "store_unavailable"}) == 1


def test_graceful_shutdown_drains_what_it_accepted(start_agent):
    import threading
    import urllib.error

    agent = start_agent()
    outcomes: dict[int, object] = {}

    def send(i: int) -> None:
        try:
            outcomes[i] = agent.post(request_with({semconv.INPUT_VALUE: f"q{i}"}, trace_byte=i + 1).SerializeToString())[0]
        except (urllib.error.URLError, ConnectionError, OSError) as exc:  # refused once the server stopped accepting
            outcomes[i] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    agent.agent.stop()
    for t in threads:
        t.join()
    accepted = [i for i, outcome in outcomes.items() if outcome == 200]
    assert len(outcomes) == 40 and accepted
    # answered, refused with 503 + Retry-After (saturated: the exporter retries), or not accepted at all
    assert all(outcome in (200, 503) or isinstance(outcome, Exception) for outcome in outcomes.values())
    from rag_monitor.store import open_store

    store = open_store(agent.agent.settings.resolved_store_url())
    try:
        assert all(store.recent.get(f"{i + 1:02x}" * 16) is not None for i in accepted)
    finally:
        store.close()
