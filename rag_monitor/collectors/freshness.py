"""Index events and the versions queries were served, out of spans.

An index event says that a version of a document became searchable: the SDK's ``rag.index``
span (``Monitor.index_event``), or any span an app's own ingestion marks with
``rag.index.document_id`` (neither OpenInference nor the GenAI conventions describe ingestion).
The version a query was served is the commit time in the retrieved document's metadata.

    events, invalid, rest = split_index_events(spans)   # rest: the spans of queries, for assembly
    served = served_versions(record, settings.document_committed_at_metadata_keys)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import Span
from rag_monitor.record import QueryRecord

__all__ = ["IndexEvent", "parse_time", "served_versions", "split_index_events"]

_MAX_ID_CHARS = 500
_MAX_SOURCE_CHARS = 200


@dataclass(frozen=True, slots=True)
class IndexEvent:
    """One document version that became searchable."""

    document_id: str
    committed_at: float
    """Unix seconds: when the version was committed at its source."""
    indexed_at: float
    """Unix seconds: when it became searchable."""
    source: str | None = None
    index_version: str | None = None
    """The index build or load it arrived in (``rag.index.version``): a new one is an index change."""

    @property
    def lag_s(self) -> float:
        return self.indexed_at - self.committed_at


def parse_time(value: Any) -> float | None:
    """Unix seconds from a number, a numeric string, ISO 8601 (naive is UTC) or a date; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
        if seconds > 1e11:  # milliseconds (JavaScript, many stores): seconds would be year 5000+
            seconds /= 1000
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return parse_time(float(text))
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            parsed = datetime.combine(date.fromisoformat(text), datetime.min.time())
        except ValueError:
            return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def _is_index_span(span: Span) -> bool:
    return sc.RAG_INDEX_DOCUMENT_ID in span.attributes


def _index_event(span: Span) -> IndexEvent | None:
    a = span.attributes
    document_id = a.get(sc.RAG_INDEX_DOCUMENT_ID)
    committed = parse_time(a.get(sc.RAG_INDEX_COMMITTED_AT))
    indexed = parse_time(a.get(sc.RAG_INDEX_INDEXED_AT)) if sc.RAG_INDEX_INDEXED_AT in a else (span.end_ns or span.start_ns) / 1e9
    if not isinstance(document_id, str) or not document_id or committed is None or indexed is None or indexed <= 0:
        return None
    source, version = a.get(sc.RAG_INDEX_SOURCE), a.get(sc.RAG_INDEX_VERSION)
    return IndexEvent(document_id[:_MAX_ID_CHARS], committed, indexed,
                      str(source)[:_MAX_SOURCE_CHARS] if source not in (None, "") else None,
                      str(version)[:_MAX_SOURCE_CHARS] if version not in (None, "") else None)


def split_index_events(spans: Sequence[Span]) -> tuple[list[IndexEvent], int, list[Span]]:
    """(index events, malformed index spans, the other spans). The other spans keep their order."""
    if not any(_is_index_span(s) for s in spans):  # the common request: queries only
        return [], 0, list(spans)
    events, invalid, rest = [], 0, []
    for span in spans:
        if not _is_index_span(span):
            rest.append(span)
            continue
        event = _index_event(span)
        if event is None:
            invalid += 1
        else:
            events.append(event)
    return events, invalid, rest


def served_versions(record: QueryRecord, keys: Iterable[str]) -> dict[str, float]:
    """Document id -> commit time of the version the query was served, for the documents delivered
    to the generator (those retrieved when nothing says what was delivered) that carry one. A
    delivered document without metadata (rerankers often drop it) takes its retrieved copy's."""
    keys = tuple(keys)

    def committed_at(doc) -> float | None:
        return next((t for k in keys if (t := parse_time(doc.metadata.get(k))) is not None), None) if doc.metadata else None

    retrieved = {doc.id: t for doc in record.retrieved if doc.id and (t := committed_at(doc)) is not None}
    out: dict[str, float] = {}
    for doc in record.delivered or record.retrieved:
        if not doc.id:
            continue
        committed = committed_at(doc)
        if committed is None:
            committed = retrieved.get(doc.id)
        if committed is not None:
            out[doc.id] = min(committed, out.get(doc.id, committed))
    return out
