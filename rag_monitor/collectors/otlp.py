"""OTLP/HTTP trace bodies in and out: protobuf and JSON, gzip, limits, per-span validation.

    result = decode_export_request(body, "application/x-protobuf", "gzip", limits=IngestLimits())
    for span in result.spans: ...
    result.rejected_spans, result.error_message   # -> ExportTraceServiceResponse.partial_success

A body the agent cannot read at all raises ``OTLPDecodeError`` (HTTP 400),
``UnsupportedMediaType`` (415) or ``BodyTooLarge`` (413). Problems with single spans never fail
the batch: the span (or the attribute) is dropped or truncated and counted in the result.

This is the agent's hot path, so attributes are converted with a hand-written loop over the
protobuf objects rather than ``MessageToDict``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from rag_monitor.collectors.config import IngestLimits

__all__ = [
    "BodyTooLarge",
    "DecodeResult",
    "OTLPDecodeError",
    "Span",
    "SpanEvent",
    "UnsupportedMediaType",
    "decode_export_request",
    "encode_export_request",
]

CONTENT_TYPE_PROTOBUF = "application/x-protobuf"
CONTENT_TYPE_JSON = "application/json"

# OTLP SpanKind / StatusCode numbers (trace.proto), kept as ints on ``Span``.
SPAN_KIND_NAMES = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2

_VECTOR_PREFIX = "embedding.embeddings."
_VECTOR_SUFFIX = ".embedding.vector"
_MAX_REASONS = 5  # distinct rejection reasons quoted in the partial-success message


class OTLPDecodeError(ValueError):
    """The body cannot be read as an OTLP trace export request (HTTP 400)."""


class UnsupportedMediaType(OTLPDecodeError):
    """Content-Type or Content-Encoding the receiver does not speak (HTTP 415)."""


class BodyTooLarge(OTLPDecodeError):
    """The body, after decompression, exceeds ``IngestLimits.max_body_bytes`` (HTTP 413)."""


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Span:
    """One span as the agent sees it: hex ids, plain Python attribute values (arrays as lists)."""

    trace_id: str
    """32 lowercase hex digits."""
    span_id: str
    """16 lowercase hex digits."""
    parent_span_id: str | None
    name: str
    kind: int
    """OTLP SpanKind number: 1 internal, 2 server, 3 client, 4 producer, 5 consumer."""
    start_ns: int
    end_ns: int
    status_code: int = STATUS_UNSET
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    """The resource's attributes; spans of one resource share this dict (treat as read-only)."""
    events: list[SpanEvent] = field(default_factory=list)


@dataclass(slots=True)
class DecodeResult:
    spans: list[Span] = field(default_factory=list)
    rejected_spans: int = 0
    """Spans dropped for invalid or missing ids (OTLP partial success ``rejected_spans``)."""
    truncated_attributes: int = 0
    rejected_embeddings: int = 0
    """Embedding vectors dropped for NaN/inf values or more than ``max_embedding_dim`` dimensions."""
    reasons: list[str] = field(default_factory=list)

    @property
    def error_message(self) -> str | None:
        """Human summary for ``partial_success.error_message``; None when nothing was rejected."""
        if not self.reasons:
            return None
        return f"rejected {self.rejected_spans} span(s): " + "; ".join(self.reasons)


