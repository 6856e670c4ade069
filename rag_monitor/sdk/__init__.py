"""The SDK an app imports: one trace per query, one span per pipeline stage.

Depends on ``opentelemetry-api``/``-sdk`` (and the OTLP/HTTP exporter, loaded only when
used) and ``rag_monitor.semconv`` only. See ``rag_monitor.sdk.monitor`` for a usage example.
"""

from rag_monitor.sdk.config import CaptureConfig, ExportConfig
from rag_monitor.sdk.ids import format_trace_id, parse_trace_id, root_span_id
from rag_monitor.sdk.monitor import Monitor, init
from rag_monitor.sdk.processor import BoundedBatchSpanProcessor, ExportStats, SynchronousSpanProcessor
from rag_monitor.sdk.query import Query, ShadowQuery, Stage, current_query
from rag_monitor.sdk.shadow import ShadowConfig, ShadowContext, ShadowStats, ShadowWriteRefused, in_shadow
from rag_monitor.sdk.streaming import QueryStream, bind, submit

__all__ = [
    "BoundedBatchSpanProcessor",
    "CaptureConfig",
    "ExportConfig",
    "ExportStats",
    "Monitor",
    "Query",
    "QueryStream",
    "ShadowConfig",
    "ShadowContext",
    "ShadowQuery",
    "ShadowStats",
    "ShadowWriteRefused",
    "Stage",
    "bind",
    "SynchronousSpanProcessor",
    "current_query",
    "format_trace_id",
    "in_shadow",
    "init",
    "parse_trace_id",
    "root_span_id",
    "submit",
]
