"""OTLP/HTTP trace bodies in and out: protobuf and JSON, gzip, limits, per-span validation.

    result = decode_export_request(body, "application/x-protobuf", "gzip", limits=IngestLimits())
    for span in result.spans: ...
    result.rejected_spans, result.error_message   # -> ExportTraceServiceResponse.partial_success
    encode_export_request(spans)                   # protobuf bytes, to forward redacted spans

Modules: ``spans`` (the ``Span`` model and the errors), ``body`` (media types, compression,
limits), ``wire`` (protobuf, compiled), ``proto`` (protobuf through upb: the fallback) and
``jsonmap`` (JSON), ``checks`` (what the decoders check), ``encode`` (spans back to protobuf).
"""

from rag_monitor.collectors.otlp.body import CONTENT_TYPE_JSON, CONTENT_TYPE_PROTOBUF, decode_export_request
from rag_monitor.collectors.otlp.encode import encode_export_request
from rag_monitor.collectors.otlp.spans import (
    SPAN_KIND_NAMES,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_UNSET,
    BodyTooLarge,
    DecodeResult,
    OTLPDecodeError,
    Scope,
    Span,
    SpanEvent,
    SpanLink,
    UnsupportedMediaType,
)

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_PROTOBUF",
    "SPAN_KIND_NAMES",
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNSET",
    "BodyTooLarge",
    "DecodeResult",
    "OTLPDecodeError",
    "Scope",
    "Span",
    "SpanEvent",
    "SpanLink",
    "UnsupportedMediaType",
    "decode_export_request",
    "encode_export_request",
]
