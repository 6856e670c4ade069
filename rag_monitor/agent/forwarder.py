"""Forwards redacted spans to Phoenix through OpenTelemetry's OTLP/HTTP span exporter, bounded.

Ingest never waits on Phoenix: ``submit`` appends to a bounded deque (O(1)); when it is full the
oldest spans are dropped and counted. The ``forwarding`` job (``agent/jobs.py``) calls ``drain``,
which hands batches to ``OTLPSpanExporter``: gzip-compressed, retried with exponential backoff
(and ``Retry-After``) on 429/502/503/504 and connection errors, within the export timeout. A batch
that still fails is counted and logged at most once a minute, so a Phoenix that is down or slow
costs the agent nothing but the count.

Usage::

    forwarder = SpanForwarder(phoenix_exporter("http://127.0.0.1:6006"), on_outcome=lambda outcome, n: ...)
    forwarder.submit(spans); forwarder.drain(); forwarder.shutdown()
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rag_monitor import semconv

log = logging.getLogger(__name__)

SCOPE_NAME = "rag-monitor"


def phoenix_exporter(base_url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None):
    """An ``OTLPSpanExporter`` for ``<base_url>/v1/traces`` with gzip compression."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=base_url.rstrip("/") + "/v1/traces", timeout=timeout_s,
                            compression=Compression.Gzip, headers=headers)


class ReadableSpans:
    """Turns the agent's decoded spans into the SDK's ``ReadableSpan``s that the exporter encodes.

    Spans of one decoded resource (scope) share its attribute dict (``Scope``), so one ``Resource``
    (``InstrumentationScope``) is built per batch for each; links and events go along;
    ``project`` fills ``openinference.project.name`` where the app did not choose one.
    """

    def __init__(self, project: str = ""):
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.project = project
        self.scope = InstrumentationScope(SCOPE_NAME)

    def __call__(self, spans: Sequence[Any]) -> list:
        from opentelemetry.sdk.resources import Resource

        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        resources: dict[int, Any] = {}
        scopes: dict[int, Any] = {}
        out = []
        for span in spans:
            resource = resources.get(id(span.resource))
            if resource is None:
                attributes = dict(span.resource)
                if self.project:
                    attributes.setdefault(semconv.OPENINFERENCE_PROJECT_NAME, self.project)
                resource = resources[id(span.resource)] = Resource(attributes)
            source = getattr(span, "scope", None)
            scope = scopes.get(id(source)) if source is not None else self.scope
            if scope is None:
                scope = scopes[id(source)] = InstrumentationScope(
                    source.name or SCOPE_NAME, source.version or None, attributes=source.attributes or None)
            out.append(self._span(span, resource, scope))
        return out

    def _span(self, span, resource, scope):
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        trace_id = int(span.trace_id, 16)
        context = SpanContext(trace_id, int(span.span_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        parent = (SpanContext(trace_id, int(span.parent_span_id, 16), is_remote=True)
                  if span.parent_span_id else None)
        code = StatusCode(span.status_code) if span.status_code in (0, 1, 2) else StatusCode.UNSET
        # OTLP numbers span kinds from 1 (internal); the SDK's enum from 0; 0 (unspecified) is internal.
        kind = SpanKind(span.kind - 1) if 1 <= span.kind <= 5 else SpanKind.INTERNAL
        return ReadableSpan(
            name=span.name, context=context, parent=parent, resource=resource,
            attributes=span.attributes, kind=kind, instrumentation_scope=scope,
            events=[Event(e.name, e.attributes, e.time_ns) for e in span.events],
            links=[Link(SpanContext(int(link.trace_id, 16), int(link.span_id, 16), is_remote=True), link.attributes)
                   for link in getattr(span, "links", ())],
            status=Status(code, span.status_message or None if code is StatusCode.ERROR else None),
            start_time=span.start_ns, end_time=span.end_ns,
        )


class SpanForwarder:
    def __init__(
        self,
        exporter,
        on_outcome: Callable[[str, int], None],
        convert: Callable[[Sequence[Any]], list] | None = None,
        max_queue: int = 20_000,
        batch_size: int = 512,
        on_pending: Callable[[], None] = lambda: None,
    ):
        self.exporter = exporter
        self.convert = convert or ReadableSpans()
        self.on_outcome = on_outcome
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.on_pending = on_pending
        """Called when spans arrive in an empty queue: the agent wakes the forwarding job, so spans
        reach Phoenix promptly (before the scorer annotates them) without a thread of our own."""
        self._queue: collections.deque = collections.deque()
        self._queue_lock = threading.Lock()
        self._export_lock = threading.Lock()
        """One batch at a time: the scheduled drain and the final flush at stop never overlap."""
        self._in_flight = 0
        self._last_warning = 0.0

    def submit(self, spans: Sequence[Any]) -> None:
        if not spans:
            return
        with self._queue_lock:
            was_empty = not self._queue
            self._queue.extend(spans)
            overflow = len(self._queue) - self.max_queue
            for _ in range(max(0, overflow)):
                self._queue.popleft()
        if overflow > 0:
            self.on_outcome("dropped", overflow)
        if was_empty:
            self.on_pending()

    def pending(self) -> int:
        return len(self._queue) + self._in_flight

    def drain(self, deadline: float | None = None) -> int:
        """Export queued batches until the queue is empty (or ``deadline``, monotonic); returns spans sent."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        sent = 0
        with self._export_lock:
            while deadline is None or time.monotonic() < deadline:
                with self._queue_lock:
                    batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
                    self._in_flight = len(batch)
                if not batch:
                    return sent
                try:
                    ok = self.exporter.export(self.convert(batch)) is SpanExportResult.SUCCESS
                    error = "the exporter gave up (see its log)"
                except Exception as exc:  # noqa: BLE001 - Phoenix's trouble must never reach the agent
                    ok, error = False, str(exc)
                finally:
                    self._in_flight = 0
                self.on_outcome("sent" if ok else "failed", len(batch))
                if ok:
                    sent += len(batch)
                else:
                    self._warn(len(batch), error)
        return sent

    def _warn(self, n: int, error: str) -> None:
        now = time.monotonic()
        if now - self._last_warning > 60:
            self._last_warning = now
            log.warning("forwarding %d spans to Phoenix failed: %s", n, error)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export what is queued now, in the calling thread; True when nothing is left."""
        self.drain(deadline=time.monotonic() + timeout_s)
        return not self.pending()

    def shutdown(self) -> None:
        self.exporter.shutdown()
