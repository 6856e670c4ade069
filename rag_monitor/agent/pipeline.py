"""The ingest pipeline (the OTLP receiver's work): one OTLP request in, records stored, then fanned out.

    decode -> redact spans -> index events (store) -> assemble traces -> store (recent records,
    review queue, feedback) -> fan-out to the sinks (metrics, regeneration, freshness, drift feed;
    the request's spans to the forwarder), each behind its own bounded queue (``agent/sinks.py``)

Order matters for "nothing acknowledged is lost": the store is written on the request path,
before anything is fanned out, in one transaction per group of concurrent requests (group commit:
``IngestPipeline.ingest``; ``agent/persist.py``) that also takes the stored spans of the traces
whose root the group brings (``store/ingest.py``), spans of traces still waiting for their root
included; when it fails the traces completed by this request
are handed back to the assembler's pending state, so the exporter's retry (after our 503)
assembles them again instead of being counted as late spans. That write also decides "counted
once": only the records it stored first reach the sinks. The request-level counters (decode,
redaction, assembly drops, duplicates, the review sample) stay on the request path: a few
increments, and they describe the request itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rag_monitor.agent.component import Component
from rag_monitor.agent.freshness import FreshnessTracker
from rag_monitor.agent.observe import QueryObserver
from rag_monitor.agent.persist import IngestWriter
from rag_monitor.agent.sinks import FanOut, IngestBatch, RequestSpans
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors.assembly import AssemblyOutput, LateFeedback, TraceAssembler
from rag_monitor.collectors.otlp import DecodeResult, Span, decode_export_request
from rag_monitor.collectors.redaction import Redactor
from rag_monitor.record import Feedback
from rag_monitor.review.sampler import Sampler
from rag_monitor.store import Store, StoreUnavailable
from rag_monitor.store.queue import DEFAULT_QUEUE

ORPHAN_AGE_S = 3600.0
"""Pending spans stored this long ago belong to a replica that died: no root will claim them."""

@dataclass
class IngestResult:
    """What the receiver answers: accepted spans, and the OTLP partial-success fields."""

    accepted_spans: int
    rejected_spans: int = 0
    error_message: str = ""
    records: int = 0


MAX_GROUP_REQUESTS = 64
"""At most this many requests in one transaction (its size, and the time its lock is held, stay bounded)."""


@dataclass(eq=False)
class _Request:
    """One request in line for a group commit; the leader that writes it sets its answer."""

    decoded: DecodeResult
    query_spans: list[Span] = field(default_factory=list)
    output: AssemblyOutput | None = None
    result: IngestResult | None = None
    error: BaseException | None = None
    done: bool = False

    @property
    def spans(self) -> list[Span]:
        return self.decoded.spans

    def finish(self, result: IngestResult | None = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True


class IngestPipeline(Component):
    """The ``receiver`` component: healthy while started (the store's health is the store's)."""

    def __init__(
        self,
        *,
        store: Store,
        metrics: AgentMetrics,
        observer: QueryObserver,
        freshness: FreshnessTracker | None = None,
        assembler: TraceAssembler,
        redactor: Redactor,
        sampler: Sampler,
        limits,
        sinks: FanOut | None = None,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__("receiver", {"max_body_bytes": limits.max_body_bytes,
                                      "max_pending_traces": limits.max_pending_traces,
                                      "root_timeout_s": limits.root_timeout_s})
        self.store = store
        self.metrics = metrics
        self.observer = observer
        self.freshness = freshness
        """Takes the index events out of each request (into the store, on the request path)."""
        self.assembler = assembler
        self.redactor = redactor
        self.sampler = sampler
        self.limits = limits
        self.sinks = sinks if sinks is not None else FanOut()
        """Where stored records and forwarded spans go (``agent/sinks.py``)."""
        self.clock = clock
        self.writer = IngestWriter(store, sampler, observer.releases, limits)
        # The assembler is stateful: one group of requests at a time (the regeneration check runs on its job).
        self._lock = threading.Lock()
        self._waiting: list[_Request] = []
        """Requests decoded and redacted, waiting for the next group commit."""
        self._waiting_lock = threading.Lock()

    # --- the request path -----------------------------------------------------------------

    def ingest(self, body: bytes, content_type: str, content_encoding: str | None = None) -> IngestResult:
        """Decode and process one OTLP export request; raises ``OTLPDecodeError`` or ``StoreUnavailable``.

        Group commit: the request waits in line; whoever holds the lock next writes every request
        waiting then in one store transaction (``_commit_group``), each still answered on its own.
        """
        m = self.metrics
        decoded = decode_export_request(body, content_type, content_encoding, limits=self.limits)
        self._count_decode(decoded)
        redactions = self.redactor.redact_spans(decoded.spans)  # before anything is stored or forwarded
        for kind, n in redactions.items():
            m.pii_redactions.labels(kind).inc(n)
        request = _Request(decoded)
        with self._waiting_lock:
            self._waiting.append(request)
        with self._lock:
            while not request.done:  # a leader before us may have written it already
                with self._waiting_lock:
                    group, self._waiting = self._waiting[:MAX_GROUP_REQUESTS], self._waiting[MAX_GROUP_REQUESTS:]
                self._commit_group(group)
        if request.error is not None:
            raise request.error
        return request.result

    def _commit_group(self, group: list[_Request]) -> None:
        """Assemble ``group``'s requests in arrival order, write them in one transaction, answer each.

        Counted as the requests one by one would be: a store failure fails every request of the
        group (each its 503, its traces reopened for the exporter's retry) with no metric moved.
        """
        m = self.metrics
        try:
            live: list[_Request] = []
            for request in group:
                try:
                    # Index events are not queries: into the store first, the rest to assembly.
                    request.query_spans = (self.freshness.take_events(request.spans)
                                           if self.freshness is not None else request.spans)
                    live.append(request)
                except StoreUnavailable as exc:
                    m.store_errors.labels("ingest").inc()
                    request.finish(error=exc)
            if not live:
                return
            combined, group_spans = AssemblyOutput(), []
            try:
                # One transaction: take the stored spans of the group's roots, assemble, write.
                with self.metrics.store_latency.labels("ingest").time(), self.store.ingest.transaction() as conn:
                    taken, stored = self.writer.take_stored_spans(conn, [span for r in live for span in r.query_spans])
                    for request in live:
                        request.output = self.assembler.add(self.writer.with_stored_spans(request.query_spans, stored))
                        combined.merge(request.output)
                        group_spans.extend(request.query_spans)
                    written = self.writer.write(combined, group_spans, now=self.clock(), conn=conn, taken=taken)
            except StoreUnavailable as exc:
                for request in live:
                    if request.output is not None:  # assembled before the failure: its traces reopen
                        self.assembler.reopen(request.output, resent=request.query_spans)
                    m.store_errors.labels("ingest").inc()
                    request.finish(error=exc)
                return
            self.writer.committed(written)
            self._count_written(combined, written)
            for request in live:
                m.spans_received.inc(len(request.spans))
            m.traces_pending.set(self.assembler.pending_traces)
            self.sinks.spans(RequestSpans([span for r in live for span in r.spans], combined, written))
            for request in live:
                request.finish(result=self._result(request))
        except Exception as exc:  # noqa: BLE001 - an unexpected error: each request of the group raises it
            for request in group:
                if not request.done:
                    request.finish(error=exc)

    def _result(self, request: _Request) -> IngestResult:
        decoded, output = request.decoded, request.output
        too_large = output.dropped_spans.get("trace_too_large", 0)
        if too_large:  # the exporter learns what was not kept (OTLP partial success)
            decoded.reject(f"trace over max_spans_per_trace ({self.assembler.max_spans_per_trace} spans)", too_large)
        return IngestResult(
            accepted_spans=len(request.spans) - too_large,
            rejected_spans=decoded.rejected_spans,
            error_message=decoded.error_message or "",
            records=len(output.records),
        )

    def add_follow_ups(self, found: list[tuple[str, Feedback]]) -> None:
        """Detected follow-ups (``(doubted trace id, feedback)``), stored and counted as the app's
        own ``follow_up`` feedback arriving late: the doubted query enters the follow-up stratum."""
        output = AssemblyOutput(late_feedback=[LateFeedback(trace_id, feedback, True) for trace_id, feedback in found])
        with self._lock:
            try:
                self._process(output)
            except StoreUnavailable:
                self.metrics.store_errors.labels("follow_up").inc()
                raise

    def expire(self) -> None:
        """Assemble or drop traces whose root never came (called periodically); counted by reason."""
        with self._lock:
            output = self.assembler.expire()
            try:
                written = self._process(output, expiring=True)
                self.sinks.spans(RequestSpans([], output, written))  # traces completed by their root's timeout
            except StoreUnavailable:
                self.assembler.reopen(output)
                self.metrics.store_errors.labels("expire").inc()
            self.metrics.traces_pending.set(self.assembler.pending_traces)
        try:
            self.observer.releases.refresh(self.store.releases)  # releases another replica saw first
            self.store.ingest.prune_pending(self.clock() - max(ORPHAN_AGE_S, 10 * self.limits.root_timeout_s))
        except StoreUnavailable:
            self.metrics.store_errors.labels("expire").inc()

    def _process(self, output, request_spans=(), expiring: bool = False):
        """Persist, then count: metrics only move once the store has what they describe."""
        with self.metrics.store_latency.labels("ingest").time():
            written = self.writer.write(output, request_spans, expiring=expiring, now=self.clock())
        self._count_written(output, written)
        return written

    def _count_written(self, output, written):
        """After the commit: count what ``written`` kept and hand its records to the sinks."""
        for item in written.outcome.queued:
            if item.queue == DEFAULT_QUEUE:  # the review sample; the scored-only rest is the scorer's
                self.metrics.sampled.labels(item.stratum).inc()
        if written.outcome.duplicates:
            self.metrics.traces_duplicate.inc(len(written.outcome.duplicates))
        if written.pull_expired:
            self.metrics.review_pull_expired.inc(written.pull_expired)
        self._count_assembly(output)
        # In the order the queries started: inferred regenerations compare a session's queries in
        # time, and a request's spans come grouped by resource and scope, not by time.
        batch = IngestBatch(records=sorted(written.records, key=lambda r: r.start_ns), late=list(written.late))
        if written.outcome.regenerated:  # explicit regenerates that claimed their query first
            known = {r.trace_id: r for r in written.records} | {r.trace_id: r for r, _ in written.late if r is not None}
            batch.regenerated = [known.get(trace_id) for trace_id in sorted(written.outcome.regenerated)]
        self.sinks.records(batch)

    # --- counting ---------------------------------------------------------------------------

    def _count_decode(self, decoded: DecodeResult) -> None:
        m = self.metrics
        if decoded.rejected_spans:
            m.spans_dropped.labels("invalid").inc(decoded.rejected_spans)
        if decoded.truncated_attributes:
            m.attributes_truncated.inc(decoded.truncated_attributes)
        if decoded.rejected_embeddings:
            m.embeddings_rejected.labels("not_finite").inc(decoded.rejected_embeddings)

    def _count_assembly(self, output) -> None:
        m = self.metrics
        for reason, n in output.dropped_spans.items():
            m.spans_dropped.labels(reason).inc(n)
        for reason, n in output.dropped_traces.items():
            m.traces_dropped.labels(reason).inc(n)
        if output.rejected_embeddings:
            m.embeddings_rejected.labels("wrong_dimension").inc(output.rejected_embeddings)
        if output.partial_traces:
            m.traces_partial.inc(output.partial_traces)
