"""Which traces go to Phoenix: a tail sampler over whole traces, in front of ``SpanForwarder``.

Phoenix stores spans through one bulk inserter (``benchmarks/results/phoenix_capacity.json``
measures how many per second), so forwarding everything at production rates sends it whichever
spans fit. The agent assembles whole traces and decides their review and scoring samples when
the root arrives, so it decides per trace as the OTel Collector's ``tailsamplingprocessor`` does,
policies in this order (the first that matches names the reason):

- ``review`` / ``scored``: in the review or scoring sample (the store queued an item for it);
  the review page, the golden set and the faithfulness annotations link to these;
- ``complaint``: a thumbs-down or regenerate in the trace;
- ``error``: a span with status error (``status_code`` policy);
- ``shadow``: a shadow query (``rag.shadow_of``) and, promoted, the production trace it pairs with;
- ``slow``: the root took at least ``slow_s``, or more than the running p99 of the last 1,000
  queries (``latency`` policy);
- ``budget``: the rest, while a token bucket of ``budget_spans_s`` spans/s (2 s of burst) has
  tokens (``rate_limiting``). The policies above draw on the bucket first, without waiting for
  it (it goes into debt), so the total stays near the budget unless they alone exceed it.

Late decisions. The review and scoring draws are made at assembly, so they are never late;
only feedback (a thumbs-down minutes later) and a shadow pair (the shadow replays its
production query afterwards) are. A sampled-out trace is held ``hold_s`` (within
``hold_spans``) and forwarded whole when one arrives (``late_held``); after that, it is rebuilt
from the recent-records cache (``agent/rebuild.py``; ``late_rebuilt``), which keeps the record
exactly as long as a complaint can still pull the query into review: every query the review
page or the golden set can show is in Phoenix. A hold that ends unpromoted counts the trace
``sampled_out`` (and its spans ``rag_agent_forwarded_spans_total{outcome="sampled_out"}``).

    sampler = TailSampler(forwarder.submit, ForwardPolicy(budget_spans_s=400), on_trace=..., on_spans=...)
    sampler.offer(assembly_output, written, request_spans)  # after the store kept them
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rag_monitor import semconv
from rag_monitor.agent.rebuild import spans_from_record
from rag_monitor.collectors.assembly import is_root
from rag_monitor.collectors.freshness import split_index_events
from rag_monitor.collectors.otlp import STATUS_ERROR, Span
from rag_monitor.record import QueryRecord
from rag_monitor.store.queue import DEFAULT_QUEUE

log = logging.getLogger(__name__)

COMPLAINTS = (semconv.FEEDBACK_THUMBS_DOWN, semconv.FEEDBACK_REGENERATE)
DECISION_MEMORY = 50_000
"""Trace decisions remembered (~9 MB), so late spans and feedback follow their trace; an older
trace's late spans take the budget lane."""
LATENCY_WINDOW = 1000
MIN_LATENCIES = 100
"""Queries seen before the running p99 marks any as slow (fewer: only ``slow_s`` does)."""


@dataclass(frozen=True)
class ForwardPolicy:
    budget_spans_s: float
    """0: no budget, every trace forwarded (reason ``budget``); the agent's default is measured
    (``benchmarks/phoenix_capacity.py``, ``forward_budget_spans_s``)."""
    burst_s: float = 2.0
    slow_s: float = 0.0
    hold_s: float = 60.0
    hold_spans: int = 20_000

    @classmethod
    def from_settings(cls, s) -> ForwardPolicy:
        return cls(budget_spans_s=s.forward_budget_spans_s, slow_s=s.forward_slow_s, hold_s=s.forward_hold_s,
                   hold_spans=s.forward_hold_spans)


class TokenBucket:
    def __init__(self, rate: float, burst_s: float, clock: Callable[[], float]):
        self.rate = rate
        self.capacity = max(1.0, rate * burst_s)
        self.clock = clock
        self.tokens = self.capacity
        self._at = clock()

    def take(self, n: int, force: bool = False) -> bool:
        """Take ``n`` tokens if there are (``force``: in any case, down to minus the capacity)."""
        if self.rate <= 0:
            return True
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self._at) * self.rate)
        self._at = now
        if force or self.tokens >= n:
            self.tokens = max(-self.capacity, self.tokens - n)
            return True
        return False


