"""Simulated deployments with an imperfect scorer, to check the three unsupported rates.

A scorer with known error rates: its logit for an answer is normal with mean ``mu0`` (supported)
or ``mu0 + separation`` (unsupported), sd 1, so its ROC AUC is ``Phi(separation / sqrt 2)``; it
flags an answer when the logit exceeds ``threshold``, so its false-positive and true-positive
rates are known in closed form, and with them the expected flag rate
``pi * TPR + (1 - pi) * FPR``: the scorer-only rate's bias is ``that - pi``. A release that changes
the answers' style moves ``mu0`` (supported answers look less supported to the scorer), which
raises its false-positive rate. The scorer's probability given to PPI is the one calibrated on
the first release (``calibrated_on``): right there, off for a release that moved ``mu0`` (the
estimate must not need it to be right).

Each deployment draws a population of answers per release, complaints that oversample
unsupported answers (the thumbs-down stratum), the nested samples of ``review/sampler.py``
(one uniform draw ``u`` per answer: reviewed when ``u < p``, scored when ``u < max(score_rate, p)``;
drawn by numpy here, by the trace id's hash in the agent), then the rates as the agent computes
them (``estimators``).

    result = deployment(seed=1, releases=[ScorerRelease("r1", 0.2, 2.0)], queries=20000)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rag_monitor.estimators import ScoredSums, ht_ratio_se, ppi_rate
from rag_monitor.review.sampler import SamplingConfig


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


@dataclass(frozen=True)
class ScorerRelease:
    """One release: its true unsupported rate and how the scorer sees its answers."""

    name: str
    unsupported_rate: float
    separation: float
    """Logit gap between unsupported and supported answers: AUC = Phi(separation / sqrt 2)."""
    mu0: float = -1.0
    """Mean logit of supported answers; a style change raises it (more false positives)."""
    threshold: float = 0.0

    @property
    def auc(self) -> float:
        return _phi(self.separation / math.sqrt(2))

    @property
    def false_positive_rate(self) -> float:
        return 1 - _phi(self.threshold - self.mu0)

    @property
    def true_positive_rate(self) -> float:
        return 1 - _phi(self.threshold - self.mu0 - self.separation)

    def predicted_scorer_rate(self, true_rate: float) -> float:
        return true_rate * self.true_positive_rate + (1 - true_rate) * self.false_positive_rate

    def probability(self, logit: np.ndarray, calibrated_on: ScorerRelease) -> np.ndarray:
        """P(unsupported | logit) under ``calibrated_on``'s model (binormal, equal variance)."""
        c = calibrated_on
        log_odds = (c.separation * (logit - c.mu0) - c.separation**2 / 2
                    + math.log(c.unsupported_rate / (1 - c.unsupported_rate)))
        return 1 / (1 + np.exp(-log_odds))

    @classmethod
    def with_auc(cls, name: str, unsupported_rate: float, auc: float, **kw) -> ScorerRelease:
        return cls(name, unsupported_rate, math.sqrt(2) * _inverse_phi(auc), **kw)


def _inverse_phi(p: float) -> float:
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _phi(mid) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class ReleaseOutcome:
    release: str
    auc: float
    truth: float
    scorer_rate: float
    predicted_scorer_rate: float
    ppi: float
    ppi_low: float
    ppi_high: float
    lam: float
    fallback: str | None
    human: float
    human_low: float
    human_high: float
    labels: int
    scored: int

    @property
    def ppi_covered(self) -> bool:
        return self.ppi_low <= self.truth <= self.ppi_high

    @property
    def width_ratio(self) -> float:
        return (self.ppi_high - self.ppi_low) / (self.human_high - self.human_low)


SAMPLING = SamplingConfig(base_rate=0.01, thumbs_down_rate=1.0, score_rate=0.1, score_budget=0, salt="ppi-oracle")
COMPLAINT_RATE = {0: 0.002, 1: 0.02}
"""Chance of a thumbs-down for a supported (0) and an unsupported (1) answer."""


def deployment(seed: int, releases: list[ScorerRelease], queries: int = 20000,
               sampling: SamplingConfig = SAMPLING) -> list[ReleaseOutcome]:
    """One simulated deployment: ``queries`` answers per release, sampled, scored and reviewed."""
    rng = np.random.default_rng(seed)
    out = []
    for rel in releases:
        y = (rng.random(queries) < rel.unsupported_rate).astype(float)
        logit = rng.normal(rel.mu0 + rel.separation * y, 1.0)
        f = rel.probability(logit, releases[0])
        flag = (logit > rel.threshold).astype(float)
        complained = rng.random(queries) < np.where(y > 0, COMPLAINT_RATE[1], COMPLAINT_RATE[0])
        p_review = np.where(complained, max(sampling.thumbs_down_rate, sampling.base_rate), sampling.base_rate)
        p_score = np.maximum(sampling.score_rate, p_review)  # Sampler.score_probability
        u = rng.random(queries)
        scored, reviewed = u < p_score, u < p_review
        w_s, w_r = 1 / p_score, 1 / p_review
        scorer_rate, _ = ht_ratio_se(w_s[scored], flag[scored])
        r = ppi_rate(y[reviewed], f[reviewed], w_r[reviewed], ScoredSums.of(f[scored], w_s[scored]), None, w_s[reviewed])
        truth = float(y.mean())
        out.append(ReleaseOutcome(
            rel.name, rel.auc, truth, float(scorer_rate), rel.predicted_scorer_rate(truth), r.value, r.low, r.high,
            r.lam, r.fallback, r.human.value, r.human.low, r.human.high, r.labels, r.scored))
    return out


def summarise(outcomes: list[ReleaseOutcome]) -> dict:
    """Coverage, bias and widths over deployments, for one release setting."""
    n = len(outcomes)
    ratios = [o.width_ratio for o in outcomes]
    return {
        "deployments": n,
        "auc": round(outcomes[0].auc, 3),
        "ppi_coverage": sum(o.ppi_covered for o in outcomes) / n,
        "human_coverage": sum(o.human_low <= o.truth <= o.human_high for o in outcomes) / n,
        "scorer_bias_mean": float(np.mean([o.scorer_rate - o.truth for o in outcomes])),
        "scorer_bias_predicted": float(np.mean([o.predicted_scorer_rate - o.truth for o in outcomes])),
        "scorer_bias_se": float(np.std([o.scorer_rate - o.predicted_scorer_rate for o in outcomes]) / math.sqrt(n)),
        "ppi_bias_mean": float(np.mean([o.ppi - o.truth for o in outcomes])),
        "width_ratio_max": max(ratios),
        "width_ratio_median": float(np.median(ratios)),
        "fallbacks": sum(o.fallback is not None for o in outcomes),
        "labels_mean": float(np.mean([o.labels for o in outcomes])),
        "scored_mean": float(np.mean([o.scored for o in outcomes])),
    }
