"""What the ingest pipeline keeps of one request, as one store transaction.

From an assembly output (and the request's spans) to an ``IngestBatch``: records for the
recent-records cache, feedback, review items (first decisions, and complaints that arrive later
raising an item's inclusion probability under the sampler's single-draw design), shadow pairs
stored whole, release sightings, and the spans of traces still waiting for their root.

    writer = IngestWriter(store, sampler, releases, limits)
    with store.ingest.transaction() as conn:          # one transaction per group of requests
        taken, stored = writer.take_stored_spans(conn, request_spans)   # spans other requests left pending
        spans = writer.with_stored_spans(request_spans, stored)
        written = writer.write(assembler.add(spans), request_spans, conn=conn, taken=taken)
    writer.committed(written)                        # after the commit: the releases it saw first
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag_monitor.agent.releases import ReleaseLabels
from rag_monitor.collectors.assembly import is_root
from rag_monitor.collectors.dialects import lost_root
from rag_monitor.collectors.otlp import CONTENT_TYPE_PROTOBUF, Span, decode_export_request, encode_export_request
from rag_monitor.record import Feedback, QueryRecord
from rag_monitor.review.sampler import LATE_STRATA, STRATUM_BASE, Sampler, ScoreRate
from rag_monitor.store import FeedbackEvent, IngestBatch, IngestOutcome, QueueWrite, Store
from rag_monitor.store.queue import SCORE_QUEUE

log = logging.getLogger(__name__)


@dataclass
class Written:
    """What a write kept: the records to count, late feedback with its query, the store's outcome."""

    records: list[QueryRecord] = field(default_factory=list)
    late: list[tuple[QueryRecord | None, Feedback]] = field(default_factory=list)
    outcome: IngestOutcome = field(default_factory=IngestOutcome)
    pull_expired: int = 0
    """Thumbs-down and follow-ups for queries no longer in the recent-records cache."""


