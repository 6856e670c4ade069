"""From assembled ``QueryRecord``s to Prometheus metrics.

Everything here is on the ingest hot path: a few label lookups and increments per record.
Free-form label values pass through ``LabelFolder``s so no tenant id or intent can blow up
the series count.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict

from rag_monitor import semconv
from rag_monitor.agent.releases import ReleaseLabels
from rag_monitor.alerts.metrics import AgentMetrics, LabelFolder
from rag_monitor.record import Feedback, ModelCall, QueryRecord

_WORD = re.compile(r"\w+")


def _tokens(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class RegenerationDetector:
    """Infers regenerations: the same session re-asks a near-duplicate query within a window.

    Keeps the last query of sessions seen within the window (at most ``max_sessions``), so memory
    follows the number of active sessions, not the traffic.
    """

    def __init__(self, window_s: float, similarity: float, max_sessions: int = 50_000):
        self.window_ns = int(window_s * 1e9)
        self.similarity = similarity
        self.max_sessions = max_sessions
        self._last: OrderedDict[str, tuple[int, frozenset[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def is_regeneration(self, record: QueryRecord) -> bool:
        if not record.session_id or not record.query or "query" in record.hidden:  # hidden: nothing to compare
            return False
        words = _tokens(record.query)
        with self._lock:
            previous = self._last.pop(record.session_id, None)
            self._last[record.session_id] = (record.start_ns, words)
            # Sessions silent for longer than the window can't regenerate: forget them (oldest first).
            horizon = record.start_ns - self.window_ns
            while len(self._last) > self.max_sessions or next(iter(self._last.values()))[0] < horizon:
                self._last.popitem(last=False)
        if previous is None:
            return False
        started, previous_words = previous
        return 0 <= record.start_ns - started <= self.window_ns and jaccard(words, previous_words) >= self.similarity


class QueryObserver:
    """Updates the query metrics from one record; the ingest pipeline calls ``observe``."""

    def __init__(
        self,
        metrics: AgentMetrics,
        cost_of,
        top_intents: int = 20,
        top_tenants: int = 20,
        top_releases: int = 10,
        regeneration: RegenerationDetector | None = None,
        clock=time.time,
    ):
        self.metrics = metrics
        self.cost_of = cost_of
        """``cost_of(call: ModelCall) -> float | None``: one call at its model's price (``PriceTable.call_cost``)."""
        self.intent = LabelFolder(top_intents)
        self.tenant = LabelFolder(top_tenants)
        self.releases = ReleaseLabels(metrics, top_releases)
        """The N most recently first-seen releases per service, from the store (``releases.refresh``)."""
        self.variant = LabelFolder(len(semconv.VARIANTS), allowed=semconv.VARIANTS)
        self.stage = LabelFolder(len(semconv.STAGES), allowed=semconv.STAGES)
        self.feedback_kind = LabelFolder(len(semconv.FEEDBACK_KINDS), allowed=semconv.FEEDBACK_KINDS)
        self.filter_kind = LabelFolder(len(semconv.FILTER_KINDS), allowed=semconv.FILTER_KINDS)
        self.model = LabelFolder(20)
        self.regeneration = regeneration or RegenerationDetector(120.0, 0.8)
        self.clock = clock

    def labels_of(self, record: QueryRecord) -> tuple[str, str]:
        return self.releases.label(record.service, record.release), self.variant(record.variant)

    def observe(self, record: QueryRecord) -> float | None:
        """Update every query metric from ``record``; returns its cost in USD when priced."""
        m = self.metrics
        release, variant = self.labels_of(record)
        m.queries.labels(release, variant, self.intent(record.intent), self.tenant(record.tenant)).inc()
        m.query_duration.labels(release, variant).observe(record.duration_s)
        if record.error:
            m.query_errors.labels(release, variant).inc()
        if record.refused:
            m.refusals.labels(release, variant).inc()
        for stage in record.stages:
            m.stage_duration.labels(self.stage(stage.name), release, variant).observe(stage.duration_s)
        if record.time_to_first_token_s is not None:
            m.time_to_first_token.labels(release, variant).observe(record.time_to_first_token_s)

        cost = self._observe_calls(record, release, variant)

        # Per query, not per filter: the recording rules divide these by the query count.
        outcomes: dict[str, set[str]] = {}
        for applied in record.filters:
            seen = outcomes.setdefault(self.filter_kind(applied.kind), set())
            if applied.emptied:
                seen.add("emptied")
            if applied.removed_any:
                seen.add("removed_topk")
        for kind, seen in outcomes.items():
            m.filtered_queries.labels(release, variant, kind).inc()
            for outcome in seen:
                m.filter_exclusions.labels(release, variant, kind, outcome).inc()

        if self.regeneration.is_regeneration(record):
            m.regenerations.labels(release, variant, "inferred").inc()
        for feedback in record.feedback:
            self.observe_feedback(record, feedback)
        return cost

    def _observe_calls(self, record: QueryRecord, release: str, variant: str) -> float | None:
        """Tokens and cost of every model call under the call's own model; the query's cost is
        their sum, observed when every call with tokens is priced."""
        m = self.metrics
        calls = record.model_calls
        if not calls and (record.llm_calls or record.total_tokens):  # a record made before model_calls
            calls = [ModelCall("llm", record.llm_model, record.prompt_tokens, record.completion_tokens)]
        total, priced, unpriced = 0.0, 0, set()
        for call in calls:
            model = self.model(call.model)
            for kind, n in (("prompt", call.input_tokens), ("completion", call.output_tokens), ("cached_prompt", call.cached_input_tokens)):
                if n:
                    m.tokens.labels(release, variant, kind, model).inc(n)
            if call.kind != "llm" and not (call.input_tokens or call.output_tokens):
                continue  # an embedding without token counts: nothing to price
            cost = self.cost_of(call)
            if cost is None:
                unpriced.add(model)
            else:
                total, priced = total + cost, priced + 1
                m.cost.labels(release, variant, model).inc(cost)
        for model in unpriced:
            m.unpriced.labels(model).inc()
        if not priced or unpriced:
            return None
        m.query_cost.labels(release, variant).observe(total)
        return total

    def observe_feedback(self, record: QueryRecord | None, feedback: Feedback) -> None:
        """Count a feedback event; ``record`` gives its labels when the query is known."""
        release, variant = self.labels_of(record) if record else ("unknown", "unknown")
        kind = self.feedback_kind(feedback.kind)
        self.metrics.feedback.labels(release, variant, kind).inc()
        if feedback.kind == semconv.FEEDBACK_REGENERATE:
            self.metrics.regenerations.labels(release, variant, "explicit").inc()
