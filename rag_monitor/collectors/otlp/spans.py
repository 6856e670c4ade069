"""The span model the decoders produce and the rest of the agent reads, and the decode errors.

A ``Span`` holds hex ids and plain Python attribute values (arrays as lists, kvlists as dicts).
Spans of one resource share its attribute dict, spans of one instrumentation scope share its
``Scope``: treat both as read-only except in the redactor, which cleans each once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# OTLP SpanKind / StatusCode numbers (trace.proto), kept as ints on ``Span``.
SPAN_KIND_NAMES = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2


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
class SpanLink:
    """A link to another span (a batch job's inputs, a retried request): kept to be forwarded."""

    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Scope:
    """The instrumentation scope (library) that emitted the spans."""

    name: str = ""
    version: str = ""
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
    links: list[SpanLink] = field(default_factory=list)
    scope: Scope | None = None
    """Shared by the spans of one scope; None when the exporter sent none."""


_MAX_REASONS = 5  # distinct rejection reasons quoted in the partial-success message


@dataclass(slots=True)
class DecodeResult:
    spans: list[Span] = field(default_factory=list)
    rejected_spans: int = 0
    """Spans dropped for invalid or missing ids (OTLP partial success ``rejected_spans``)."""
    truncated_attributes: int = 0
    rejected_embeddings: int = 0
    """Embedding vectors dropped for NaN/inf values or more than ``max_embedding_dim`` dimensions."""
    reasons: list[str] = field(default_factory=list)

    def reject(self, reason: str, n: int = 1) -> None:
        """Count ``n`` spans dropped for ``reason`` (the first few distinct reasons are quoted)."""
        self.rejected_spans += n
        if len(self.reasons) < _MAX_REASONS and reason not in self.reasons:
            self.reasons.append(reason)

    @property
    def error_message(self) -> str | None:
        """Human summary for ``partial_success.error_message``; None when nothing was rejected."""
        if not self.reasons:
            return None
        return f"rejected {self.rejected_spans} span(s): " + "; ".join(self.reasons)
