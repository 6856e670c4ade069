"""Which queries go to human review: deterministic on the trace id, stratified.

Every replica reaches the same decision for a trace without talking to the others: the
trace id hashes to a uniform number ``u`` in [0, 1), and a query is sampled when ``u < p``, where
``p`` is the highest rate among the strata it belongs to (its stratum is that one). One draw for
every stratum (a single-draw design): ``p`` is the query's exact inclusion probability, and its
weight in sample-based (Horvitz-Thompson) estimates is ``1 / p``.

The scorer labels a larger sample than the reviewers, drawn on the same ``u``: a query is scored
when ``u < max(score_rate, p)``, so the review sample is a subsample of the scored one and both
inclusion probabilities are known (prediction-powered rates need both). ``ScoreRate`` lowers the
scoring rate when the traffic would exceed the scorer's budget in pairs per second.

A complaint (or a follow-up: the user doubted the answer, marked by the app or detected by the
agent) that arrives later only adds a stratum, so ``p`` can only grow: a query sampled
before stays sampled (``u < p_before <= p_after``) and its stored item takes the new probability
and weight; one not sampled before is pulled in when ``u < p_after``. Either way the estimates
stay unbiased. A shadow query draws on the production trace it shadows (``u`` of ``shadow_of``),
so the two halves of a pair share one draw.

Usage::

    sampler = Sampler(SamplingConfig(base_rate=0.01))
    decision = sampler.decide(record)            # None, or SampleDecision(stratum, probability)
    sampler.decide(record, thumbs_down=True)     # a complaint arrived later
    sampler.decide(record, follow_up=True)       # the user followed the answer up ("are you sure?")
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from rag_monitor import semconv
from rag_monitor.record import QueryRecord

STRATUM_BASE = "base"
STRATUM_THUMBS_DOWN = "thumbs_down"
STRATUM_LOW_CONFIDENCE = "low_confidence"
STRATUM_REFUSAL = "refusal"
STRATUM_SHADOW_PAIR = "shadow_pair"
STRATUM_FOLLOW_UP = "follow_up"
LATE_STRATA = {semconv.FEEDBACK_THUMBS_DOWN: STRATUM_THUMBS_DOWN, semconv.FEEDBACK_FOLLOW_UP: STRATUM_FOLLOW_UP}
"""Feedback kinds that put their query in a stratum when they arrive (usually after the query)."""


@dataclass(frozen=True)
class SamplingConfig:
    """Rates per stratum (``rag_monitor/defaults/detectors/sampling.yaml``)."""

    base_rate: float = 0.01
    thumbs_down_rate: float = 1.0
    low_confidence_rate: float = 0.2
    low_confidence_below: float = 0.5
    refusal_rate: float = 0.1
    shadow_pair_rate: float = 0.05
    follow_up_rate: float = 0.5
    """A query whose answer the user followed up: ``follow_up`` feedback on it, or a detected follow-up."""
    follow_up_window_s: float = 300.0
    """A query of the same session this soon after another, matching ``follow_up_patterns``, follows it up."""
    follow_up_patterns: tuple[str, ...] = ()
    """Regular expressions searched in the follow-up's text, lower-cased and without accents
    (``rag_monitor.agent.follow_ups.normalise``); none: the agent detects none (the app may still mark them)."""
    salt: str = "rag-monitor"
    """Change it to draw an independent sample (e.g. for a second review programme)."""
    score_rate: float = 0.1
    """The share of traffic the faithfulness scorer labels (the review sample is a subsample of it)."""
    score_budget: float = 50.0
    """Pairs per second this replica may send the scorer: above it the scoring rate is lowered
    (0: no bound). The scorer runs on one replica at a time: divide its capacity by the replicas."""

    def __post_init__(self) -> None:
        if self.score_budget < 0:
            raise ValueError(f"sampling score_budget must be >= 0 pairs/s, got {self.score_budget!r}")
        if self.follow_up_window_s < 0:
            raise ValueError(f"sampling follow_up_window_s must be >= 0 seconds, got {self.follow_up_window_s!r}")
        if isinstance(self.follow_up_patterns, str) or not all(isinstance(p, str) for p in self.follow_up_patterns):
            raise ValueError(f"sampling follow_up_patterns must be a list of strings, got {self.follow_up_patterns!r}")
        object.__setattr__(self, "follow_up_patterns", tuple(self.follow_up_patterns))
        for pattern in self.follow_up_patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"sampling follow_up_patterns: {pattern!r} is not a regular expression ({e})") from None
        for name in ("base_rate", "thumbs_down_rate", "low_confidence_rate", "refusal_rate", "shadow_pair_rate",
                     "follow_up_rate", "score_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"sampling {name} must be within [0, 1], got {value!r}")

    @classmethod
    def load(cls, path: str | Path) -> SamplingConfig:
        import yaml

        data = yaml.safe_load(Path(path).read_text()) or {}
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown sampling settings {unknown}; known: {sorted(known)}")
        return cls(**data)


@dataclass(frozen=True)
class SampleDecision:
    stratum: str
    probability: float
    pair_trace_id: str | None = field(default=None)

    @property
    def weight(self) -> float:
        return 1.0 / self.probability


class Sampler:
    def __init__(self, config: SamplingConfig | None = None):
        self.config = config or SamplingConfig()
        self._salt = self.config.salt.encode()
        self._keyed = hashlib.blake2b(digest_size=8, key=self._salt[:64])
        """The keyed hash's state, copied per draw (cheaper than keying a new one each time)."""

    def uniform(self, trace_id: str) -> float:
        """The trace's uniform draw in [0, 1): the same on every replica."""
        hasher = self._keyed.copy()
        hasher.update(trace_id.encode())
        return int.from_bytes(hasher.digest(), "big") / 2**64

    def stratum(self, record: QueryRecord, thumbs_down: bool = False, follow_up: bool = False) -> tuple[str, float]:
        """The highest-rate stratum the record qualifies for, and its rate."""
        c = self.config
        candidates = [(STRATUM_BASE, c.base_rate)]
        kinds = {f.kind for f in record.feedback}
        if thumbs_down or semconv.FEEDBACK_THUMBS_DOWN in kinds:
            candidates.append((STRATUM_THUMBS_DOWN, c.thumbs_down_rate))
        if follow_up or semconv.FEEDBACK_FOLLOW_UP in kinds:
            candidates.append((STRATUM_FOLLOW_UP, c.follow_up_rate))
        if record.confidence is not None and record.confidence < c.low_confidence_below:
            candidates.append((STRATUM_LOW_CONFIDENCE, c.low_confidence_rate))
        if record.refused:
            candidates.append((STRATUM_REFUSAL, c.refusal_rate))
        if record.shadow_of:
            candidates.append((STRATUM_SHADOW_PAIR, c.shadow_pair_rate))
        return max(candidates, key=lambda sr: sr[1])

    def draw_id(self, record: QueryRecord) -> str:
        """The trace whose draw decides: a shadow query's production trace, else its own."""
        return record.shadow_of or record.trace_id

    def decide(self, record: QueryRecord, thumbs_down: bool = False, follow_up: bool = False) -> SampleDecision | None:
        stratum, rate = self.stratum(record, thumbs_down, follow_up)
        if rate <= 0.0 or self.uniform(self.draw_id(record)) >= rate:
            return None
        return SampleDecision(stratum, rate, pair_trace_id=record.shadow_of)

    def score_probability(self, record: QueryRecord, review: SampleDecision | None, rate: float) -> float | None:
        """The record's probability of entering the scored sample at scoring rate ``rate``, when it
        does (same draw as review, so ``review`` implies it); None when it is not scored. Shadow
        queries are scored when sampled for review only (their pairs carry their own design)."""
        review_p = review.probability if review is not None else 0.0
        p = review_p if record.shadow_of else max(rate, review_p)
        if p <= 0.0 or (review is None and self.uniform(self.draw_id(record)) >= p):
            return None
        return p

    def may_pair(self, production: QueryRecord) -> bool:
        """Whether a shadow of ``production`` can be sampled as a pair (its draw is low enough)."""
        rate = self.config.shadow_pair_rate
        return not production.shadow_of and rate > 0.0 and self.uniform(production.trace_id) < max(
            rate, self.config.base_rate, self.config.low_confidence_rate, self.config.refusal_rate)


class ScoreRate:
    """The scoring probability now: ``score_rate``, lowered while this replica's arrivals would
    send the scorer more than ``score_budget`` pairs per second (over the last ``window_s``).

    Every decision stores the probability in force, so a rate that moves keeps the weights exact.

        rate = ScoreRate(config)
        p = rate.observe(len(records))      # the scoring rate for this batch
    """

    def __init__(self, config: SamplingConfig, window_s: float = 60.0, clock=time.monotonic):
        self.rate = config.score_rate
        self.budget = config.score_budget
        self.window_s = window_s
        self.clock = clock
        self._arrivals: deque[tuple[float, int]] = deque()
        self._total = 0
        self._lock = threading.Lock()

    def observe(self, queries: int) -> float:
        with self._lock:
            now = self.clock()
            self._arrivals.append((now, queries))
            self._total += queries
            while self._arrivals and self._arrivals[0][0] < now - self.window_s:
                self._total -= self._arrivals.popleft()[1]
            if not self.budget:
                return self.rate
            per_s = self._total / self.window_s
            return self.rate if per_s * self.rate <= self.budget else self.budget / per_s
