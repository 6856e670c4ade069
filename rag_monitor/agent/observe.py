"""From assembled ``QueryRecord``s to Prometheus metrics.

Everything here is on the ingest hot path: a few label lookups and increments per record.
Free-form label values pass through ``LabelFolder``s so no tenant id or intent can blow up
the series count.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from rag_monitor import semconv
from rag_monitor.agent.changes import ChangeTracker
from rag_monitor.agent.follow_ups import FollowUpMatcher, detected_feedback
from rag_monitor.agent.releases import ReleaseLabels
from rag_monitor.alerts.metrics import AgentMetrics, LabelFolder
from rag_monitor.collectors.pricing import model_calls, price_query
from rag_monitor.record import Feedback, QueryRecord
from rag_monitor.store import SessionQuery

if TYPE_CHECKING:
    from rag_monitor.store.coordination import SessionWindows

_WORD = re.compile(r"\w+")


def _tokens(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class RegenerationDetector:
    """Infers regenerations: the same session re-asks a near-duplicate query within a window.

    Each session's last query lives in the shared store (``session_windows``), so a re-ask that
    the gateway routes to another replica still counts. Off the request path: ingest ``offer``s
    the queries (an O(1) append to a bounded queue) and the ``regeneration`` job checks them in
    one store transaction per tick. Each re-ask is a signal (``on_regeneration``) about the query
    it re-asks, and claims that query in the store in the same transaction: only a query no
    explicit ``regenerate`` (nor an earlier re-ask) had claimed counts as regenerated
    (``on_regenerated_query``), so a click and the re-ask it triggers are one regeneration. Both
    carry the re-asked query's labels. Queries that overflow the queue, or that meet an
    unavailable store, are counted unchecked.

    The same comparison finds follow-ups (``follow_ups``: "are you sure?" within its window):
    each is handed to ``on_follow_ups`` as ``(doubted trace id, follow_up Feedback)``, which
    stores it on the previous query like the app's own ``follow_up`` (``agent/follow_ups.py``).
    """

    def __init__(self, windows: SessionWindows, window_s: float, similarity: float, *,
                 on_regeneration: Callable[[str, str, str], None] = lambda release, variant, intent: None,
                 on_regenerated_query: Callable[[str, str, str], None] = lambda release, variant, intent: None,
                 on_unchecked: Callable[[int], None] = lambda n: None,
                 follow_ups: FollowUpMatcher | None = None,
                 on_follow_ups: Callable[[list[tuple[str, Feedback]]], None] = lambda found: None,
                 claim_ttl_s: float = 3600.0, max_queue: int = 20_000, clock=time.time):
        self.windows = windows
        """``store.session_windows``: the only part of the store this detector uses."""
        self.window_ns = int(window_s * 1e9)
        self.follow_ups = follow_ups if follow_ups is not None and follow_ups.enabled else None
        self.on_follow_ups = on_follow_ups
        self.window_s = max(window_s, self.follow_ups.window_ns / 1e9 if self.follow_ups else 0.0)
        """How long a session's last query is kept: the longer of the two windows."""
        self.similarity = similarity
        self.on_regeneration = on_regeneration
        self.on_regenerated_query = on_regenerated_query
        self.on_unchecked = on_unchecked
        self.claim_ttl_s = max(claim_ttl_s, window_s)
        """How long a regenerated query's claim is kept: a click later than this counts again."""
        self._queue: deque[_Asked] = deque()
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self.clock = clock

    def offer(self, records: list[QueryRecord], labels_of: Callable[[QueryRecord], tuple[str, str, str]]) -> None:
        asked = [_Asked(r.trace_id, r.session_id, r.start_ns, r.query, labels_of(r))
                 for r in records
                 if r.session_id and r.query and "query" not in r.hidden]  # hidden: nothing to compare
        if not asked:
            return
        with self._lock:
            self._queue.extend(asked)
            overflow = len(self._queue) - self.max_queue
            for _ in range(max(0, overflow)):
                self._queue.popleft()
        if overflow > 0:
            self.on_unchecked(overflow)

    def tick(self) -> int:
        """Check the queued queries (the ``regeneration`` job); returns how many were re-asks."""
        with self._lock:
            batch, self._queue = list(self._queue), deque()
        if not batch:
            return 0
        try:
            found, claimed, follow_ups = self.detect(batch)
        except Exception:
            self.on_unchecked(len(batch))
            raise
        for reasked in found:
            self.on_regeneration(*reasked.labels)
        for reasked in {q.trace_id: q for q in found if q.trace_id in claimed}.values():
            self.on_regenerated_query(*reasked.labels)
        if follow_ups:  # last: a store failure here leaves the regenerations counted
            self.on_follow_ups(follow_ups)
        return len(found)

    def detect(self, asked: list[_Asked]) -> tuple[list[SessionQuery], set[str], list[tuple[str, Feedback]]]:
        """The queries re-asked by ``asked`` (one per re-ask), the trace ids of those newly
        claimed as regenerated (in one store transaction) and the follow-ups found."""
        asked = sorted(asked, key=lambda a: a.start_ns)
        words = {a.trace_id: _tokens(a.query) for a in asked}
        latest = {a.session_id: SessionQuery(a.start_ns, sorted(words[a.trace_id]), a.trace_id, a.labels) for a in asked}
        found: list[SessionQuery] = []
        follow_ups: list[tuple[str, Feedback]] = []

        def reasked(stored: dict[str, SessionQuery]) -> list[str]:
            found.clear()
            follow_ups.clear()
            before = {sid: (q, frozenset(q.words)) for sid, q in stored.items()}
            for a in asked:
                previous = before.get(a.session_id)
                gap_ns = a.start_ns - previous[0].start_ns if previous is not None else 0
                # start > previous start: a re-sent copy of the same query (an exporter's retry) is no re-ask.
                if previous is not None and 0 < gap_ns <= self.window_ns \
                        and jaccard(words[a.trace_id], previous[1]) >= self.similarity:
                    found.append(previous[0]._replace(labels=previous[0].labels or a.labels))
                if self.follow_ups is not None and previous is not None and previous[0].trace_id \
                        and self.follow_ups.follows_up(a.query, gap_ns):
                    follow_ups.append((previous[0].trace_id, detected_feedback(a.trace_id, a.start_ns)))
                if previous is None or a.start_ns >= previous[0].start_ns:
                    before[a.session_id] = (SessionQuery(a.start_ns, [], a.trace_id, a.labels), words[a.trace_id])
            return [q.trace_id for q in found]

        _, claimed = self.windows.check(latest, reasked)
        return found, claimed, follow_ups

    def prune(self) -> int:
        """Forget idle sessions and old claims; returns how many sessions were forgotten."""
        now = self.clock()
        self.windows.prune_regenerated(now - self.claim_ttl_s)
        return self.windows.prune(now - self.window_s)


