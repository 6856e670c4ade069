"""The collectors plane: OTLP in, traces assembled into ``QueryRecord``s, PII out, cost on.

    limits = IngestLimits.load("rag_monitor/defaults/collectors/ingest.yaml")
    result = decode_export_request(body, content_type, content_encoding, limits=limits)
    redactor.redact_spans(result.spans)                       # before storing or forwarding
    out = assembler.add(result.spans)                         # records of finished queries
    prices.call_cost(call) for call in record.model_calls     # each call at its own model's price

No metrics library, web framework or database here: every function returns its counts and the
agent turns them into metrics.
"""

from rag_monitor.collectors.assembly import AssemblyOutput, LateFeedback, TraceAssembler
from rag_monitor.collectors.config import IngestLimits
from rag_monitor.collectors.dialects import DialectSettings, build_record, detect_dialect
from rag_monitor.collectors.otlp import (
    BodyTooLarge,
    DecodeResult,
    OTLPDecodeError,
    Span,
    SpanEvent,
    UnsupportedMediaType,
    decode_export_request,
    encode_export_request,
)
from rag_monitor.collectors.pricing import PriceTable
from rag_monitor.collectors.redaction import Redactor

__all__ = [
    "AssemblyOutput",
    "BodyTooLarge",
    "DecodeResult",
    "DialectSettings",
    "IngestLimits",
    "LateFeedback",
    "OTLPDecodeError",
    "PriceTable",
    "Redactor",
    "Span",
    "SpanEvent",
    "TraceAssembler",
    "UnsupportedMediaType",
    "build_record",
    "decode_export_request",
    "detect_dialect",
    "encode_export_request",
]
