"""The ingest pipeline: one OTLP request in, records kept, metrics updated, spans forwarded.

    decode -> redact spans -> assemble traces -> store (recent records, review queue, feedback)
           -> metrics -> forward to Phoenix

Order matters for "nothing acknowledged is lost": the store is written before metrics and
forwarding, and when it fails the traces completed by this request are handed back to the
assembler's pending state, so the exporter's retry (after our 503) assembles them again
instead of being counted as late spans.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_monitor import semconv
from rag_monitor.agent.observe import QueryObserver, RegenerationDetector
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors.assembly import TraceAssembler
from rag_monitor.collectors.otlp import DecodeResult, decode_export_request
from rag_monitor.collectors.redaction import Redactor
from rag_monitor.record import Feedback, QueryRecord
from rag_monitor.review.sampler import Sampler
from rag_monitor.store import FeedbackEvent, Store, StoreUnavailable

@dataclass
class IngestResult:
    """What the receiver answers: accepted spans, and the OTLP partial-success fields."""

    accepted_spans: int
    rejected_spans: int = 0
    error_message: str = ""
    records: int = 0


class IngestPipeline:
    def __init__(
        self,
        *,
        store: Store,
        metrics: AgentMetrics,
        observer: QueryObserver,
        regeneration: RegenerationDetector | None,
        assembler: TraceAssembler,
        redactor: Redactor,
        sampler: Sampler,
        limits,
        forward: Callable[[Sequence], None] | None = None,
        on_records: Callable[[list[QueryRecord]], None] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.metrics = metrics
        self.observer = observer
        self.regeneration = regeneration
        self.assembler = assembler
        self.redactor = redactor
        self.sampler = sampler
        self.limits = limits
        self.forward = forward
        self.on_records = on_records
        """Called with every batch of kept records (the drift feed's O(1) offer)."""
        self.clock = clock
        # The assembler's pending state and the store write move together (a failed write hands the
        # traces back): one request at a time in there. Decoding, redaction, metrics and the O(1)
        # hand-offs to regeneration, drift and forwarding (their store and network work runs on
        # the scheduler's jobs) happen outside it, concurrently.
        self._lock = threading.Lock()

    # --- the request path -----------------------------------------------------------------

    def ingest(self, body: bytes, content_type: str, content_encoding: str | None = None) -> IngestResult:
        """Decode and process one OTLP export request; raises ``OTLPDecodeError`` or ``StoreUnavailable``."""
        m = self.metrics
        decoded = decode_export_request(body, content_type, content_encoding, limits=self.limits)
        self._count_decode(decoded)
        spans = decoded.spans
        redactions = self.redactor.redact_spans(spans)  # before anything is stored or forwarded
        for kind, n in redactions.items():
            m.pii_redactions.labels(kind).inc(n)

        with self._lock:
            output = self.assembler.add(spans)
            try:
                late = self._persist(output.records, output.late_feedback)
            except StoreUnavailable:
                self.assembler.reopen(output, resent=spans)
                m.store_errors.labels("ingest").inc()
                raise
        self._observe(output, late)
        m.spans_received.inc(len(spans))
        m.traces_pending.set(self.assembler.pending_traces)
        if self.forward is not None:
            self.forward(spans)
        too_large = output.dropped_spans.get("trace_too_large", 0)
        if too_large:  # the exporter learns what was not kept (OTLP partial success)
            decoded.reject(f"trace over max_spans_per_trace ({self.assembler.max_spans_per_trace} spans)", too_large)
        return IngestResult(
            accepted_spans=len(spans) - too_large,
            rejected_spans=decoded.rejected_spans,
            error_message=decoded.error_message or "",
            records=len(output.records),
        )

    def expire(self) -> None:
        """Assemble or drop traces whose root never came (called periodically); counted by reason."""
        with self._lock:
            output = self.assembler.expire()
            try:
                late = self._persist(output.records, output.late_feedback)
            except StoreUnavailable:
                self.assembler.reopen(output)
                self.metrics.store_errors.labels("expire").inc()
                return
            finally:
                self.metrics.traces_pending.set(self.assembler.pending_traces)
        self._observe(output, late)

    def _observe(self, output, late) -> None:
        """Count what was persisted: metrics only move once the store has what they describe."""
        self._count_assembly(output)
        for record in output.records:
            self.observer.observe(record)
        if self.regeneration is not None:
            self.regeneration.offer(output.records, self.observer.labels_of)
        for record, feedback in late:
            self.observer.observe_feedback(record, feedback)
        if output.records and self.on_records is not None:
            self.on_records(output.records)

    # --- persistence ----------------------------------------------------------------------

    def _persist(self, records: list[QueryRecord], late_feedback: list) -> list[tuple[QueryRecord | None, Feedback]]:
        """Write what must survive a crash; returns late feedback with its query, for metrics."""
        now = self.clock()
        items = []
        for record in records:
            decision = self.sampler.decide(record)
            if decision is not None:
                items.append((record, decision))
        feedback_rows = [FeedbackEvent.from_feedback(r.trace_id, f) for r in records for f in r.feedback]
        feedback_rows += [FeedbackEvent.from_feedback(late.trace_id, late.feedback) for late in late_feedback]
        with self.metrics.store_latency.labels("ingest").time():
            if records:
                self.store.put_recent(records, now=now)
                for service, release in {(r.service, r.release) for r in records if r.release}:
                    if not self.observer.known_release(service, release):
                        self.observer.note_release(service, release, self.store.note_release(service, release, now))
            if feedback_rows:
                self.store.add_feedback(feedback_rows)
            late_with_records = []
            for late in late_feedback:
                record, item = self._late_feedback(late.trace_id, late.feedback)
                late_with_records.append((record, late.feedback))
                if item is not None:
                    items.append(item)
            for record, decision in items:
                if self.store.enqueue(record, stratum=decision.stratum, inclusion_prob=decision.probability,
                                      pair_trace_id=decision.pair_trace_id):
                    self.metrics.sampled.labels(decision.stratum).inc()
        return late_with_records

    def _late_feedback(self, trace_id: str, feedback: Feedback):
        """The query of late feedback; a thumbs-down pulls it from the recent-records cache."""
        record = self.store.get_recent(trace_id)
        if feedback.kind != semconv.FEEDBACK_THUMBS_DOWN:
            return record, None
        if record is None:
            self.metrics.review_pull_expired.inc()
            return None, None
        record.feedback.append(feedback)
        decision = self.sampler.decide(record, thumbs_down=True)
        return record, ((record, decision) if decision else None)

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
