"""Over the wire: real OTLP/HTTP export to a loopback receiver, and an agent that is down."""

from __future__ import annotations

import gzip
import http.server
import socket
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

import rag_monitor
from rag_monitor import semconv
from tests.services import free_port


class Receiver(http.server.ThreadingHTTPServer):
    """Accepts POST /v1/traces and keeps the decoded requests and their headers."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[dict[str, str], ExportTraceServiceRequest]] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.requests.append(({k.lower(): v for k, v in self.headers.items()}, request))
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def attributes(span) -> dict:
    out = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = tuple(v.string_value for v in value.array_value.values)
        else:
            out[kv.key] = getattr(value, kind)
    return out


def test_spans_arrive_over_otlp_http(receiver, monkeypatch):
    monkeypatch.delenv("RAG_MONITOR_DISABLED", raising=False)
    monitor = rag_monitor.init(service_name="support-bot", endpoint=receiver.endpoint, release="r7", token="s3cret")
    with monitor.query("How do I cancel?", session_id="s1") as q:
        q.filter(kind="relevance", predicate="locale = 'en-US'", candidates_in=4, candidates_out=2)
        with q.retrieve() as r:
            r.documents([{"id": "doc-1", "content": "Settings > Billing", "score": 0.9}])
        q.answer("Settings > Billing.", citations=["doc-1"])
    monitor.feedback(q.trace_id, "thumbs_up")
    assert monitor.force_flush(timeout_s=10)
    monitor.shutdown()

    assert receiver.requests, "nothing arrived"
    headers = receiver.requests[0][0]
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["content-type"] == "application/x-protobuf"
    spans, resources = {}, []
    for _, request in receiver.requests:
        for resource_spans in request.resource_spans:
            resources.append({kv.key: kv.value.string_value for kv in resource_spans.resource.attributes})
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans[span.name] = span
    assert set(spans) == {"rag.query", "filter", "retrieve", "rag.feedback"}
    assert resources[0][semconv.SERVICE_NAME] == "support-bot"
    assert resources[0][semconv.SERVICE_VERSION] == "r7"
    root = spans["rag.query"]
    assert root.trace_id.hex() == q.trace_id
    assert attributes(root)[semconv.INPUT_VALUE] == "How do I cancel?"
    assert attributes(root)[semconv.RAG_CITATIONS] == ("doc-1",)
    assert attributes(spans["retrieve"])["retrieval.documents.0.document.score"] == 0.9
    assert attributes(spans["filter"])[semconv.RAG_FILTER_CANDIDATES_OUT] == 2
    assert spans["retrieve"].parent_span_id == root.span_id
    assert spans["rag.feedback"].parent_span_id == root.span_id


def six_stage_queries(monitor, n: int) -> None:
    for i in range(n):
        with monitor.query(f"q{i}") as q:
            with q.stage("rewrite"):
                pass
            q.filter(kind="relevance", candidates_in=2, candidates_out=1)
            with q.retrieve() as r:
                r.documents([{"id": "d", "content": "c"}])
            with q.rerank(model="m") as rr:
                rr.documents([{"id": "d"}])
            q.context(document_ids=["d"])
            with q.generate(model="g") as g:
                g.tokens(prompt=1, completion=1)
            q.answer("a")


def test_agent_down_closed_port_failures_counted_after_flush():
    monitor = rag_monitor.init(
        service_name="s", endpoint=f"http://127.0.0.1:{free_port()}", export_timeout_s=0.5, schedule_delay_s=3600
    )
    six_stage_queries(monitor, 10)
    assert monitor.stats().queued == 70  # the app never waited for an export
    monitor.force_flush(timeout_s=10)
    stats = monitor.stats()
    assert (stats.failed, stats.exported, stats.queued) == (70, 0, 0)
    monitor.shutdown(timeout_s=1)


def test_agent_hanging_does_not_hold_up_queries():
    """The agent accepts connections but never answers: queries finish while the export hangs."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # never accept(): the request sits in the backlog unanswered
    try:
        monitor = rag_monitor.init(
            service_name="s",
            endpoint=f"http://127.0.0.1:{hung.getsockname()[1]}",
            export_timeout_s=5,
            max_export_batch_size=7,
            schedule_delay_s=3600,
        )
        six_stage_queries(monitor, 1)  # one full batch: the worker starts exporting it
        six_stage_queries(monitor, 10)
        stats = monitor.stats()
        # Had any query waited for the export, its 5 s timeout would have counted a failure.
        assert (stats.exported, stats.failed) == (0, 0)
        assert stats.queued + 7 >= 70
        monitor.shutdown(timeout_s=0.2)
    finally:
        hung.close()
