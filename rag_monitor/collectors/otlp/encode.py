"""``Span`` objects -> a protobuf ``ExportTraceServiceRequest`` (forwarding redacted spans)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from rag_monitor.collectors.otlp.spans import Span


def _set_any(target: AnyValue, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):  # before int: bool is an int subclass
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, (bytes, bytearray)):
        target.bytes_value = bytes(value)
    elif isinstance(value, (list, tuple)):
        array = target.array_value
        array.SetInParent()  # an empty list stays an (empty) array, not an unset value
        for item in value:
            _set_any(array.values.add(), item)
    elif isinstance(value, dict):
        kvlist = target.kvlist_value
        kvlist.SetInParent()
        _set_attributes(kvlist.values, value)
    else:
        target.string_value = str(value)


def _set_attributes(target: Any, attributes: dict[str, Any]) -> None:
    for key, value in attributes.items():
        kv = target.add()
        kv.key = key
        _set_any(kv.value, value)


def encode_export_request(spans: Iterable[Span], *, scope_name: str = "rag-monitor") -> bytes:
    """Serialise spans as a protobuf ``ExportTraceServiceRequest`` (one ResourceSpans per resource,
    one ScopeSpans per scope; ``scope_name`` names the scope of spans that came without one).

    ``decode_export_request(encode_export_request(spans), "application/x-protobuf", limits=...)``
    gives the spans back.
    """
    request = ExportTraceServiceRequest()
    by_resource: dict[int, Any] = {}
    by_scope: dict[tuple[int, int], Any] = {}
    for span in spans:
        resource_spans = by_resource.get(id(span.resource))
        if resource_spans is None:
            resource_spans = by_resource[id(span.resource)] = request.resource_spans.add()
            _set_attributes(resource_spans.resource.attributes, span.resource)
        scope_key = (id(span.resource), id(span.scope))
        scope_spans = by_scope.get(scope_key)
        if scope_spans is None:
            scope_spans = by_scope[scope_key] = resource_spans.scope_spans.add()
            if span.scope is None:
                scope_spans.scope.name = scope_name
            else:
                scope_spans.scope.name = span.scope.name
                scope_spans.scope.version = span.scope.version
                _set_attributes(scope_spans.scope.attributes, span.scope.attributes)
        pb = scope_spans.spans.add()
        pb.trace_id = bytes.fromhex(span.trace_id)
        pb.span_id = bytes.fromhex(span.span_id)
        if span.parent_span_id:
            pb.parent_span_id = bytes.fromhex(span.parent_span_id)
        pb.name = span.name
        pb.kind = span.kind  # type: ignore[assignment]
        pb.start_time_unix_nano = span.start_ns
        pb.end_time_unix_nano = span.end_ns
        if span.status_code or span.status_message:
            pb.status.code = span.status_code  # type: ignore[assignment]
            pb.status.message = span.status_message
        _set_attributes(pb.attributes, span.attributes)
        for event in span.events:
            pb_event = pb.events.add()
            pb_event.name = event.name
            pb_event.time_unix_nano = event.time_ns
            _set_attributes(pb_event.attributes, event.attributes)
        for link in span.links:
            pb_link = pb.links.add()
            pb_link.trace_id = bytes.fromhex(link.trace_id)
            pb_link.span_id = bytes.fromhex(link.span_id)
            _set_attributes(pb_link.attributes, link.attributes)
    return request.SerializeToString()
