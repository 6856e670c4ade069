"""Several ``rag_monitor.init()`` calls in one process: each monitor exports to its own exporter,
never to another's nor to the default endpoint, whatever the order and nesting of their queries."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from rag_monitor.sdk.config import RAG_MONITOR_ENDPOINT


class DefaultEndpoint:
    """The endpoint a monitor without an exporter sends to: which services' spans arrived."""

    def __init__(self):
        self.services: list[str] = []
        received = self.services

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
                for rs in request.resource_spans:
                    name = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
                    received.extend(name for scope in rs.scope_spans for _ in scope.spans)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def services(exporter: InMemorySpanExporter) -> set[str]:
    return {span.resource.attributes["service.name"] for span in exporter.get_finished_spans()}


def test_each_init_exports_to_its_own_exporter(monkeypatch):
    default = DefaultEndpoint()
    monkeypatch.setenv(RAG_MONITOR_ENDPOINT, default.url)
    first = rag_monitor.init(service_name="default", schedule_delay_s=0.1)
    in_memory, batched = InMemorySpanExporter(), InMemorySpanExporter()
    second = rag_monitor.init(service_name="second", span_exporter=in_memory, batch=False)
    third = rag_monitor.init(service_name="third", span_exporter=batched, schedule_delay_s=0.1)
    monitors = [first, second, third]
    try:
        with first.query("outer") as outer:
            with second.query("inside another monitor's query") as q:  # nested across monitors
                with q.retrieve("inside") as r:
                    r.documents([{"id": "d1", "content": "x"}])
                q.answer("a")
            outer.answer("b")
        for i, monitor in enumerate(monitors * 2):
            with monitor.query(f"q{i}") as q:
                q.answer("c")
        assert all(m.force_flush(10) for m in monitors)
    finally:
        for monitor in monitors:
            monitor.shutdown()
    assert services(in_memory) == {"second"} and len(in_memory.get_finished_spans()) == 4
    assert services(batched) == {"third"} and len(batched.get_finished_spans()) == 2
    assert sorted(set(default.services)) == ["default"] and len(default.services) == 3
    default.server.shutdown()
