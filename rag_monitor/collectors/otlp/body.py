"""OTLP/HTTP trace bodies in: media types, compression, size limits, then the decoders.

    result = decode_export_request(body, "application/x-protobuf", "gzip", limits=IngestLimits())
    for span in result.spans: ...
    result.rejected_spans, result.error_message   # -> ExportTraceServiceResponse.partial_success

A body the agent cannot read at all raises ``OTLPDecodeError`` (HTTP 400),
``UnsupportedMediaType`` (415) or ``BodyTooLarge`` (413). Problems with single spans never fail
the batch: the span (or the attribute) is dropped or truncated and counted in the result.
"""

from __future__ import annotations

import json
import re
import zlib

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rag_monitor.collectors.config import IngestLimits
from rag_monitor.collectors.otlp.checks import SpanChecks
from rag_monitor.collectors.otlp.jsonmap import JsonDecoder
from rag_monitor.collectors.otlp.proto import ProtoDecoder
from rag_monitor.collectors.otlp.spans import BodyTooLarge, DecodeResult, OTLPDecodeError, UnsupportedMediaType

try:
    from rag_monitor.collectors.otlp import wire  # compiled by pip install (setup.py); optional
except ImportError:  # built where no C compiler was: upb and ProtoDecoder give the same spans
    wire = None

PROTOBUF_DECODER = "compiled" if wire is not None else "upb"
"""Which protobuf decoder ``decode_export_request`` uses: the agent logs it at start."""

CONTENT_TYPE_PROTOBUF = "application/x-protobuf"
CONTENT_TYPE_JSON = "application/json"
_GZIP_MAGIC = b"\x1f\x8b"


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""A JSON escape of a UTF-16 surrogate, or one's UTF-8-style bytes (which ``json.loads`` decodes
with ``surrogatepass``): only then is a decoded string worth checking."""


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _decompress(body: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The decompressed body. gzip may be several members end to end (RFC 1952: the result is
    their concatenation); anything after the last member that is not a member is an error."""
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
    parts: list[bytes] = []
    size, rest, member = 0, body, 0
    while True:
        decompressor = zlib.decompressobj(wbits)
        try:
            # max_length caps the output: a gzip bomb stops at the limit + 1, never expands in memory.
            out = decompressor.decompress(rest, max_bytes - size + 1)
        except zlib.error as exc:
            where = f" (member {member + 1}, at byte {len(body) - len(rest)})" if member else ""
            raise OTLPDecodeError(f"body is not valid {encoding} data{where}: {exc}") from None
        size += len(out)
        parts.append(out)
        if size > max_bytes:
            raise BodyTooLarge(f"decompressed body exceeds the limit of {max_bytes} bytes")
        if not decompressor.eof:
            raise OTLPDecodeError(f"{encoding} body is truncated (the compressed stream does not end)")
        rest = decompressor.unused_data
        if not rest:
            return b"".join(parts)
        if encoding != "gzip" or not rest.startswith(_GZIP_MAGIC):
            raise OTLPDecodeError(
                f"{len(rest)} byte(s) of trailing data after the {encoding} stream "
                f"(at byte {len(body) - len(rest)}): not a {encoding} member"
            )
        member += 1


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
        return decode_protobuf(raw, limits) if wire is not None else decode_protobuf_upb(raw, limits)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, ints over 4300 digits
        raise OTLPDecodeError(f"body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise OTLPDecodeError(f"OTLP JSON body must be an object, got {type(document).__name__}")
    if _SURROGATE.search(raw):
        # "\ud800" alone is valid JSON but no valid UTF-8 string: protobuf and the store would fail later.
        try:
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise OTLPDecodeError("body is not valid OTLP JSON: a string holds a UTF-16 surrogate that is not valid UTF-8") from None
    try:
        return JsonDecoder(limits).decode(document)
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError, OverflowError) as exc:
        if isinstance(exc, OTLPDecodeError):
            raise
        raise OTLPDecodeError(f"body is not a valid OTLP JSON trace export: {exc}") from None


def decode_protobuf(raw: bytes, limits: IngestLimits) -> DecodeResult:
    """An uncompressed protobuf body, with the compiled decoder (``wire`` must be built)."""
    try:
        return wire.decode(raw, SpanChecks(limits))
    except ValueError as exc:  # a malformed body, UnicodeDecodeError included
        raise OTLPDecodeError(f"body is not a valid protobuf ExportTraceServiceRequest: {exc}") from None


def decode_protobuf_upb(raw: bytes, limits: IngestLimits) -> DecodeResult:
    """An uncompressed protobuf body, with upb and ``ProtoDecoder``: the fallback, and the reference the compiled one is tested against."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except Exception as exc:  # google.protobuf.message.DecodeError, and upb's variants
        raise OTLPDecodeError(f"body is not a valid protobuf ExportTraceServiceRequest: {exc}") from None
    return ProtoDecoder(limits).decode(request)