class _Asked(NamedTuple):
    """What the detector needs of a query: small, so the queue holds no documents (a tuple:
    one is made for every query, and a frozen dataclass's ``__init__`` costs several times more)."""

    trace_id: str
    session_id: str
    start_ns: int
    query: str
    labels: tuple[str, str, str]
    """(release, variant, intent) as the query's metrics have them."""


class _CachedLabels:
    """``metric.labels(*values)`` memoised: prometheus_client validates and locks on every call,
    several times per query. Label values are folded to bounded sets, so the cache is bounded."""

    __slots__ = ("_metric", "_children")

    def __init__(self, metric):
        self._metric = metric
        self._children: dict[tuple, object] = {}

    def labels(self, *values: str):
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class _MetricChildren:
    """``AgentMetrics`` with every family's ``labels`` memoised (see ``_CachedLabels``)."""

    def __init__(self, metrics: AgentMetrics):
        self._metrics = metrics

    def __getattr__(self, name: str) -> _CachedLabels:
        cached = _CachedLabels(getattr(self._metrics, name))
        setattr(self, name, cached)
        return cached


class QueryObserver:
    """Updates the query metrics from one record; the ingest pipeline calls ``observe``."""

    def __init__(
        self,
        metrics: AgentMetrics,
        cost_of,
        top_intents: int = 20,
        top_tenants: int = 20,
        top_releases: int = 10,
        clock=time.time,
        cache_saving=None,
        storage_usd_per_query: float = 0.0,
    ):
        self.metrics = metrics
        self._children = _MetricChildren(metrics)
        self.cost_of = cost_of
        """``cost_of(call: ModelCall) -> float | None``: one call at its model's price (``PriceTable.call_cost``)."""
        self.cache_saving = cache_saving
        """``cache_saving(call) -> float``: what the prompt cache saved on the call (``PriceTable.cache_saving``)."""
        self.storage_usd_per_query = storage_usd_per_query
        """A per-query share of the index's storage bill, added to every priced query (0: none)."""
        self.cache_kind = LabelFolder(len(semconv.CACHE_KINDS), allowed=semconv.CACHE_KINDS)
        self.intent = LabelFolder(top_intents)
        self.tenant = LabelFolder(top_tenants)
        self.changes = ChangeTracker(metrics, clock)
        """Change events (model, prompt, config, index, release) for triage (``agent/changes.py``)."""
        self.releases = ReleaseLabels(metrics, top_releases, on_newest=self.changes.release)
        """The N most recently first-seen releases per service, from the store (``releases.refresh``): the
        ``release`` label of every family (``releases.label``)."""
        self.variant = LabelFolder(len(semconv.VARIANTS), allowed=semconv.VARIANTS)
        self.stage = LabelFolder(len(semconv.STAGES), allowed=semconv.STAGES)
        self.feedback_kind = LabelFolder(len(semconv.FEEDBACK_KINDS), allowed=semconv.FEEDBACK_KINDS)
        self.filter_kind = LabelFolder(len(semconv.FILTER_KINDS), allowed=semconv.FILTER_KINDS)
        self.model = LabelFolder(20)
        self.clock = clock

    def labels_of(self, record: QueryRecord) -> tuple[str, str]:
        return self.releases.label(record.release), self.variant(record.variant)

    def observe(self, record: QueryRecord) -> float | None:
        """Update every query metric from ``record``; returns its cost in USD when priced."""
        m = self._children
        release, variant = self.labels_of(record)
        intent = self.intent(record.intent)
        m.queries.labels(release, variant, intent, self.tenant(record.tenant)).inc()
        # At 0 from the query on: rate() over the regeneration rate's window then sees its first increment.
        m.regenerated_queries.labels(release, variant, intent)
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
        for kind, outcomes in record.cache.items():
            for outcome, n in outcomes.items():
                if outcome in ("hit", "miss"):
                    m.cache_requests.labels(release, variant, self.cache_kind(kind), outcome).inc(n)

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

        for feedback in record.feedback:
            self.observe_feedback(record, feedback)
        if record.variant != semconv.VARIANT_SHADOW:  # a shadow candidate's versions change nothing users see
            self.changes.observe(record)
        return cost

    def regeneration_labels(self, record: QueryRecord) -> tuple[str, str, str]:
        """(release, variant, intent) as the query's metrics have them."""
        return (*self.labels_of(record), self.intent(record.intent))

    def count_regeneration(self, release: str, variant: str, intent: str) -> None:
        """An inferred regeneration signal (the detector's verdict, labels as the re-asked query had them)."""
        self._children.regenerations.labels(release, variant, intent, "inferred").inc()

    def count_regenerated_query(self, release: str, variant: str, intent: str) -> None:
        """A query counted as regenerated (its first claim: a click or a re-ask, never both)."""
        self._children.regenerated_queries.labels(release, variant, intent).inc()

    def count_regenerated_record(self, record: QueryRecord | None) -> None:
        """``count_regenerated_query`` for an explicit regenerate's query (``None``: no longer known)."""
        labels = self.regeneration_labels(record) if record else ("unknown", "unknown", "unknown")
        self.count_regenerated_query(*labels)

    def _observe_calls(self, record: QueryRecord, release: str, variant: str) -> float | None:
        """Tokens and cost of every model call under the call's own model; the query's cost
        (``price_query``, as the shadow report has it) when every call that needs a price has one."""
        m = self._children
        for call in model_calls(record):
            model = self.model(call.model)
            for kind, n in (("prompt", call.input_tokens), ("completion", call.output_tokens), ("cached_prompt", call.cached_input_tokens),
                            ("cache_write_prompt", call.cache_write_input_tokens)):
                if n:
                    m.tokens.labels(release, variant, kind, model).inc(n)
            if call.cached_input_tokens and self.cache_saving is not None:
                saved = self.cache_saving(call)
                if saved:
                    m.cache_saved.labels(release, variant, semconv.CACHE_PROMPT).inc(saved)
        cost = price_query(record, self.cost_of, self.storage_usd_per_query)
        for call, usd in cost.priced_calls:
            m.cost.labels(release, variant, self.model(call.model)).inc(usd)
        for model in {self.model(name) for name in cost.unpriced_models}:
            m.unpriced.labels(model).inc()
        if cost.total_usd is None:
            return None
        m.query_cost.labels(release, variant).observe(cost.total_usd)
        for component, usd in cost.components.items():
            m.component_cost.labels(release, variant, component).observe(usd)
        return cost.total_usd

    def observe_feedback(self, record: QueryRecord | None, feedback: Feedback) -> None:
        """Count a feedback event; ``record`` gives its labels when the query is known."""
        release, variant = self.labels_of(record) if record else ("unknown", "unknown")
        kind = self.feedback_kind(feedback.kind)
        self._children.feedback.labels(release, variant, kind).inc()
        if feedback.kind == semconv.FEEDBACK_REGENERATE:
            intent = self.intent(record.intent) if record else "unknown"
            self._children.regenerations.labels(release, variant, intent, "explicit").inc()
