"""Scores answers off the request path, in length-bucketed batches.

Padding is the cost of batching: a batch runs at the length of its longest pair. Sorting the
pairs by token length before cutting batches keeps similar lengths together, and a token
budget per batch (``batch_tokens`` = rows x padded width) keeps long pairs in small batches
and short ones in large batches, so the attention cost stays bounded. Results come back in
the caller's order.

Two ways to drive it:

- ``score_pairs(pairs)``: synchronous, for calibration and batch jobs;
- ``start()`` / ``submit(pairs)`` / ``backlog()`` / ``shutdown()``: a background thread the
  agent feeds; each scored chunk is handed to ``on_result``. The queue is bounded: what does
  not fit is refused (``submit`` returns how many it took) and counted in ``dropped``.

Usage::

    worker = FaithfulnessWorker(load_scorer(path), on_result=store_scores)
    worker.start()
    worker.submit([Pair(key=record.trace_id, contexts=[d.content for d in record.delivered],
                        answer=record.answer, refused=record.refused)])
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

STATUS_SCORED = "scored"
STATUS_REFUSED = "refused"
"""The app refused: nothing to check, counted apart, never scored as faithful."""
STATUS_NO_CLAIMS = "no_claims"
"""The answer is empty or states nothing checkable (lexical scorer): counted apart."""
STATUS_ERROR = "error"


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


@dataclass(frozen=True)
class Score:
    """The verdict on one pair. ``value`` is ``None`` unless ``status == "scored"``."""

    key: str
    value: float | None
    status: str
    scorer: str
    """The scorer's name (``hhem-2.1-open`` / ``lexical-v1``): every metric and export carries it."""
    scorer_version: str
    truncated: bool = False
    unsupported: bool | None = None
    """``value < threshold`` for scored pairs; ``None`` otherwise."""
    weight: float = 1.0
    error: str | None = None


def _documents(contexts: str | Sequence[str]) -> list[str]:
    # A bare string is one document, not a sequence of characters.
    return [contexts] if isinstance(contexts, str) else [str(c) for c in contexts]


class FaithfulnessWorker:
    """Length-bucketed batch scoring, synchronously or on a background thread."""

    def __init__(self, scorer: Any, *, batch_tokens: int = 8192, max_batch: int = 32, max_queue: int = 10_000,
                 on_result: Callable[[list[Score]], None] | None = None) -> None:
        if batch_tokens < 1 or max_batch < 1 or max_queue < 1:
            raise ValueError(f"batch_tokens, max_batch and max_queue must be positive, got {batch_tokens}, {max_batch}, {max_queue}")
        self.scorer = scorer
        self.batch_tokens = batch_tokens
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.on_result = on_result
        self.dropped = 0
        self.scored = 0
        self.errors = 0
        self._queue: deque[Pair] = deque()
        self._in_flight = 0
        self._lock = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- synchronous ----------------------------------------------------------------------

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
        """Score ``pairs`` now, in length-bucketed batches; results in the order given."""
        results: list[Score | None] = [None] * len(pairs)
        todo: list[int] = []
        for i, pair in enumerate(pairs):
            if pair.refused:
                results[i] = self._unscored(pair, STATUS_REFUSED)
            elif not pair.answer.strip():
                results[i] = self._unscored(pair, STATUS_NO_CLAIMS)
            else:
                todo.append(i)
        encoded = [self.scorer.encode(_documents(pairs[i].contexts), pairs[i].answer) for i in todo]
        for batch in self.plan_batches([e.length for e in encoded]):
            values = self.scorer.score_encoded([encoded[b] for b in batch])
            for b, value in zip(batch, values):
                pair = pairs[todo[b]]
                results[todo[b]] = self._scored(pair, value, encoded[b].truncated)
        return [r for r in results if r is not None]

    def _unscored(self, pair: Pair, status: str, error: str | None = None) -> Score:
        return Score(pair.key, None, status, self.scorer.name, self.scorer.version, weight=pair.weight, error=error)

    def _scored(self, pair: Pair, value: float | None, truncated: bool) -> Score:
        if value is None:
            return Score(pair.key, None, STATUS_NO_CLAIMS, self.scorer.name, self.scorer.version, truncated, weight=pair.weight)
        return Score(pair.key, float(value), STATUS_SCORED, self.scorer.name, self.scorer.version, truncated,
                     unsupported=value < self.scorer.threshold, weight=pair.weight)

    # --- background -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="faithfulness-worker", daemon=True)
            self._thread.start()

    def submit(self, pairs: Sequence[Pair]) -> int:
        """Queue pairs for the background thread; returns how many fit (the rest count as dropped)."""
        with self._lock:
            room = max(0, self.max_queue - len(self._queue) - self._in_flight)
            accepted = list(pairs[:room])
            self._queue.extend(accepted)
            self.dropped += len(pairs) - len(accepted)
            if accepted:
                self._lock.notify_all()
        return len(accepted)

    def backlog(self) -> int:
        """Pairs queued or being scored."""
        with self._lock:
            return len(self._queue) + self._in_flight

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the backlog is empty; ``False`` on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._in_flight, timeout)

    def shutdown(self, timeout: float | None = 10.0) -> None:
        """Stop after the chunk in progress; queued pairs are left unscored."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._queue or self._stopping)
                if self._stopping:
                    return
                # Take a chunk big enough for several full batches, so sorting by length has choice.
                take = min(len(self._queue), self.max_batch * 4)
                chunk = [self._queue.popleft() for _ in range(take)]
                self._in_flight = len(chunk)
            try:
                scores = self.score_pairs(chunk)
            except Exception as exc:  # noqa: BLE001 - a scorer failure must not kill the worker
                logger.exception("faithfulness scoring failed for %d pairs", len(chunk))
                scores = [self._unscored(p, STATUS_ERROR, f"{type(exc).__name__}: {exc}") for p in chunk]
            with self._lock:
                self.scored += sum(s.status == STATUS_SCORED for s in scores)
                self.errors += sum(s.status == STATUS_ERROR for s in scores)
            if self.on_result is not None:
                try:
                    self.on_result(scores)
                except Exception:  # noqa: BLE001 - the consumer's bug must not stop scoring
                    logger.exception("faithfulness result callback failed")
            with self._lock:
                self._in_flight = 0
                self._lock.notify_all()
