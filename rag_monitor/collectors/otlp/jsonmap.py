"""OTLP JSON (the protobuf JSON mapping, hex ids) -> ``Span`` objects.

Accepts lowerCamelCase and snake_case field names, hex ids and the base64 ids canonical proto3
JSON writes, int64 values as strings or numbers; out-of-range numbers are a decode error, since
the store and the forwarder rely on protobuf's ranges.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from rag_monitor.collectors.otlp.checks import SpanChecks, valid_id
from rag_monitor.collectors.otlp.spans import SPAN_KIND_NAMES, DecodeResult, OTLPDecodeError, Scope, Span, SpanEvent, SpanLink

_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_STATUS_NAMES = ("UNSET", "OK", "ERROR")


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


def _in_range(n: int, bounds: tuple[int, int], what: str) -> int:
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


def _get(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    value = mapping.get(camel)
    return mapping.get(snake) if value is None else value


class JsonDecoder(SpanChecks):
    def decode(self, document: dict[str, Any]) -> DecodeResult:
        spans = self.result.spans
        for resource_spans in _get(document, "resourceSpans", "resource_spans") or ():
            resource = self._attributes((resource_spans.get("resource") or {}).get("attributes"))
            for scope_spans in _get(resource_spans, "scopeSpans", "scope_spans") or ():
                scope = self._scope(scope_spans.get("scope"))
                for js in scope_spans.get("spans") or ():
                    span = self._span(js, resource)
                    if span is not None:
                        span.scope = scope
                        spans.append(span)
        return self.result

    def _scope(self, js: dict[str, Any] | None) -> Scope | None:
        if js is None:
            return None
        return Scope(_json_str(js.get("name"), "scope name"), _json_str(js.get("version"), "scope version"),
                     self._attributes(js.get("attributes")))

    def _span(self, js: dict[str, Any], resource: dict[str, Any]) -> Span | None:
        name = _json_str(js.get("name"), "span name")
        trace_id = _json_id(_get(js, "traceId", "trace_id"), 16)
        span_id = _json_id(_get(js, "spanId", "span_id"), 8)
        parent = _json_id(_get(js, "parentSpanId", "parent_span_id"), 8)
        if not valid_id(trace_id, 16):
            self._reject(f"span {name!r}: trace id must be 32 hex digits, non-zero")
            return None
        if not valid_id(span_id, 8):
            self._reject(f"span {name!r}: span id must be 16 hex digits, non-zero")
            return None
        if parent and len(parent) != 8:
            self._reject(f"span {name!r}: parent span id must be 16 hex digits")
            return None
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
        for link in js.get("links") or ():
            link_trace, link_span = _json_id(_get(link, "traceId", "trace_id"), 16), _json_id(_get(link, "spanId", "span_id"), 8)
            if valid_id(link_trace, 16) and valid_id(link_span, 8):  # a bad link is dropped, not the span
                span.links.append(SpanLink(link_trace.hex(), link_span.hex(), self._attributes(link.get("attributes"))))
        return span

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