class RunningP99:
    """The 99th percentile of the last ``LATENCY_WINDOW`` latencies, recomputed every 100."""

    def __init__(self):
        self._window: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        self._seen = 0
        self.value = float("inf")

    def above(self, latency_s: float) -> bool:
        slow = latency_s > self.value
        self._window.append(latency_s)
        self._seen += 1
        if self._seen % 100 == 0 and len(self._window) >= MIN_LATENCIES:
            ordered = sorted(self._window)
            self.value = ordered[int(0.99 * (len(ordered) - 1))]
        return slow


def trace_latency_s(spans: Sequence[Span], record: QueryRecord | None) -> float:
    if record is not None:
        return record.duration_s
    root = next((s for s in spans if is_root(s)), None)
    start, end = (root.start_ns, root.end_ns) if root else (min(s.start_ns for s in spans), max(s.end_ns for s in spans))
    return max(0, end - start) / 1e9


class TailSampler:
    def __init__(self, submit: Callable[[Sequence[Span]], None], policy: ForwardPolicy, *,
                 on_trace: Callable[[str], None], on_spans: Callable[[str, int], None],
                 recent: Callable[[str], QueryRecord | None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.submit = submit
        self.policy = policy
        self.on_trace = on_trace
        """Counts one trace by reason (``rag_agent_forwarded_traces_total``)."""
        self.on_spans = on_spans
        """Counts spans by outcome (``rag_agent_forwarded_spans_total``): ``sampled_out`` here."""
        self.recent = recent
        """The recent-records cache (``store.recent.get``), for traces promoted after their hold."""
        self.clock = clock
        self.bucket = TokenBucket(policy.budget_spans_s, policy.burst_s, clock)
        self.p99 = RunningP99()
        self._decided: collections.OrderedDict[str, bool] = collections.OrderedDict()
        self._held: collections.OrderedDict[str, tuple[float, list[Span]]] = collections.OrderedDict()
        self._held_spans = 0
        self._lock = threading.Lock()

    # --- the pipeline's hook ----------------------------------------------------------------

    def offer(self, output: Any, written: Any, request_spans: Sequence[Span] = ()) -> None:
        """Decide the traces ``output`` completed, promote late ones, route the request's other spans.

        ``output``: the assembler's ``AssemblyOutput``; ``written``: what the store kept
        (``agent/persist.py``'s ``Written``: queued items, new late feedback with its record).
        """
        with self._lock:
            try:
                self._expire()
                queued = {item.record.trace_id: item for item in written.outcome.queued}
                records = {r.trace_id: r for r in output.records}
                completed = output.spans_by_trace
                for trace_id, spans in completed.items():
                    self._decide(trace_id, spans, records.get(trace_id), queued.get(trace_id))
                self._promote_late(written, queued, records, completed)
                self._route(request_spans, output, completed)
            except Exception:  # noqa: BLE001 - the store kept the request; forwarding must not fail it
                log.exception("tail sampling failed for a request's traces; they are not forwarded")

    # --- decisions --------------------------------------------------------------------------

    def _reason(self, spans: Sequence[Span], record: QueryRecord | None, item: Any) -> str | None:
        if item is not None:
            return "review" if item.queue == DEFAULT_QUEUE else "scored"
        if record is not None and any(f.kind in COMPLAINTS for f in record.feedback):
            return "complaint"
        if any(s.status_code == STATUS_ERROR for s in spans) or (record is not None and record.error):
            return "error"
        if record is not None and record.shadow_of:
            return "shadow"
        latency = trace_latency_s(spans, record)
        slow = self.p99.above(latency)
        if slow or (self.policy.slow_s > 0 and latency >= self.policy.slow_s):
            return "slow"
        return None

    def _decide(self, trace_id: str, spans: list[Span], record: QueryRecord | None, item: Any) -> None:
        reason = self._reason(spans, record, item)
        if reason is not None:
            self.bucket.take(len(spans), force=True)
        elif self.bucket.take(len(spans)):
            reason = "budget"
        if reason is None:
            self._remember(trace_id, False)
            self._hold(trace_id, list(spans))
            return
        self._forward(trace_id, spans, reason)

    def _forward(self, trace_id: str, spans: Sequence[Span], reason: str) -> None:
        self._remember(trace_id, True)
        self.on_trace(reason)
        self.submit(spans)

    def _remember(self, trace_id: str, forwarded: bool) -> None:
        self._decided[trace_id] = forwarded
        self._decided.move_to_end(trace_id)
        if len(self._decided) > DECISION_MEMORY:
            self._decided.popitem(last=False)

    # --- late decisions ---------------------------------------------------------------------

    def _promote_late(self, written: Any, queued: dict, records: dict, completed: dict) -> None:
        """Forward the sampled-out traces a later complaint or shadow pair asks for."""
        wanted: dict[str, QueryRecord | None] = {}
        for record, feedback in written.late:
            if record is not None and feedback.kind in COMPLAINTS:
                wanted.setdefault(record.trace_id, record)
        for trace_id, item in queued.items():
            if trace_id not in completed:  # a complaint pulled a query into review
                wanted.setdefault(trace_id, item.record)
            if item.pair_trace_id:
                wanted.setdefault(item.pair_trace_id, item.pair_record)
        for record in records.values():
            if record.shadow_of:
                wanted.setdefault(record.shadow_of, None)
        for trace_id, record in wanted.items():
            if self._decided.get(trace_id) is not True:
                self._promote(trace_id, record)

    def _promote(self, trace_id: str, record: QueryRecord | None) -> None:
        held = self._held.pop(trace_id, None)
        if held is not None:
            self._held_spans -= len(held[1])
            self.bucket.take(len(held[1]), force=True)
            self._forward(trace_id, held[1], "late_held")
            return
        if record is None and self.recent is not None:
            try:
                record = self.recent(trace_id)
            except Exception:  # noqa: BLE001 - the store's trouble must not stop ingest; counted below
                record = None
        if record is None:
            self.on_trace("late_unavailable")
            return
        spans = spans_from_record(record)
        self.bucket.take(len(spans), force=True)
        self._forward(trace_id, spans, "late_rebuilt")

    # --- the request's other spans ------------------------------------------------------------

    def _route(self, request_spans: Sequence[Span], output: Any, completed: dict) -> None:
        """Late spans and feedback follow their trace's decision; index events take the budget lane;
        spans of traces still being assembled wait (they come back whole with their trace)."""
        rest = [s for s in request_spans if s.trace_id not in completed]
        if not rest:
            return
        late_ids = {s.trace_id for s in output.late_spans} | {f.trace_id for f in output.late_feedback}
        _, _, queries = split_index_events(rest)
        query_ids = {id(s) for s in queries}
        to_send: list[Span] = []
        budget: dict[str, list[Span]] = {}
        for span in rest:
            decided = self._decided.get(span.trace_id)
            if decided is True:
                to_send.append(span)
            elif decided is False:
                held = self._held.get(span.trace_id)
                if held is not None:
                    held[1].append(span)
                    self._held_spans += 1
                else:
                    self.on_spans("sampled_out", 1)
            elif span.trace_id in late_ids or id(span) not in query_ids:
                budget.setdefault(span.trace_id, []).append(span)  # unknown here, or an index event
        if to_send:
            self.submit(to_send)
        for trace_id, spans in budget.items():
            if self.bucket.take(len(spans)):
                self._forward(trace_id, spans, "budget")
            else:
                self._remember(trace_id, False)
                self.on_trace("sampled_out")
                self.on_spans("sampled_out", len(spans))

    # --- the hold -----------------------------------------------------------------------------

    def _hold(self, trace_id: str, spans: list[Span]) -> None:
        self._held[trace_id] = (self.clock(), spans)
        self._held_spans += len(spans)
        while self._held_spans > self.policy.hold_spans and self._held:
            self._release_oldest()

    def _expire(self) -> None:
        deadline = self.clock() - self.policy.hold_s
        while self._held and next(iter(self._held.values()))[0] <= deadline:
            self._release_oldest()

    def _release_oldest(self) -> None:
        _, (_, spans) = self._held.popitem(last=False)
        self._held_spans -= len(spans)
        self.on_trace("sampled_out")
        self.on_spans("sampled_out", len(spans))

    def held_spans(self) -> int:
        return self._held_spans
