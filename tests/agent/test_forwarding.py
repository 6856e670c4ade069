"""Forwarding through OpenTelemetry's OTLP exporter: gzip on the wire, a 503 retried with backoff,
a failed batch counted; the spans Phoenix gets are the redacted ones, ids and kinds intact."""

from __future__ import annotations

import gzip
import http.server
import threading

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

import rag_monitor
from rag_monitor import semconv
from tests.agent.test_agent_ingest import run_query
from tests.services import wait_until


class Sink(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP endpoint that answers 503 (Retry-After: 0) to its first ``fail_first`` requests."""

    daemon_threads = True

    def __init__(self, fail_first: int = 1):
        super().__init__(("127.0.0.1", 0), _SinkHandler)
        self.fail_first = fail_first
        self.requests: list[tuple[int, str | None]] = []  # (status answered, Content-Encoding)
        self.spans: list = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _SinkHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        sink: Sink = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        encoding = self.headers.get("Content-Encoding")
        with sink.lock:
            status = 503 if len(sink.requests) < sink.fail_first else 200
            sink.requests.append((status, encoding))
            if status == 200:
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(
                    gzip.decompress(body) if encoding == "gzip" else body)
                sink.spans += [(rs.resource, s) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_spans_arrive_gzipped_after_a_503_retry_redacted_and_whole(start_agent):
    sink = Sink(fail_first=1)
    try:
        agent = start_agent(phoenix_url=sink.url, phoenix_project="proj")
        monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
        try:
            trace_id = run_query(monitor, "mail me at jo@example.com please")
            monitor.force_flush()
        finally:
            monitor.shutdown()
        wait_until(lambda: agent.metric("rag_agent_forwarded_spans_total", {"outcome": "sent"}) == 7,
                   timeout=30, what="seven spans sent")
        assert sink.requests[0] == (503, "gzip") and sink.requests[1] == (200, "gzip")
        assert (agent.metric("rag_agent_forwarded_spans_total", {"outcome": "failed"}) or 0) == 0
        spans = {s.name: (resource, s) for resource, s in sink.spans}
        assert len(sink.spans) == 7
        resource, root = spans[semconv.RAG_QUERY_SPAN_NAME]
        assert root.trace_id.hex() == trace_id and not root.parent_span_id
        attrs = {kv.key: kv.value for kv in root.attributes}
        assert "jo@example.com" not in attrs[semconv.INPUT_VALUE].string_value
        assert "<EMAIL>" in attrs[semconv.INPUT_VALUE].string_value
        resource_attrs = {kv.key: kv.value.string_value for kv in resource.attributes}
        assert resource_attrs[semconv.OPENINFERENCE_PROJECT_NAME] == "proj"
        assert resource_attrs["service.name"] == "svc"
        children = [s for _, s in sink.spans if s.parent_span_id]
        assert len(children) == 6 and all(s.trace_id == root.trace_id for s in children)
    finally:
        sink.close()


def test_a_batch_the_exporter_gives_up_on_is_counted_failed(start_agent):
    sink = Sink(fail_first=10**6)  # always 503: the exporter retries with backoff until its timeout
    try:
        agent = start_agent(phoenix_url=sink.url)
        monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
        try:
            run_query(monitor)
            monitor.force_flush()
        finally:
            monitor.shutdown()
        wait_until(lambda: agent.metric("rag_agent_forwarded_spans_total", {"outcome": "failed"}) == 7,
                   timeout=30, what="the failed batch counted")
        assert len(sink.requests) >= 2  # retried before giving up
        assert (agent.metric("rag_agent_forwarded_spans_total", {"outcome": "sent"}) or 0) == 0
    finally:
        sink.close()