class IngestWriter:
    def __init__(self, store: Store, sampler: Sampler, releases: ReleaseLabels, limits):
        self.store = store
        self.sampler = sampler
        self.releases = releases
        self.limits = limits
        self.score_rate = ScoreRate(sampler.config)

    # --- pending spans ------------------------------------------------------------------------

    def take_stored_spans(self, conn, spans: Sequence[Span]) -> tuple[set[str], dict[str, list[Span]]]:
        """The traces whose root is among ``spans``, and their stored pending spans per trace,
        taken (read and deleted: one statement) inside the group's transaction ``conn``.

        Any replica may have acknowledged (and stored) a trace's earlier spans, or this agent
        before a crash: the trace is assembled whole here. The assembler drops span ids it holds.
        If the transaction fails, the deletion is rolled back with it: the spans stay stored.
        """
        roots = {span.trace_id for span in spans if is_root(span)}
        stored = self.store.ingest.take_pending_in(conn, roots) if roots else {}
        return roots, {trace_id: [span for blob in blobs
                                  for span in decode_export_request(blob, CONTENT_TYPE_PROTOBUF, limits=self.limits).spans]
                       for trace_id, blobs in stored.items()}

    def with_stored_spans(self, spans: Sequence[Span], stored: dict[str, list[Span]]) -> list[Span]:
        """``spans`` plus the stored pending spans of the traces whose root is among them.

        ``stored``: ``take_stored_spans`` of a group of requests; the spans of a trace go to the
        first request with its root (taken out of ``stored``), as if the requests came one by one.
        """
        if not stored:
            return list(spans)
        roots = {span.trace_id for span in spans if is_root(span)}
        earlier: list[Span] = []
        for trace_id in [t for t in stored if t in roots]:
            earlier.extend(stored.pop(trace_id))
        return earlier + list(spans)

    def _pending_rows(self, output, request_spans: Sequence[Span]) -> list[tuple[str, bytes]]:
        """The request's spans of traces that are still incomplete, one protobuf per trace."""
        done = set(output.spans_by_trace)
        done.update(late.trace_id for late in output.late_feedback)
        done.update(span.trace_id for span in output.late_spans)
        waiting: dict[str, list[Span]] = {}
        for span in request_spans:
            if span.trace_id not in done:
                waiting.setdefault(span.trace_id, []).append(span)
        return [(trace_id, encode_export_request(group)) for trace_id, group in waiting.items()]

    # --- one transaction ------------------------------------------------------------------------

    def write(self, output, request_spans: Sequence[Span] = (), *, expiring: bool = False, now: float | None = None,
              conn=None, taken: set[str] = frozenset()) -> Written:
        """Persist ``output`` (and the request's still-pending spans) in one transaction: its own,
        or the caller's ``conn`` (then the caller calls ``committed`` once it has committed).

        ``expiring``: the traces timed out here; each is kept only if this replica claims its
        stored spans (another replica that received the root has assembled it already).
        ``taken``: traces whose stored spans ``take_stored_spans`` deleted in ``conn`` already.
        """
        records = output.records
        batch = IngestBatch(records=list(records), completed=list(output.spans_by_trace),
                            pending=self._pending_rows(output, request_spans), taken=set(taken))
        if expiring:
            batch.claim_required = set(batch.completed)
        batch.feedback = [FeedbackEvent.from_feedback(r.trace_id, f) for r in records for f in r.feedback]
        batch.feedback += [FeedbackEvent.from_feedback(late.trace_id, late.feedback) for late in output.late_feedback]
        batch.releases = self.releases.unnoted((r.service, r.release) for r in records)
        batch.known_queries = {r.trace_id for r in records}
        by_trace = {r.trace_id: r for r in records}
        rate = self.score_rate.observe(len(records)) if records else 0.0
        for record in records:
            decision = self.sampler.decide(record)
            score_p = self.sampler.score_probability(record, decision, rate)
            if decision is not None:
                # The weighted faithfulness counters count the scored sample: weight 1 / score_p.
                batch.items.append(QueueWrite(
                    record, decision.stratum, decision.probability, pair_trace_id=decision.pair_trace_id,
                    pair_record=self._production_half(record, by_trace), score_prob=score_p,
                    counted_weight=1.0 / score_p,
                ))
            elif score_p is not None:
                batch.items.append(QueueWrite(record, STRATUM_BASE, score_p, score_prob=score_p, queue=SCORE_QUEUE))
            if self.sampler.may_pair(record):
                batch.pair_halves.append(record)  # a shadow item queued before its production half
        written = Written()
        for late in output.late_feedback:
            record, item = self._late_feedback(late.trace_id, late.feedback, now)
            written.late.append((record, late.feedback))
            if record is not None:
                batch.known_queries.add(late.trace_id)
            if item is not None:
                batch.items.append(item)
            elif record is None and late.feedback.kind in LATE_STRATA:
                written.pull_expired += 1
        written.outcome = self.store.ingest.persist(batch, now=now, conn=conn)
        # Late feedback counts once: a resent event (a retry after a lost acknowledgement) is not new.
        new = {(e.trace_id, e.key) for e in written.outcome.feedback_added}
        events = [FeedbackEvent.from_feedback(late.trace_id, late.feedback) for late in output.late_feedback]
        # Each new event once, though a request may carry the same span twice (a duplicate within a batch).
        kept = []
        for pair, e in zip(written.late, events):
            if (e.trace_id, e.key) in new:
                new.remove((e.trace_id, e.key))
                kept.append(pair)
        written.late = kept
        if conn is None:
            self.committed(written)
        skipped = written.outcome.skipped
        # Counted once: a trace whose record was stored already (an exporter's retry, on this
        # replica or another) is not counted, scored for drift or checked for re-asks again.
        not_new = skipped | written.outcome.duplicates
        written.records = [r for r in records if r.trace_id not in not_new] if not_new else list(records)
        # A rootless trace another replica completed is not a partial trace either.
        output.partial_traces -= sum(1 for t in skipped if lost_root(output.spans_by_trace[t]))
        return written

    def committed(self, written: Written) -> None:
        """Once ``written``'s transaction has committed: the releases it saw first are noted."""
        if written.outcome.first_seen:
            self.releases.noted(written.outcome.first_seen)
            self.releases.refresh(self.store.releases)

    def _production_half(self, record: QueryRecord, batch_records: dict[str, QueryRecord]) -> QueryRecord | None:
        if not record.shadow_of:
            return None
        return batch_records.get(record.shadow_of) or self.store.recent.get(record.shadow_of)

    def _late_feedback(self, trace_id: str, feedback: Feedback, now: float | None = None) -> tuple[QueryRecord | None, QueueWrite | None]:
        """The query of late feedback; a thumbs-down or a follow-up raises its inclusion probability.

        Only while the query is in the recent-records cache: a complaint after that changes
        nothing, for sampled and unsampled queries alike, so the design stays one the estimates
        can weight exactly. A query the complaint pulls in adds 0 to the weighted counters (they
        already counted the draw that missed it); a queued one keeps what it added.
        """
        record = self.store.recent.get(trace_id, live=True, now=now)
        if feedback.kind not in LATE_STRATA or record is None:
            return record, None
        record.feedback.append(feedback)
        decision = self.sampler.decide(record)  # its strata now include the feedback's
        if decision is None:
            return record, None
        score_p = self.sampler.score_probability(record, decision, self.score_rate.observe(0))
        return record, QueueWrite(record, decision.stratum, decision.probability, counted_weight=0.0,
                                  pair_trace_id=decision.pair_trace_id, pair_record=self._production_half(record, {}),
                                  score_prob=score_p)