# --- body handling ------------------------------------------------------------------------


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _decompress(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity" or encoding == "":
        if len(body) > max_bytes:
            raise BodyTooLarge(f"request body of {len(body)} bytes exceeds the limit of {max_bytes} bytes")
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise UnsupportedMediaType(f"unsupported Content-Encoding {content_encoding!r}: use gzip or none")
    decompressor = zlib.decompressobj(wbits)
    try:
        # max_length caps the output: a gzip bomb stops at max_bytes + 1, never expands in memory.
        out = decompressor.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise OTLPDecodeError(f"body is not valid {encoding} data: {exc}") from None
    if len(out) > max_bytes:
        raise BodyTooLarge(f"decompressed body exceeds the limit of {max_bytes} bytes")
    if not decompressor.eof:
        raise OTLPDecodeError(f"{encoding} body is truncated (the compressed stream does not end)")
    return out


def decode_export_request(
    body: bytes,
    content_type: str,
    content_encoding: str | None = None,
    *,
    limits: IngestLimits,
) -> DecodeResult:
    """Decode an OTLP/HTTP ``ExportTraceServiceRequest`` body into ``Span`` objects.

    ``content_type`` is ``application/x-protobuf`` or ``application/json`` (parameters such as
    ``; charset=utf-8`` are ignored); ``content_encoding`` is ``gzip``, ``deflate`` or None.
    """
    media_type = _media_type(content_type)
    if media_type not in (CONTENT_TYPE_PROTOBUF, CONTENT_TYPE_JSON):
        raise UnsupportedMediaType(
            f"unsupported Content-Type {content_type!r}: use {CONTENT_TYPE_PROTOBUF} or {CONTENT_TYPE_JSON}"
        )
    raw = _decompress(bytes(body), content_encoding, limits.max_body_bytes)
    if media_type == CONTENT_TYPE_PROTOBUF:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(raw)
        except Exception as exc:  # google.protobuf.message.DecodeError, and upb's variants
            raise OTLPDecodeError(f"body is not a valid protobuf ExportTraceServiceRequest: {exc}") from None
        return _ProtoDecoder(limits).decode(request)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, ints over 4300 digits
        raise OTLPDecodeError(f"body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise OTLPDecodeError(f"OTLP JSON body must be an object, got {type(document).__name__}")
    try:
        return _JsonDecoder(limits).decode(document)
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError, OverflowError) as exc:
        if isinstance(exc, OTLPDecodeError):
            raise
        raise OTLPDecodeError(f"body is not a valid OTLP JSON trace export: {exc}") from None


# --- shared per-span checks ------------------------------------------------------------------


class _Decoder:
    def __init__(self, limits: IngestLimits):
        self.max_chars = limits.max_attribute_chars
        self.max_dim = limits.max_embedding_dim
        self.result = DecodeResult()

    def _reject(self, reason: str) -> None:
        self.result.rejected_spans += 1
        if len(self.result.reasons) < _MAX_REASONS and reason not in self.result.reasons:
            self.result.reasons.append(reason)

    def _check_vector(self, attrs: dict[str, Any], key: str, values: list) -> None:
        """Drop an embedding vector with NaN/inf or too many dimensions (counted)."""
        if not (key.startswith(_VECTOR_PREFIX) and key.endswith(_VECTOR_SUFFIX)):
            return
        try:
            ok = len(values) <= self.max_dim and all(map(math.isfinite, values))
        except TypeError:  # a non-numeric element: not a vector
            ok = False
        if not ok:
            del attrs[key]
            self.result.rejected_embeddings += 1

    def _truncate(self, value: str) -> str:
        self.result.truncated_attributes += 1
        return value[: self.max_chars]


def _valid_id(raw: bytes, size: int) -> bool:
    return len(raw) == size and raw != b"\x00" * size


# --- protobuf ---------------------------------------------------------------------------------


class _ProtoDecoder(_Decoder):
    def decode(self, request: ExportTraceServiceRequest) -> DecodeResult:
        spans = self.result.spans
        for resource_spans in request.resource_spans:
            resource = self._attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for pb in scope_spans.spans:
                    trace_id, span_id, parent = pb.trace_id, pb.span_id, pb.parent_span_id
                    if not _valid_id(trace_id, 16):
                        self._reject(f"span {pb.name!r}: trace id must be 16 non-zero bytes, got {len(trace_id)}")
                        continue
                    if not _valid_id(span_id, 8):
                        self._reject(f"span {pb.name!r}: span id must be 8 non-zero bytes, got {len(span_id)}")
                        continue
                    if parent and len(parent) != 8:
                        self._reject(f"span {pb.name!r}: parent span id must be 8 bytes, got {len(parent)}")
                        continue
                    status = pb.status
                    span = Span(
                        trace_id.hex(),
                        span_id.hex(),
                        parent.hex() if parent and parent != b"\x00" * 8 else None,
                        pb.name,
                        pb.kind,
                        pb.start_time_unix_nano,
                        pb.end_time_unix_nano,
                        status.code,
                        status.message,
                        self._attributes(pb.attributes),
                        resource,
                    )
                    if pb.events:
                        span.events = [
                            SpanEvent(e.name, e.time_unix_nano, self._attributes(e.attributes)) for e in pb.events
                        ]
                    spans.append(span)
        return self.result

    def _attributes(self, key_values: Iterable[KeyValue]) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        max_chars = self.max_chars
        for kv in key_values:
            value = kv.value
            which = value.WhichOneof("value")
            if which == "string_value":
                text = value.string_value
                attrs[kv.key] = text if len(text) <= max_chars else self._truncate(text)
            elif which == "array_value":
                values = value.array_value.values
                first = values[0].WhichOneof("value") if values else None
                if first == "double_value":
                    # OTLP arrays are homogeneous: a float array (an embedding, typically) is
                    # read in one comprehension instead of one dispatch per element.
                    items = [v.double_value for v in values]
                    attrs[kv.key] = items
                    self._check_vector(attrs, kv.key, items)
                else:
                    attrs[kv.key] = [self._value(v) for v in values]
            elif which is None:
                attrs[kv.key] = None
            else:
                attrs[kv.key] = self._value(value)
        return attrs

    def _value(self, value: AnyValue) -> Any:
        which = value.WhichOneof("value")
        if which == "string_value":
            text = value.string_value
            return text if len(text) <= self.max_chars else self._truncate(text)
        if which == "double_value":
            return value.double_value
        if which == "int_value":
            return value.int_value
        if which == "bool_value":
            return value.bool_value
        if which == "array_value":
            return [self._value(v) for v in value.array_value.values]
        if which == "kvlist_value":
            return self._attributes(value.kvlist_value.values)
        if which == "bytes_value":
            return value.bytes_value
        return None


# --- JSON (OTLP JSON mapping) -------------------------------------------------------------------


def _json_id(value: Any, size: int) -> bytes:
    """OTLP JSON ids are hex; canonical proto3 JSON (``MessageToJson``) writes base64: accept both."""
    if not value:
        return b""
    if not isinstance(value, str):
        raise OTLPDecodeError(f"span ids must be strings, got {type(value).__name__}")
    try:
        if len(value) == 2 * size:
            return bytes.fromhex(value)
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return b"?"  # wrong length: rejected by the caller as a bad id


_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_INT32 = (-(2**31), 2**31 - 1)


def _in_range(n: int, bounds: tuple[int, int], what: str) -> int:
    # JSON numbers are unbounded; protobuf's are not, and the store and the forwarder rely on that.
    if not bounds[0] <= n <= bounds[1]:
        raise OTLPDecodeError(f"{what} {n} is out of range [{bounds[0]}, {bounds[1]}]")
    return n


def _json_int(value: Any, what: str = "timestamp") -> int:
    # fixed64 timestamps are strings in OTLP JSON; tolerate numbers too.
    return _in_range(int(value), _UINT64, what) if value not in (None, "") else 0


def _json_str(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OTLPDecodeError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _json_enum(value: Any, names: tuple[str, ...], prefix: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return _in_range(value, _INT32, "enum value")
    name = str(value).removeprefix(prefix)
    return names.index(name) if name in names else 0


_STATUS_NAMES = ("UNSET", "OK", "ERROR")


class _JsonDecoder(_Decoder):
    def decode(self, document: dict[str, Any]) -> DecodeResult:
        spans = self.result.spans
        for resource_spans in _get(document, "resourceSpans", "resource_spans") or ():
            resource = self._attributes((resource_spans.get("resource") or {}).get("attributes"))
            for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans") or ():
                for js in scope_spans.get("spans") or ():
                    name = _json_str(js.get("name"), "span name")
                    trace_id = _json_id(_get(js, "traceId", "trace_id"), 16)
                    span_id = _json_id(_get(js, "spanId", "span_id"), 8)
                    parent = _json_id(_get(js, "parentSpanId", "parent_span_id"), 8)
                    if not _valid_id(trace_id, 16):
                        self._reject(f"span {name!r}: trace id must be 32 hex digits, non-zero")
                        continue
                    if not _valid_id(span_id, 8):
                        self._reject(f"span {name!r}: span id must be 16 hex digits, non-zero")
                        continue
                    if parent and len(parent) != 8:
                        self._reject(f"span {name!r}: parent span id must be 16 hex digits")
                        continue
                    status = js.get("status") or {}
                    span = Span(
                        trace_id.hex(),
                        span_id.hex(),
                        parent.hex() if parent and parent != b"\x00" * 8 else None,
                        name,
                        _json_enum(js.get("kind"), SPAN_KIND_NAMES, "SPAN_KIND_"),
                        _json_int(_get(js, "startTimeUnixNano", "start_time_unix_nano")),
                        _json_int(_get(js, "endTimeUnixNano", "end_time_unix_nano")),
                        _json_enum(status.get("code"), _STATUS_NAMES, "STATUS_CODE_"),
                        _json_str(status.get("message"), "status message"),
                        self._attributes(js.get("attributes")),
                        resource,
                    )
                    events = js.get("events")
                    if events:
                        span.events = [
                            SpanEvent(
                                _json_str(e.get("name"), "event name"),
                                _json_int(_get(e, "timeUnixNano", "time_unix_nano")),
                                self._attributes(e.get("attributes")),
                            )
                            for e in events
                        ]
                    spans.append(span)
        return self.result

    def _attributes(self, key_values: list[dict[str, Any]] | None) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        for kv in key_values or ():
            key = _json_str(kv.get("key"), "attribute key")  # proto3 JSON omits an empty key
            value = self._value(kv.get("value") or {})
            attrs[key] = value
            if type(value) is list and value and type(value[0]) is float:
                self._check_vector(attrs, key, value)
        return attrs

    def _value(self, value: dict[str, Any]) -> Any:
        for variant, item in value.items():  # at most one variant is set
            if variant in ("stringValue", "string_value"):
                return item if len(item) <= self.max_chars else self._truncate(item)
            if variant in ("intValue", "int_value"):
                return _in_range(int(item), _INT64, "intValue")
            if variant in ("doubleValue", "double_value"):
                return float(item)  # also "NaN", "Infinity" as proto3 JSON writes them
            if variant in ("boolValue", "bool_value"):
                return bool(item)
            if variant in ("arrayValue", "array_value"):
                return [self._value(v) for v in (item or {}).get("values") or ()]
            if variant in ("kvlistValue", "kvlist_value"):
                return self._attributes((item or {}).get("values"))
            if variant in ("bytesValue", "bytes_value"):
                return base64.b64decode(item)
        return None


def _get(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    value = mapping.get(camel)
    return mapping.get(snake) if value is None else value


# --- encoding (forwarding redacted spans to Phoenix) ---------------------------------------------


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
    """Serialise spans as a protobuf ``ExportTraceServiceRequest`` (one ResourceSpans per resource).

    ``decode_export_request(encode_export_request(spans), "application/x-protobuf", limits=...)``
    gives the spans back.
    """
    request = ExportTraceServiceRequest()
    by_resource: dict[int, Any] = {}
    for span in spans:
        scope_spans = by_resource.get(id(span.resource))
        if scope_spans is None:
            resource_spans = request.resource_spans.add()
            _set_attributes(resource_spans.resource.attributes, span.resource)
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = scope_name
            by_resource[id(span.resource)] = scope_spans
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
    return request.SerializeToString()

