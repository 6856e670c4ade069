"""Faithfulness scoring of the review sample, off the request path.

A background tick takes sampled items that have no score from this scorer yet (the store's
backlog, so a crash mid-batch is redone on restart, and the upsert keeps it from doubling),
scores them in length-bucketed batches, stores the scores, updates the weighted metrics and
annotates the query's root span in Phoenix. Every metric carries the scorer's name: HHEM and the
lexical fallback never mix on a dashboard.

One replica scores at a time: it holds a lease in the store, renewed before every chunk, and
each score write carries the lease's fencing token, checked in the write's transaction. A
replica that stalled past its lease (a long HHEM batch, a paused VM) finds its token stale, writes
nothing and counts nothing: the replica that took the lease over scores those answers once.

Not every answer is scored. Hidden content (``record.hidden`` names the answer or the
documents) gets the verdict ``not_scored``, and an answer with no delivered context
``no_context``: both are counted apart, never as supported or unsupported. The weighted
counters add each item's ``counted_weight`` (see ``ReviewQueue.enqueue``).

The scored sample is larger than the review sample (``score_rate``, the review sample a
subsample of it). Each scored answer's weight and the scorer's probability that it is
unsupported (``1 - score``) go into the store's running sums per release and variant, in the
same fenced write: the prediction-powered rate (``review/faithfulness.py``) reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.estimators import ScoredSums
from rag_monitor.faithfulness.claims import claims_json, explanation
from rag_monitor.faithfulness.worker import (
    STATUS_NO_CLAIMS,
    STATUS_REFUSED,
    STATUS_SCORED,
    FaithfulnessWorker,
    Pair,
)
from rag_monitor.faithfulness.worker import Score as WorkerScore
from rag_monitor.review.shadow import pair_half_scorer
from rag_monitor.store import Score as StoredScore

log = logging.getLogger(__name__)

ANNOTATE_TIMEOUT_S = 5.0
MODEL_SCORERS = ("hhem", "llm-judge", "lettucedetect")
"""Scorers that are models (Phoenix's annotator kind ``LLM``); the rest are code."""


VERDICT_NOT_SCORED = "not_scored"
"""The answer or its documents were hidden at the source: nothing to check, never scored."""
VERDICT_NO_CONTEXT = "no_context"
"""No context was delivered to the generator: nothing to check the answer against."""
_HIDDEN_FROM_SCORING = frozenset({"answer", "documents"})


def unscorable(record) -> str | None:
    """The verdict of an answer that must not reach the scorer, or None."""
    if _HIDDEN_FROM_SCORING & set(record.hidden):
        return VERDICT_NOT_SCORED
    if not record.refused and not any(d.content and d.content.strip() for d in record.delivered):
        return VERDICT_NO_CONTEXT
    return None


def unsupported_probability(value: float) -> float:
    """The scorer's probability that an answer is unsupported (scores are 1 = supported)."""
    return 1.0 - value


def scored_sums(scores, records: dict) -> dict[tuple[str, str], ScoredSums]:
    """The scored sample's sums of a chunk, per (release, variant) as recorded (folded when read)."""
    out: dict[tuple[str, str], ScoredSums] = {}
    for s in scores:
        if s.value is None or verdict_of(s) not in ("supported", "unsupported"):
            continue
        record = records[s.key]
        key = (record.release or "unknown", record.variant or "production")
        add = ScoredSums.of([unsupported_probability(s.value)], [s.weight])
        out[key] = out[key] + add if key in out else add
    return out


def verdict_of(score) -> str:
    """supported / unsupported for scored answers; refusals, claim-less, hidden and context-less answers apart."""
    if score.status in (VERDICT_NOT_SCORED, VERDICT_NO_CONTEXT):
        return score.status
    if score.status == STATUS_SCORED:
        return "unsupported" if score.unsupported else "supported"
    if score.status == STATUS_REFUSED:
        return "refused"
    if score.status == STATUS_NO_CLAIMS:
        return "no_claims"
    return "error"


class ScoringLoop:
    def __init__(
        self,
        store,
        worker: FaithfulnessWorker,
        metrics: AgentMetrics,
        labels_of: Callable,
        annotate: Callable[[str, object], None] | None = None,
        batch: int = 64,
        holder: str = "agent",
        lease_s: float = 300.0,
        chunk: int = 16,
        clock: Callable[[], float] | None = None,
        threshold_source: str = "shipped",
    ):
        self.store = store
        self.holder = holder
        self.lease_s = lease_s
        """One replica scores at a time (a fenced lease in the shared store), so no answer is counted twice."""
        self.lock_name = f"scoring:{worker.scorer.name}"
        self.worker = worker
        self.scorer = worker.scorer
        self.metrics = metrics
        self.labels_of = labels_of
        """``labels_of(record) -> (release, variant)``, the same folding as the query metrics."""
        self.annotate = annotate
        self.batch = batch
        self.chunk = chunk
        """Items scored between two lease renewals."""
        self.clock = clock
        self.fenced = 0
        """Chunks whose scores were refused because another replica took the lease over."""
        self._info: tuple[str, ...] = ()
        self.set_threshold(self.scorer.threshold, source=threshold_source)

    def set_threshold(self, threshold: float, *, source: str) -> None:
        """Flag answers below ``threshold`` from the next batch on; ``rag_scorer_info`` says which and
        where it came from (shipped, setting, calibrated)."""
        self.scorer.threshold = float(threshold)
        if self._info:
            self.metrics.scorer_info.remove(*self._info)
        self._info = (self.scorer.name, self.scorer.version, f"{self.scorer.threshold:g}", source)
        self.metrics.scorer_info.labels(*self._info).set(1)

    def _now(self) -> float | None:
        return self.clock() if self.clock is not None else None

    def tick(self) -> int:
        """Score one batch of the backlog; returns how many items were scored and counted."""
        token = self.store.locks.acquire(self.lock_name, self.holder, self.lease_s, now=self._now())
        if token is None:
            return 0  # another replica holds the scoring lease
        items = self.store.scores.unscored_items(self.scorer.name, limit=self.batch)
        done = 0
        annotations: list[tuple[dict, list]] = []
        complete = True
        for start in range(0, len(items), self.chunk):
            if start:  # renew per chunk; a token that moved by more than our own takeover means another scorer
                renewed = self.store.locks.acquire(self.lock_name, self.holder, self.lease_s, now=self._now())
                if renewed is None or renewed > token + 1:
                    complete = False
                    break
                token = renewed
            counted = self._score_chunk(items[start:start + self.chunk], token, annotations)
            if counted is None:
                complete = False
                break
            done += counted
        # Once a tick, after its scores. Every unscored item up to the last one handed out is
        # scored now: what is left are the items queued after it (an index range). Otherwise the
        # backlog's anti-join against the scores (O(backlog) each time).
        self.metrics.scorer_backlog.set(self.store.scores.queued_after(max(item.id for item in items))
                                        if items and complete else self.store.scores.backlog(self.scorer.name))
        if self.annotate is not None and annotations:
            # After every chunk's metrics: a slow Phoenix must not hold them up, and a hanging one
            # costs one timeout per tick, not one per chunk.
            self._annotate({k: r for records, _ in annotations for k, r in records.items()},
                           [s for _, scores in annotations for s in scores])
        return done

    def _score_chunk(self, items: list, token: int, annotations: list) -> int | None:
        """Score, write under the fence, then count; None when the fence refused the write.

        The written scores are appended to ``annotations`` for Phoenix, annotated once the tick is done."""
        records = {item.trace_id: item.query_record for item in items}
        weights = {item.trace_id: item.counted_weight for item in items}
        # A shadow pair's production half is scored beside it for the shadow report, stored under
        # its own scorer name: it was not sampled in its own right, so no metric counts it.
        halves = {item.pair_trace_id: item.paired_record for item in items
                  if item.pair_record is not None and item.pair_trace_id not in records}
        weights.update(dict.fromkeys(halves, 0.0))
        scores, pairs = [], []
        for trace_id, record in [*records.items(), *halves.items()]:
            verdict = unscorable(record)
            if verdict is not None:
                scores.append(WorkerScore(trace_id, None, verdict, self.scorer.name, self.scorer.version,
                                          weight=weights[trace_id], threshold=self.scorer.threshold))
            else:
                pairs.append(Pair(key=trace_id, contexts=[d.content for d in record.delivered], answer=record.answer,
                                  refused=record.refused, weight=weights[trace_id], question=record.query or None))
        scores += self.worker.score_pairs(pairs)
        written = self.store.scores.upsert(
            (StoredScore(s.key, pair_half_scorer(s.scorer) if s.key in halves else s.scorer, s.value, s.scorer_version,
                         label=verdict_of(s), threshold=s.threshold, claims=claims_json(s.claims)) for s in scores),
            fence=(self.lock_name, self.holder, token), now=self._now(),
            sums=(self.scorer.name, scored_sums([s for s in scores if s.key not in halves], records)),
        )
        if written < 0:
            self.fenced += 1
            log.warning("scoring lease lost mid-batch: %d scores discarded, the new holder scores them", len(scores))
            return None
        m = self.metrics
        scores = [s for s in scores if s.key not in halves]
        for s in scores:
            release, variant = self.labels_of(records[s.key])
            verdict = verdict_of(s)
            m.faithfulness_scored.labels(release, variant, s.scorer, verdict).inc()
            m.faithfulness_weighted.labels(release, variant, s.scorer, verdict).inc(s.weight)
            if s.value is not None:
                m.faithfulness_score.labels(release, variant, s.scorer).observe(s.value)
        annotations.append((records, scores))
        return len(scores)

    def _annotate(self, records: dict, scores: list) -> None:
        for done, s in enumerate(scores):
            try:
                self.annotate(records[s.key].root_span_id, s)
            except Exception as exc:  # noqa: BLE001 - Phoenix being down must not stop scoring
                # Down or hanging: one timeout per batch, not one per score; the rest are skipped, counted.
                self.metrics.forwarded_spans.labels("annotation_failed").inc(len(scores) - done)
                log.debug("could not annotate %s in Phoenix: %s", s.key, exc)
                return


def judge_metrics(metrics: AgentMetrics) -> Callable[[object], None]:
    """The LLM judge's ``on_call``: its latency, tokens and cost as the agent's metrics."""

    def on_call(call) -> None:
        metrics.judge_requests.labels(call.outcome).inc()
        metrics.judge_latency.labels(call.outcome).observe(call.latency_s)
        metrics.judge_tokens.labels("input").inc(call.input_tokens)
        metrics.judge_tokens.labels("output").inc(call.output_tokens)
        metrics.judge_cost.inc(call.cost_usd)

    return on_call


def annotation_spans(claims) -> dict:
    """A span scorer's flagged spans as annotation metadata (offsets in the answer, text, probability)."""
    spans = [{"start": c.start, "end": c.end, "text": c.text, "score": c.score} for c in claims if c.start is not None]
    return {"hallucinated_spans": spans} if spans else {}


def phoenix_annotator(base_url: str) -> Callable[[str, object], None]:
    """Annotate a span in Phoenix with a faithfulness score (``faithfulness`` annotation)."""
    import httpx
    from phoenix.client import Client

    # Phoenix's own default waits 30 s for a read: a hanging Phoenix would stall scoring that long.
    client = Client(http_client=httpx.Client(base_url=base_url, timeout=ANNOTATE_TIMEOUT_S))

    def annotate(span_id: str, score) -> None:
        client.spans.add_span_annotation(
            span_id=span_id,
            annotation_name="faithfulness",
            annotator_kind="LLM" if score.scorer.startswith(MODEL_SCORERS) else "CODE",
            label=verdict_of(score),
            score=score.value,
            explanation=explanation(score.claims) or score.error,
            metadata={"scorer": score.scorer, "scorer_version": score.scorer_version, "threshold": score.threshold,
                      "weight": score.weight, **annotation_spans(score.claims)},
            # Queued in Phoenix, not inserted in the request: Phoenix ingests forwarded spans in the
            # background, and a queued annotation whose span is not in yet is retried there, where a
            # synchronous one would be refused (404) and lost.
            sync=False,
        )

    return annotate
