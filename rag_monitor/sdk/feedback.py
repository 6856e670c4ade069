"""User signals about an answer, sent later from any process that knows the query's trace id.

Each is one ``rag.feedback`` span parented on the query's root span (the root's id derives from
the trace id: ``ids.root_span_id``), with ``rag.feedback.kind`` and, where OpenInference has a
name for the payload, that name: the clicked citation's ``document.id``, the edited answer's
``output.value``. The agent redacts every attribute before it stores, counts or forwards one.

    monitor.feedback(q, "thumbs_down", reason="outdated")
    monitor.citation_click(q, "kb-1042")          # the user opened a cited document
    monitor.share(q, "export")                    # copied a link, exported, sent by e-mail...
    monitor.edit(q, "The refund window is 30 days, not 14.")   # the answer as the user fixed it
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from rag_monitor import semconv
from rag_monitor.sdk._logging import log
from rag_monitor.sdk.ids import format_trace_id, parse_trace_id, root_span_id
from rag_monitor.sdk.noop import INVALID_TRACE_ID, NoopQuery
from rag_monitor.sdk.query import Query, ShadowQuery
from rag_monitor.sdk.shadow import ShadowWriteRefused, in_shadow

_ROOT_CONTEXT = Context()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

TraceRef = str | int | Query | NoopQuery
"""32 hex digits, an int, or the query handle."""


class FeedbackCalls:
    """``Monitor``'s feedback methods (its ``_tracer``, ``capture`` and ``_shadow_runner``)."""

    def feedback(
        self,
        trace_id: TraceRef,
        kind: str,
        *,
        reason: str | None = None,
        value: float | int | str | bool | None = None,
    ) -> None:
        """Record a user signal about a query, from any process that knows its trace id.

        ``kind`` is one of ``semconv.FEEDBACK_KINDS`` (else ValueError); ``trace_id`` is 32
        hex digits, an int or the query handle. The no-op query's id is ignored.
        """
        self._send(trace_id, kind, reason=reason, value=value)

    def citation_click(self, trace_id: TraceRef, document_id: str) -> None:
        """The user opened a document the answer cited (``document_id``: the id the app gave it
        in ``q.context(...)`` or the retrieval); kind ``citation_click``, ``document.id``."""
        if not isinstance(document_id, (str, int)) or isinstance(document_id, bool) or document_id == "":
            raise ValueError(f"citation_click document_id={document_id!r}: a non-empty string (or int) is required")
        self._send(trace_id, semconv.FEEDBACK_CITATION_CLICK, extra={semconv.DOCUMENT_ID: str(document_id)})

    def share(self, trace_id: TraceRef, channel: str = "link") -> None:
        """The user shared or exported the answer; ``channel`` says how (``link``, ``export``,
        ``email``, ... a short word of the app's); kind ``share``, ``rag.feedback.value``."""
        if not isinstance(channel, str) or not channel:
            raise ValueError(f"share channel={channel!r}: a non-empty string is required")
        self._send(trace_id, semconv.FEEDBACK_SHARE, value=channel)

    def edit(self, trace_id: TraceRef, edited_text: str) -> None:
        """The user edited the answer; ``edited_text`` is their version (``output.value``, cut to
        ``max_string_length``; not sent when ``CaptureConfig`` hides outputs). Kind ``edit``."""
        if not isinstance(edited_text, str):
            raise ValueError(f"edit edited_text: a string is required, got {type(edited_text).__name__}")
        extra = {}
        if not self.capture.hide_outputs:
            limit = self.capture.max_string_length
            extra[semconv.OUTPUT_VALUE] = edited_text[:limit] if limit else edited_text
        self._send(trace_id, semconv.FEEDBACK_EDIT, extra=extra)

    def _send(self, trace_id: TraceRef, kind: str, *, reason: str | None = None,
              value: float | int | str | bool | None = None, extra: dict[str, Any] | None = None) -> None:
        if kind not in semconv.FEEDBACK_KINDS:
            raise ValueError(f"feedback kind={kind!r}: expected one of {semconv.FEEDBACK_KINDS}")
        if isinstance(trace_id, ShadowQuery) or in_shadow():
            raise ShadowWriteRefused("feedback on a shadow query: a shadow's answer never reached a user")
        if isinstance(trace_id, (Query, NoopQuery)):
            trace_id = trace_id.trace_id
        if trace_id == INVALID_TRACE_ID or trace_id == 0:
            return  # a query the SDK did not record (disabled, or our own failure)
        tid = parse_trace_id(trace_id)
        runner = self._shadow_runner
        if runner is not None and runner.is_shadow(format_trace_id(tid)):
            raise ShadowWriteRefused(f"feedback on shadow trace {format_trace_id(tid)}: refused")
        tracer = self._tracer
        if tracer is None:
            return
        try:
            parent = SpanContext(tid, root_span_id(tid), is_remote=True, trace_flags=_SAMPLED)
            attrs: dict[str, Any] = {semconv.RAG_FEEDBACK_KIND: kind, **(extra or {})}
            if reason is not None:
                reason = str(reason)
                limit = self.capture.max_string_length
                attrs[semconv.RAG_FEEDBACK_REASON] = reason[:limit] if limit else reason
            if value is not None:
                attrs[semconv.RAG_FEEDBACK_VALUE] = value if isinstance(value, (bool, int, float, str)) else str(value)
            context = trace.set_span_in_context(NonRecordingSpan(parent), _ROOT_CONTEXT)
            tracer.start_span(semconv.RAG_FEEDBACK_SPAN_NAME, context=context, attributes=attrs).end()
        except Exception:  # noqa: BLE001
            log.internal_error("feedback")
