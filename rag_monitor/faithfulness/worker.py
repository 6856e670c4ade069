"""Scores answers in length-bucketed batches: what the agent's scoring tick and calibration call.

Padding is the cost of batching: a batch runs at the length of its longest pair. Sorting the
pairs by token length before cutting batches keeps similar lengths together, and a token
budget per batch (``batch_tokens`` = rows x padded width) keeps long pairs in small batches
and short ones in large batches, so the attention cost stays bounded. Results come back in
the caller's order. Scoring is synchronous: the agent runs it on its scheduled scoring tick.

Usage::

    worker = FaithfulnessWorker(load_scorer(path))
    scores = worker.score_pairs([Pair(key=record.trace_id, contexts=[d.content for d in record.delivered],
                                      answer=record.answer, refused=record.refused)])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_monitor.faithfulness.claims import Assessment, Claim

logger = logging.getLogger(__name__)

STATUS_SCORED = "scored"
STATUS_REFUSED = "refused"
"""The app refused: nothing to check, counted apart, never scored as faithful."""
STATUS_NO_CLAIMS = "no_claims"
"""The answer is empty or states nothing checkable: counted apart."""
STATUS_ERROR = "error"
"""The scorer failed (or the judge's output stayed malformed): no score is made up."""


@dataclass(frozen=True)
class Pair:
    """One answer to check against the contexts delivered to the generator."""

    key: str
    """The caller's id (a trace id): results carry it back."""
    contexts: Sequence[str]
    answer: str
    refused: bool = False
    weight: float = 1.0
    """Inverse inclusion probability of the sample, carried through for weighted rates."""
    question: str | None = None
    """The user's question, for scorers whose prompt names it (``uses_question``: LettuceDetect)."""


@dataclass(frozen=True)
class Score:
    """The verdict on one pair. ``value`` is ``None`` unless ``status == "scored"``."""

    key: str
    value: float | None
    status: str
    scorer: str
    """The scorer's name (``hhem-2.1-open`` / ``support-v1`` ...): every metric and export carries it."""
    scorer_version: str
    truncated: bool = False
    unsupported: bool | None = None
    """``value < threshold`` for scored pairs; ``None`` otherwise."""
    weight: float = 1.0
    error: str | None = None
    threshold: float | None = None
    """The threshold the verdict was taken at (the scorer version's calibrated one by default)."""
    claims: tuple[Claim, ...] = ()
    """Per-claim verdicts where the scorer gives them (offline support scorer, LLM judge)."""


def _documents(contexts: str | Sequence[str]) -> list[str]:
    # A bare string is one document, not a sequence of characters.
    return [contexts] if isinstance(contexts, str) else [str(c) for c in contexts]


def assess_batch(scorer: Any, batch: Sequence[Any]) -> list[Assessment]:
    """Claim-level results when the scorer gives them (``assess_encoded``), else bare scores."""
    if hasattr(scorer, "assess_encoded"):
        return list(scorer.assess_encoded(batch))
    return [Assessment(None if v is None else float(v)) for v in scorer.score_encoded(batch)]


class FaithfulnessWorker:
    """Length-bucketed batch scoring under a token budget."""

    def __init__(self, scorer: Any, *, batch_tokens: int = 8192, max_batch: int = 32) -> None:
        if batch_tokens < 1 or max_batch < 1:
            raise ValueError(f"batch_tokens and max_batch must be positive, got {batch_tokens}, {max_batch}")
        self.scorer = scorer
        self.batch_tokens = batch_tokens
        self.max_batch = max_batch

    def plan_batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices grouped into batches: longest first, each under the token budget."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
        batches: list[list[int]] = []
        current: list[int] = []
        width = 0
        for i in order:
            # Sorted longest first, so the batch's padded width is its first pair's length.
            new_width = max(width, lengths[i])
            if current and (len(current) >= self.max_batch or (len(current) + 1) * new_width > self.batch_tokens):
                batches.append(current)
                current, new_width = [], lengths[i]
            current.append(i)
            width = new_width
        if current:
            batches.append(current)
        return batches

    def score_pairs(self, pairs: Sequence[Pair]) -> list[Score]:
        """Score ``pairs`` now, in length-bucketed batches; results in the order given.

        A batch whose scorer call raises gets ``error`` scores; the other batches still count.
        """
        results: list[Score | None] = [None] * len(pairs)
        todo: list[int] = []
        for i, pair in enumerate(pairs):
            if pair.refused:
                results[i] = self._unscored(pair, STATUS_REFUSED)
            elif not pair.answer.strip():
                results[i] = self._unscored(pair, STATUS_NO_CLAIMS)
            else:
                todo.append(i)
        with_question = getattr(self.scorer, "uses_question", False)
        encoded = [self.scorer.encode(_documents(pairs[i].contexts), pairs[i].answer, question=pairs[i].question)
                   if with_question else self.scorer.encode(_documents(pairs[i].contexts), pairs[i].answer) for i in todo]
        for batch in self.plan_batches([e.length for e in encoded]):
            try:
                assessments = assess_batch(self.scorer, [encoded[b] for b in batch])
            except Exception as exc:  # noqa: BLE001 - one failing batch must not lose the others
                logger.exception("faithfulness scoring failed for a batch of %d pairs", len(batch))
                assessments = [Assessment(None, error=f"{type(exc).__name__}: {exc}")] * len(batch)
            for b, assessment in zip(batch, assessments):
                results[todo[b]] = self._scored(pairs[todo[b]], assessment, encoded[b].truncated)
        return [r for r in results if r is not None]

    def _unscored(self, pair: Pair, status: str, error: str | None = None, claims: tuple[Claim, ...] = ()) -> Score:
        return Score(pair.key, None, status, self.scorer.name, self.scorer.version, weight=pair.weight, error=error,
                     threshold=self.scorer.threshold, claims=claims)

    def _scored(self, pair: Pair, assessment: Assessment, truncated: bool) -> Score:
        if assessment.error is not None:
            return self._unscored(pair, STATUS_ERROR, assessment.error, assessment.claims)
        if assessment.value is None:
            return self._unscored(pair, STATUS_NO_CLAIMS, claims=assessment.claims)
        value = assessment.value
        return Score(pair.key, float(value), STATUS_SCORED, self.scorer.name, self.scorer.version, truncated,
                     unsupported=value < self.scorer.threshold, weight=pair.weight, threshold=self.scorer.threshold,
                     claims=assessment.claims)
