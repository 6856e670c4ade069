"""Change events: what the alerts' triage compares a guardrail's signal across.

A change is a new value of something the app's behaviour depends on, seen under the same key:

- ``release``: a service's newest release (from the store's release order, ``ReleaseLabels``);
- ``model``: a new response model under one requested model name (a provider's silent update:
  ``gen_ai.response.model`` against ``gen_ai.request.model``, or OpenInference's ``llm.model_name``
  against its invocation parameters' ``model``);
- ``prompt`` / ``config``: a new ``rag.prompt.version`` / ``rag.config.version`` of a service;
- ``index``: a new ``rag.index.version`` of a source (a rebuild or a bulk load), however many
  documents it carries.

Each is exported as ``rag_change_events_total{kind}`` and, for the latest change of each kind,
``rag_change_last_timestamp_seconds{kind, change}`` (one series per kind: the label is bounded).
The rules take the earliest sighting across replicas (``min``); the dashboard draws them as
annotations. A value seen before under the same key is not a change again, so traffic that
alternates between two versions during a provider's rollout counts once. Kept in memory per
replica: after a restart, the first value seen under a key is the baseline, not a change.

    tracker = ChangeTracker(metrics)
    tracker.observe(record)          # model, prompt and config changes of one query
    tracker.observe_index(events)    # index builds
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors.freshness import IndexEvent
from rag_monitor.record import QueryRecord

_MAX_KEYS = 1000
"""Keys remembered per kind (requested models, services, sources): bounded memory under junk input."""
_MAX_VALUES = 50
"""Values remembered per key."""
_MAX_LABEL_CHARS = 100


class ChangeTracker:
    def __init__(self, metrics: AgentMetrics, clock=time.time):
        self.metrics = metrics
        self.clock = clock
        self._seen: dict[tuple[str, str], list[str]] = {}
        self._last: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def observe(self, record: QueryRecord) -> None:
        service = record.service or ""
        for call in record.model_calls:
            if call.requested_model and call.response_model:
                self.note("model", call.requested_model, call.response_model)
        if record.prompt_version:
            self.note("prompt", service, record.prompt_version)
        if record.config_version:
            self.note("config", service, record.config_version)

    def observe_index(self, events: Iterable[IndexEvent]) -> None:
        for event in events:
            if event.index_version:
                self.note("index", event.source or "", event.index_version, at=event.indexed_at)

    def note(self, kind: str, key: str, value: str, at: float | None = None) -> bool:
        """Records ``value`` under ``(kind, key)``; True (and exported) when it is a change."""
        with self._lock:
            seen = self._seen.get((kind, key))
            if seen is None:
                if len(self._seen) < _MAX_KEYS:
                    self._seen[(kind, key)] = [value]
                return False  # the first value is the baseline
            if value in seen:
                return False
            seen.append(value)
            del seen[:-_MAX_VALUES]
            self._export(kind, value, self.clock() if at is None else at)
            return True

    def release(self, release: str, first_seen: float, new: bool) -> None:
        """A service's newest release (``ReleaseLabels``): exported; counted when ``new`` (not at startup)."""
        with self._lock:
            if self._last.get("release", ("", 0.0))[0] == release[:_MAX_LABEL_CHARS]:
                return
            if new:
                self._export("release", release, first_seen)
            else:
                self._set_last("release", release, first_seen)

    def _export(self, kind: str, value: str, at: float) -> None:
        self.metrics.change_events.labels(kind).inc()
        self._set_last(kind, value, at)

    def _set_last(self, kind: str, value: str, at: float) -> None:
        label = value[:_MAX_LABEL_CHARS]
        previous = self._last.get(kind)
        if previous is not None and previous[1] > at:
            return  # an older change reported late: the latest stays
        if previous is not None and previous[0] != label:
            self.metrics.change_last.remove(kind, previous[0])
        self.metrics.change_last.labels(kind, label).set(at)
        self._last[kind] = (label, at)
