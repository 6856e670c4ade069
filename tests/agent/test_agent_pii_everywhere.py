"""PII seeded into every string-bearing place of a span never survives: not in the assembled
record, not in the stored rows, not in the spans forwarded (to a local OTLP sink standing in for
Phoenix), not in /metrics. Identifiers that carry PII become keyed pseudonyms that still join."""

from __future__ import annotations

import gzip

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import rag_monitor
from rag_monitor import semconv as sc
from tests.services import wait_until

EMAIL, EMAIL2 = "jane.doe@example.com", "ops+billing@corp.example.org"
CARD, CARD2 = "4111 1111 1111 1111", "5500-0000-0000-0004"
PHONE, PHONE2 = "+1 415-555-0132", "(415) 555-0199"
SEEDS = [EMAIL, EMAIL2, CARD, CARD2, PHONE, PHONE2]


def leaks(text: str) -> list[str]:
    compact = text.replace(" ", "").replace("-", "").replace("\\u0040", "@")
    return [s for s in SEEDS if s in text or s.replace(" ", "").replace("-", "") in compact]


class OTLPSink:
    """A loopback OTLP/HTTP receiver that keeps every body it is sent (Phoenix's place)."""

    def __init__(self):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                bodies.append(gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans_json(self) -> str:
        return "\n".join(MessageToJson(ExportTraceServiceRequest.FromString(b)) for b in self.bodies)

    def span_count(self) -> int:
        return sum(len(ss.spans) for b in self.bodies for rs in ExportTraceServiceRequest.FromString(b).resource_spans
                   for ss in rs.scope_spans)


@pytest.fixture
def sink():
    sink = OTLPSink()
    yield sink
    sink.server.shutdown()


def _sdk_queries(endpoint: str) -> list[str]:
    """The SDK's own spans, PII in every field an app fills, and an exception recorded on a span."""
    monitor = rag_monitor.init(service_name="svc", endpoint=endpoint, release="r1",
                               resource_attributes={"deployment.owner": EMAIL2, "host.notes": f"on call {PHONE2}"})
    trace_ids = []
    try:
        for attempt in range(2):
            with monitor.query(f"My card is {CARD}, mail {EMAIL}", session_id=EMAIL, user_id=CARD2, tenant=PHONE) as q:
                q.filter(kind="relevance", predicate=f"owner = '{EMAIL}'", candidates_in=3, candidates_out=1,
                         excluded_ids=[f"kb/{EMAIL2}/a.md", "doc-ok"], excluded_documents=[{"id": "doc-x", "content": f"Call {PHONE}"}])
                with q.retrieve() as r:
                    r.documents([{"id": f"kb/{EMAIL2}/a.md", "content": f"Customer {EMAIL} paid with {CARD}",
                                  "metadata": {"owner": EMAIL, "phones": ["none", PHONE2], "nested": {"card": CARD2}}}])
                try:
                    with q.stage("lookup"):
                        raise LookupError(f"no account for {EMAIL} / {CARD}")
                except LookupError:
                    pass
                with q.generate(model="gpt-4o-mini") as g:
                    g.set_attribute("app.notes", json.dumps({"to": EMAIL, "list": ["x", CARD], "id": EMAIL2}))
                    g.tokens(prompt=10, completion=5)
                q.answer(f"We wrote to {EMAIL}.", citations=[f"kb/{EMAIL2}/a.md"])
            trace_ids.append(q.trace_id)
        monitor.force_flush()
        monitor.feedback(trace_ids[0], "thumbs_down", reason=f"call me on {PHONE}")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    return trace_ids


def _otel_trace(endpoint: str) -> str:
    """An OpenInference-style trace from the plain OTel SDK: scope attributes, links, events,
    arrays with PII past their first element, JSON inside strings, an error status."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Link, Status, StatusCode

    provider = TracerProvider(resource=Resource.create({"service.name": "oi-app", "team.contact": EMAIL}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces")))
    tracer = provider.get_tracer("my.lib", "1.0", attributes={"lib.maintainer": EMAIL2})
    try:
        with tracer.start_as_current_span("rag_chain") as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: json.dumps({"question": f"I am {EMAIL}"}),
                                 sc.OUTPUT_VALUE: "ok", sc.SESSION_ID: PHONE2, "tags": ["fine", f"card {CARD}", EMAIL2]})
            other = root.get_span_context()
            with tracer.start_as_current_span("retriever", links=[Link(other, {"why": f"retry for {EMAIL}"})]) as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "RETRIEVER", "retrieval.documents.0.document.content": f"{PHONE} here",
                                  "retrieval.documents.0.document.metadata": json.dumps({"source": f"/u/{EMAIL}/x.txt"}),
                                  sc.OUTPUT_VALUE: json.dumps({"documents": [{"id": f"{EMAIL}-doc", "page_content": "c"}]})})
                s.add_event(f"cache miss for {EMAIL2}", {"detail": f"card {CARD2}"})
                s.set_status(Status(StatusCode.ERROR, f"timeout calling {PHONE}"))
            with tracer.start_as_current_span("llm") as s:
                s.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "LLM", sc.LLM_MODEL_NAME: "gpt-4o", sc.LLM_TOKEN_COUNT_PROMPT: 3})
        trace_id = f"{root.get_span_context().trace_id:032x}"
    finally:
        provider.shutdown()
    return trace_id


def test_seeded_pii_survives_in_no_sink_from_no_field(start_agent, sink):
    agent = start_agent(phoenix_url=sink.url, sampling_config="")
    trace_ids = [*_sdk_queries(agent.otlp_url), _otel_trace(agent.otlp_url)]
    wait_until(lambda: all(agent.store.recent.get(t) is not None for t in trace_ids), timeout=20, what="the records")
    records = [agent.store.recent.get(t) for t in trace_ids]
    assert not leaks(json.dumps([r.to_dict() for r in records], default=str))

    # identifiers became pseudonyms that still join: same session, citation = document id
    sdk_a, sdk_b, oi = records
    pseudonym = agent.agent.redactor.pseudonym
    assert sdk_a.session_id == sdk_b.session_id == pseudonym(EMAIL) and sdk_a.user_id == pseudonym(CARD2)
    assert sdk_a.tenant == pseudonym(PHONE) and sdk_a.retrieved[0].id == sdk_a.citations[0] == pseudonym(f"kb/{EMAIL2}/a.md")
    assert sdk_a.filters[0].excluded_ids == [pseudonym(f"kb/{EMAIL2}/a.md"), "doc-ok"]
    assert oi.retrieved[0].id == pseudonym(f"{EMAIL}-doc") and oi.session_id == pseudonym(PHONE2)
    assert "<EMAIL>" in sdk_a.query and "<CARD>" in sdk_a.retrieved[0].content

    # the store: every table, every column
    db = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    wait_until(lambda: agent.metric_sum("rag_feedback_total") == 1, timeout=20, what="the feedback")
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert "<EMAIL>" in dump and not leaks(dump)

    # the forwarded spans: all 14 (2 x 5 SDK spans, feedback, 3 OTel spans), resource, scope, links, events
    agent.agent.forwarder.flush(10)
    wait_until(lambda: sink.span_count() >= 14, timeout=20, what="the spans at the sink")
    forwarded = sink.spans_json()
    assert "<EMAIL>" in forwarded and "lib.maintainer" in forwarded and "cache miss for <EMAIL>" in forwarded
    assert not leaks(forwarded)
    assert not leaks(agent.scrape())


def _kv(key: str, value) -> dict:
    if isinstance(value, dict):
        return {"key": key, "value": {"kvlistValue": {"values": [_kv(k, v) for k, v in value.items()]}}}
    return {"key": key, "value": {"stringValue": value}}


def test_pii_in_attribute_keys_kvlist_keys_and_escaped_truncated_json_is_forwarded_redacted(start_agent, sink):
    """Raw OTLP JSON (what any exporter may send): PII in keys at every level, and behind
    ``\\u0040`` escapes in a string that is JSON cut short; through the forwarder to a local sink."""
    import time
    import urllib.request

    now_ns = time.time_ns()
    agent = start_agent(phoenix_url=sink.url, sampling_config="")
    escaped_email = EMAIL.replace("@", "\\u0040")
    attributes = [
        _kv(sc.OPENINFERENCE_SPAN_KIND, "CHAIN"), _kv(sc.INPUT_VALUE, "what is my balance?"),
        _kv(sc.OUTPUT_VALUE, '{"answer": "we wrote to ' + escaped_email + '", "cut": "sho'),
        _kv(f"customer {EMAIL}", "vip"),
        _kv("app.context", {f"owner {EMAIL2}": {f"card {CARD}": "on file", "plain": f"call {PHONE}"}}),
    ]
    body = {"resourceSpans": [{
        "resource": {"attributes": [_kv("service.name", "raw-app"), _kv(f"contact {PHONE2}", "x")]},
        "scopeSpans": [{"scope": {"name": "raw"}, "spans": [{
            "traceId": "ab" * 16, "spanId": "cd" * 8, "name": "rag_chain", "kind": 1,
            "startTimeUnixNano": str(now_ns - 10**9), "endTimeUnixNano": str(now_ns),
            "attributes": attributes,
            "events": [{"timeUnixNano": str(now_ns - 10**8), "name": "retry",
                        "attributes": [_kv(f"for {CARD2}", "again")]}],
        }]}],
    }]}
    request = urllib.request.Request(agent.otlp_url + "/v1/traces", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    agent.agent.forwarder.flush(10)
    wait_until(lambda: sink.span_count() >= 1, timeout=20, what="the span at the sink")
    forwarded = sink.spans_json()
    assert "customer <EMAIL>" in forwarded and "owner <EMAIL>" in forwarded and "card <CARD>" in forwarded
    assert "for <CARD>" in forwarded and "contact <PHONE>" in forwarded and "we wrote to <EMAIL>" in forwarded
    assert not leaks(forwarded)
    # The store: every table, and the spans of a trace still waiting for its root, as bytes
    db = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
        blobs = [bytes(b).decode("latin-1") for (b,) in conn.execute("SELECT spans FROM pending_spans")]
    assert not leaks(dump) and not leaks("\n".join(blobs))
