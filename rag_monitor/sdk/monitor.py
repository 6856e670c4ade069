"""``init`` and ``Monitor``: the SDK's entry point.

The monitor owns a private ``TracerProvider`` (the app's global one, if any, is never
touched), whose id generator derives each root span's id from its trace id so that
feedback sent later, from anywhere, lands under the query's root span::

    monitor = rag_monitor.init(service_name="support-bot", release="2026.11.30")
    with monitor.query("How do I cancel?", session_id="s1") as q:
        ...
    monitor.feedback(q.trace_id, "thumbs_down", reason="wrong")
    monitor.shutdown()
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link

from rag_monitor import semconv
from rag_monitor.sdk._logging import log, rate_limit_export_thread_logs
from rag_monitor.sdk.config import RAG_MONITOR_DISABLED, CaptureConfig, ExportConfig, env_flag
from rag_monitor.sdk.feedback import FeedbackCalls
from rag_monitor.sdk.handles import late_writes
from rag_monitor.sdk.ids import RootDerivedIdGenerator, format_trace_id, parse_trace_id
from rag_monitor.sdk.noop import NOOP_QUERY, NoopQuery
from rag_monitor.sdk.processor import (
    BoundedBatchSpanProcessor,
    ExportStats,
    SynchronousSpanProcessor,
    _CountingProcessor,
)
from rag_monitor.sdk.query import Query, ShadowQuery, current_query
from rag_monitor.sdk.shadow import ShadowConfig, ShadowContext, ShadowRunner, ShadowStats, in_shadow

_INSTRUMENTATION_NAME = "rag_monitor"
_ROOT_CONTEXT = Context()  # an empty context: every query starts a trace of its own
# One retrieval of 100 documents is ~400 attributes: OTel's default limit (128) would cut it.
_MAX_SPAN_ATTRIBUTES = 4096


class Monitor(FeedbackCalls):
    """Records RAG queries as OpenTelemetry traces and sends them to the rag-monitor agent.

    Create one per process with ``rag_monitor.init(...)``; it is safe to share across threads
    and asyncio tasks. With ``enabled=False`` (or ``RAG_MONITOR_DISABLED=1``) every call is a
    cheap no-op.
    """

    def __init__(
        self,
        service_name: str,
        *,
        endpoint: str | None = None,
        release: str = "",
        prompt_version: str | None = None,
        config_version: str | None = None,
        span_exporter: SpanExporter | None = None,
        batch: bool = True,
        enabled: bool | None = None,
        capture: CaptureConfig | None = None,
        token: str | None = None,
        export_timeout_s: float | None = None,
        max_queue_size: int | None = None,
        max_export_batch_size: int | None = None,
        schedule_delay_s: float | None = None,
        resource_attributes: Mapping[str, Any] | None = None,
        shadow: ShadowConfig | None = None,
    ) -> None:
        if not service_name or not isinstance(service_name, str):
            raise ValueError(f"service_name={service_name!r}: a non-empty string is required")
        self.service_name = service_name
        self.release = str(release or "")
        self.prompt_version = str(prompt_version) if prompt_version else None
        """``rag.prompt.version`` on every query (settable at runtime): a new one is a change for triage."""
        self.config_version = str(config_version) if config_version else None
        """``rag.config.version`` on every query (settable at runtime): a new one is a change for triage."""
        self.enabled = (not env_flag(RAG_MONITOR_DISABLED)) if enabled is None else bool(enabled)
        self._provider: TracerProvider | None = None
        self._processor: _CountingProcessor | None = None
        self._tracer: Any = None
        self.capture = capture
        self.export_config: ExportConfig | None = None
        self._shadow_config = shadow
        self._shadow_runner: ShadowRunner | None = None
        self._shadow_lock = threading.Lock()
        if not self.enabled:
            return
        # Configuration errors are the developer's: raise them here, at start-up.
        self.capture = capture if capture is not None else CaptureConfig()
        self.export_config = ExportConfig(
            endpoint=endpoint,
            token=token,
            export_timeout_s=export_timeout_s,
            max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size,
            schedule_delay_s=schedule_delay_s,
        )
        exporter = span_exporter if span_exporter is not None else self._otlp_exporter()
        if batch:
            cfg = self.export_config
            self._processor = BoundedBatchSpanProcessor(
                exporter,
                max_queue_size=cfg.max_queue_size,
                max_export_batch_size=cfg.max_export_batch_size,
                schedule_delay_s=cfg.schedule_delay_s or 1.0,
            )
        else:
            self._processor = SynchronousSpanProcessor(exporter)
        attributes = dict(resource_attributes or {})
        attributes[semconv.SERVICE_NAME] = service_name
        if self.release:
            attributes[semconv.SERVICE_VERSION] = self.release
        self._provider = TracerProvider(
            sampler=ALWAYS_ON,  # the agent samples; the app's OTEL_TRACES_SAMPLER is not ours
            resource=Resource.create(attributes),
            id_generator=RootDerivedIdGenerator(),
            span_limits=SpanLimits(max_span_attributes=_MAX_SPAN_ATTRIBUTES, max_attribute_length=None),
        )
        self._provider.add_span_processor(self._processor)
        self._tracer = self._provider.get_tracer(_INSTRUMENTATION_NAME)

    def _otlp_exporter(self) -> SpanExporter:
        # Imported here: tests with an in-memory exporter never load requests and protobuf.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # With the agent down it would log every batch: keep our thread's share quiet.
        rate_limit_export_thread_logs(OTLPSpanExporter.__module__)
        rate_limit_export_thread_logs("opentelemetry.exporter.otlp.common.http")
        cfg = self.export_config
        return OTLPSpanExporter(endpoint=cfg.traces_url, headers=cfg.headers, timeout=cfg.export_timeout_s)

    # --- recording ------------------------------------------------------------------------

    def query(
        self,
        text: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        tenant: str | None = None,
        variant: str = semconv.VARIANT_PRODUCTION,
        intent: str | None = None,
        route: str | None = None,
        shadow_of: str | int | None = None,
        candidate: str | None = None,
        start_time_ns: int | None = None,
    ) -> Query | NoopQuery:
        """Start a query (the root span of a new trace); use it as a ``with`` block.

        ``start_time_ns`` (with ``q.end(end_time_ns)``) replays a query recorded earlier, e.g.
        from a batch job's logs; live apps leave both to the clock.

        ``variant`` is ``production``, ``shadow`` or ``candidate``; a shadow query names the
        production query it shadows with ``shadow_of`` (a trace id) and its pipeline with
        ``candidate``; ``q.shadow(...)`` does all of it (``rag_monitor.sdk.shadow``). Inside a
        shadow candidate this returns a no-op query: a candidate never records a production query.
        """
        if variant not in semconv.VARIANTS:
            raise ValueError(f"variant={variant!r}: expected one of {semconv.VARIANTS}")
        if shadow_of is not None:
            shadow_of = format_trace_id(parse_trace_id(shadow_of))
        tracer = self._tracer
        if tracer is None:
            return NOOP_QUERY
        if in_shadow():
            log.warning("query-in-shadow", "rag_monitor: monitor.query() inside a shadow candidate was refused;"
                        " record on ctx.query")
            return NOOP_QUERY
        try:
            capture = self.capture
            attrs: dict[str, Any] = {
                semconv.OPENINFERENCE_SPAN_KIND: semconv.SPAN_KIND_CHAIN,
                semconv.RAG_VARIANT: variant,
            }
            truncated = None
            hidden = capture.hidden_content
            if hidden:  # hidden content is not sent; this says it exists (not a placeholder text)
                attrs[semconv.RAG_CONTENT_HIDDEN] = hidden
            if text is not None:
                if not capture.hide_inputs:
                    text = text if isinstance(text, str) else str(text)
                    limit = capture.max_string_length
                    if limit and len(text) > limit:
                        text = text[:limit]
                        truncated = [semconv.INPUT_VALUE]
                    attrs[semconv.INPUT_VALUE] = text
            if self.release:
                attrs[semconv.RAG_RELEASE] = self.release
            if self.prompt_version:
                attrs[semconv.RAG_PROMPT_VERSION] = self.prompt_version
            if self.config_version:
                attrs[semconv.RAG_CONFIG_VERSION] = self.config_version
            if session_id is not None:
                attrs[semconv.SESSION_ID] = str(session_id)
            if user_id is not None:
                attrs[semconv.USER_ID] = str(user_id)
            if tenant is not None:
                attrs[semconv.RAG_TENANT] = str(tenant)
            if intent is not None:
                attrs[semconv.RAG_INTENT] = str(intent)
            if route is not None:
                attrs[semconv.RAG_ROUTE] = str(route)
            if shadow_of is not None:
                attrs[semconv.RAG_SHADOW_OF] = shadow_of
            if candidate is not None:
                attrs[semconv.RAG_SHADOW_CANDIDATE] = str(candidate)
            if truncated:
                attrs[semconv.RAG_TRUNCATED] = tuple(truncated)
            # A query runs inside the app's own request span (if any): link to it, don't join it.
            app_span = trace.get_current_span().get_span_context()
            links = (Link(app_span),) if app_span.is_valid else ()
            span = tracer.start_span(semconv.RAG_QUERY_SPAN_NAME, context=_ROOT_CONTEXT, attributes=attrs, links=links,
                                     start_time=start_time_ns)
            if variant == semconv.VARIANT_SHADOW:
                return ShadowQuery(tracer, span, capture, truncated)
            q = Query(tracer, span, capture, truncated)
            q._shadows, q._shadow_args = self, (text, tenant, intent)
            return q
        except Exception:  # noqa: BLE001
            log.internal_error("query")
            return NOOP_QUERY

    # --- shadow evaluation ------------------------------------------------------------------

    @property
    def shadow_runner(self) -> ShadowRunner | None:
        """The runner behind ``q.shadow(...)``, started on first use (None when disabled)."""
        if self._tracer is None:
            return None
        with self._shadow_lock:
            if self._shadow_runner is None:
                self._shadow_runner = ShadowRunner(self._shadow_query, self._shadow_config)
            return self._shadow_runner

    def _shadow_query(self, ctx: ShadowContext) -> Query | NoopQuery:
        return self.query(ctx.text, tenant=ctx.tenant, intent=ctx.intent, variant=semconv.VARIANT_SHADOW,
                          shadow_of=ctx.production_trace_id, candidate=ctx.variant)

    def shadow_stats(self) -> ShadowStats:
        """Shadow candidates submitted, dropped, completed, timed out, failed, running."""
        runner = self._shadow_runner
        return runner.stats() if runner is not None else ShadowStats()

    def index_event(
        self,
        document_id: str,
        committed_at: float | datetime,
        indexed_at: float | datetime | None = None,
        source: str | None = None,
        index_version: str | None = None,
    ) -> None:
        """A document version became searchable: call it from the indexer when the version is in.

        ``committed_at``: when this version was committed at its source; ``indexed_at``: when it
        became searchable (default now); both Unix seconds or timezone-aware datetimes. The agent
        exports the lag between them (``rag_index_freshness_lag_seconds``) and remembers each
        document's newest version, so a query served an older one counts as stale. One span in a
        trace of its own. Bad arguments raise ValueError (a bug in the indexer, not in traffic).
        """
        if not document_id or not isinstance(document_id, str):
            raise ValueError(f"document_id={document_id!r}: a non-empty string is required")
        committed = _unix_seconds("committed_at", committed_at)
        indexed = time.time() if indexed_at is None else _unix_seconds("indexed_at", indexed_at)
        tracer = self._tracer
        if tracer is None:
            return
        try:
            attrs: dict[str, Any] = {
                semconv.RAG_INDEX_DOCUMENT_ID: document_id,
                semconv.RAG_INDEX_COMMITTED_AT: committed,
                semconv.RAG_INDEX_INDEXED_AT: indexed,
            }
            if source is not None:
                attrs[semconv.RAG_INDEX_SOURCE] = str(source)
            if index_version is not None:
                attrs[semconv.RAG_INDEX_VERSION] = str(index_version)
            at = int(indexed * 1e9)
            tracer.start_span(semconv.RAG_INDEX_SPAN_NAME, context=_ROOT_CONTEXT, attributes=attrs, start_time=at).end(end_time=at)
        except Exception:  # noqa: BLE001
            log.internal_error("index_event")

    @staticmethod
    def current_query() -> Query | NoopQuery:
        """The query whose ``with`` block is running in this thread or task (no-op if none)."""
        return current_query()

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """The SDK's private provider (None when disabled); never the global one."""
        return self._provider

    def stats(self) -> ExportStats:
        """Spans exported, dropped (queue full or after shutdown), failed (export failed), queued, and
        the process's late writes (attributes that arrived on an ended query or stage: lost)."""
        stats = self._processor.stats() if self._processor is not None else ExportStats()
        return dataclasses.replace(stats, late_writes=late_writes())

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export everything queued now; False when it did not finish in time or an export failed."""
        if self._provider is None:
            return True
        try:
            return self._provider.force_flush(int(timeout_s * 1000))
        except Exception:  # noqa: BLE001
            log.internal_error("force_flush")
            return False

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush and stop; later calls record nothing (their spans count as dropped)."""
        if self._provider is None:
            return
        runner = self._shadow_runner
        if runner is not None:
            runner.shutdown(timeout_s)  # a candidate's spans end (or time out) before the flush
        try:
            self._processor.shutdown(int(timeout_s * 1000))  # type: ignore[union-attr]
            self._provider.shutdown()
        except Exception:  # noqa: BLE001
            log.internal_error("shutdown")


def _unix_seconds(name: str, value: float | datetime) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{name}={value!r}: a naive datetime is ambiguous; give it a timezone")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r}: expected Unix seconds or a timezone-aware datetime")
    return float(value)


def init(service_name: str, **kwargs: Any) -> Monitor:
    """Create the process's monitor: ``rag_monitor.init(service_name="support-bot", release="1.2")``.

    Keyword arguments are ``Monitor``'s: ``endpoint`` (else ``RAG_MONITOR_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://127.0.0.1:4318``), ``release``,
    ``prompt_version`` and ``config_version`` (on every query; a new one is a change for triage),
    ``span_exporter`` (replaces OTLP, e.g. an in-memory exporter in tests), ``batch``
    (False: export each span as it ends), ``enabled``, ``capture`` (a ``CaptureConfig``),
    ``token``, ``export_timeout_s``, ``max_queue_size``, ``shadow`` (a ``ShadowConfig``).
    """
    return Monitor(service_name, **kwargs)
