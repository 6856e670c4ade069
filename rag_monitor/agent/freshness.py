"""Index freshness: commit-to-searchable lag from index events, and queries served a stale version.

Each document's newest searchable version lives in the shared store (``store.index_documents``),
never in one replica's memory: an index event and the queries it makes stale may reach different
replicas, and a replica that restarts must still know what is current. Two store round trips per
request at most, and only for requests that carry index events or dated documents.

- ``take_events(spans)``, on the request path before assembly: records the request's index
  events (one transaction; ``StoreUnavailable`` propagates, so the exporter retries) and returns
  the other spans. A version's lag is observed once, when it is the newest seen for its document:
  a re-sent or re-indexed version counts as ``not_newer``, never twice.
- ``observe(records)``, after the records are persisted: a query is *checked* when it was served
  at least one document whose version (its metadata's commit time) and newest version are known,
  and *stale* when one of those documents has a newer version committed before the query started.
  Newer versions whose index events arrive after the query is assembled are not seen (the share is
  a lower bound while the indexer's events lag).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rag_monitor.alerts.metrics import AgentMetrics, LabelFolder
from rag_monitor.collectors.freshness import IndexEvent, served_versions, split_index_events
from rag_monitor.collectors.otlp import Span
from rag_monitor.record import QueryRecord
from rag_monitor.store import StoreUnavailable

if TYPE_CHECKING:
    from rag_monitor.store.documents import IndexDocuments

log = logging.getLogger(__name__)


class FreshnessTracker:
    def __init__(self, documents: IndexDocuments, metrics: AgentMetrics, committed_at_keys: Sequence[str], top_sources: int = 10,
                 on_events: Callable[[Sequence[IndexEvent]], None] | None = None):
        self.documents = documents
        """``store.index_documents``: the only part of the store this tracker uses."""
        self.metrics = metrics
        self.keys = tuple(committed_at_keys)
        self.source = LabelFolder(top_sources)
        self.on_events = on_events
        """Called with each request's valid index events once stored (index builds are change events)."""

    def take_events(self, spans: Sequence[Span]) -> list[Span]:
        """Record the index events among ``spans`` in the store; return the other spans, in order."""
        events, invalid, rest = split_index_events(spans)
        m = self.metrics
        if invalid:
            m.index_events.labels("invalid").inc(invalid)
        if events:
            advanced = self.documents.record(events)
            for event, new in zip(events, advanced):
                if new:
                    m.index_events.labels("new_version").inc()
                    m.freshness_lag.labels(self.source(event.source)).observe(max(0.0, event.lag_s))
                else:
                    m.index_events.labels("not_newer").inc()
            if self.on_events is not None:
                self.on_events(events)
        return rest

    def observe(self, records: Sequence[QueryRecord], labels_of: Callable[[QueryRecord], tuple[str, str]]) -> None:
        """Count checked and stale queries among ``records`` (one store read for the batch)."""
        served = [(record, versions) for record in records if (versions := served_versions(record, self.keys))]
        if not served:
            return
        try:
            newest = self.documents.newest({doc for _, versions in served for doc in versions})
        except StoreUnavailable:  # the records are kept; only this check is lost, and counted
            self.metrics.store_errors.labels("freshness").inc()
            return
        m = self.metrics
        for record, versions in served:
            known = {doc: committed for doc, committed in versions.items() if doc in newest}
            if not known:
                continue
            release, variant = labels_of(record)
            m.index_checked_queries.labels(release, variant).inc()
            started = record.start_ns / 1e9
            # The definition: a newer version was committed before the query started
            # (searchable or not yet: a lagging indexer serves everyone the old one meanwhile).
            if any(committed < newest[doc][0] <= started for doc, committed in known.items()):
                m.index_stale_queries.labels(release, variant).inc()
