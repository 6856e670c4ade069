"""Real OTel SDK spans -> real OTLP exporter encoding -> our decoder: the path the agent sees."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rag_monitor.collectors import IngestLimits, Span, TraceAssembler, decode_export_request

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


@contextmanager
def memory_tracer(service: str = "test-app", version: str | None = None) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    attributes = {"service.name": service}
    if version:
        attributes["service.version"] = version
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, exporter
    finally:
        provider.shutdown()


def protobuf_body(spans: list[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def json_body(spans: list[ReadableSpan], hex_ids: bool = True) -> bytes:
    """OTLP JSON: MessageToJson gives lowerCamelCase, int64 strings and base64 ids; the OTLP spec
    wants hex ids, so by default rewrite them the way OTLP JSON exporters send them."""
    import base64
    import json

    document = json.loads(MessageToJson(encode_spans(spans)))
    if hex_ids:
        for rs in document.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if span.get(key):
                            span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def decode(spans: list[ReadableSpan], limits: IngestLimits | None = None) -> list[Span]:
    result = decode_export_request(protobuf_body(spans), PROTOBUF, limits=limits or IngestLimits())
    assert result.rejected_spans == 0, result.error_message
    return result.spans


def assemble(spans: list[ReadableSpan]):
    """Decode the spans as the agent would and assemble them: exactly one record expected."""
    out = TraceAssembler().add(decode(spans))
    assert len(out.records) == 1, (out.records, out.dropped_traces)
    return out.records[0]
