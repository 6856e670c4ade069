"""``support-v2``: support-v1's sentence checks, combined over the whole answer by a fitted logistic model.

support-v1 scores an answer by its weakest sentence, so one paraphrased sentence that MiniLM
matches loosely scores like an invented one: on real LLM answers (RAGTruth) that is barely
better than chance. support-v2 keeps every per-sentence measurement of v1 (``ClaimCheck``:
lexical overlap, best similarity, numbers and names absent from the contexts, negation
mismatch) and turns them into a few answer-level features (``FEATURES``): the mean and the
minimum support, the share of weak sentences, the share of the answer's numbers and names
that the contexts do not contain (what RAGTruth's annotators flag most), and the answer's
length. A logistic model over them gives the probability that the answer is supported; its
coefficients are fitted by ``benchmarks/faithfulness_ragtruth.py`` on the tuning split only
and ship in ``thresholds.json`` beside the threshold. The cost per answer is v1's (the same
embeddings); the model is a dot product.

Claim verdicts use a fixed support of ``CLAIM_SUPPORTED`` (the answer threshold is on the
probability scale, not on a sentence's support).

Usage::

    scorer = SupportV2Scorer.load()
    scorer.score([["It opened in 1889."]], ["It opened in 1901."])    # [0.2...]
    answer_features(checks, lexical=0.8)                               # the model's inputs
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rag_monitor.faithfulness.claims import Assessment
from rag_monitor.faithfulness.lexical import support_score
from rag_monitor.faithfulness.support import _CITATION, ClaimCheck, SupportPair, SupportScorer
from rag_monitor.faithfulness.thresholds import shipped_calibration

SUPPORT_V2_NAME = "support-v2"
CLAIM_SUPPORTED = 0.5
"""A sentence's support under which it counts as weak (and its claim is listed as unsupported)."""
FEATURES = ("mean_support", "min_support", "weak_share", "mean_similarity", "min_similarity", "novel_number_share",
            "novel_name_share", "contradicted_share", "answer_lexical", "log_sentences")


def answer_features(checks: Sequence[ClaimCheck], lexical: float) -> np.ndarray:
    """The model's inputs for one answer (``checks`` non-empty), in ``FEATURES`` order."""
    support = np.array([c.support for c in checks])
    similarity = np.array([c.similarity for c in checks])
    numbers, names = sum(c.numbers for c in checks), sum(c.names for c in checks)
    return np.array([
        support.mean(), support.min(), (support < CLAIM_SUPPORTED).mean(), similarity.mean(), similarity.min(),
        sum(c.novel_numbers for c in checks) / numbers if numbers else 0.0,
        sum(c.novel_names for c in checks) / names if names else 0.0,
        float(np.mean([c.contradicted for c in checks])), lexical, math.log1p(len(checks)),
    ])


class LogisticModel:
    """P(supported) = sigmoid(intercept + weights . (x - mean) / scale) over the named ``features``."""

    def __init__(self, mean: Sequence[float], scale: Sequence[float], weights: Sequence[float], intercept: float,
                 features: Sequence[str] = FEATURES) -> None:
        self.mean, self.scale = np.asarray(mean, dtype=float), np.asarray(scale, dtype=float)
        self.weights, self.intercept = np.asarray(weights, dtype=float), float(intercept)
        self.features = tuple(features)
        if not len(self.mean) == len(self.scale) == len(self.weights) == len(self.features):
            raise ValueError(f"the model needs {len(self.features)} features, got {len(self.weights)}")

    def probability(self, x: np.ndarray) -> np.ndarray:
        z = self.intercept + ((np.atleast_2d(x) - self.mean) / self.scale) @ self.weights
        return 1.0 / (1.0 + np.exp(-z))

    def as_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "mean": [round(v, 6) for v in self.mean],
                "scale": [round(v, 6) for v in self.scale], "weights": [round(v, 6) for v in self.weights],
                "intercept": round(self.intercept, 6)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], features: Sequence[str] = FEATURES) -> LogisticModel:
        if list(d.get("features", [])) != list(features):
            raise ValueError(f"model features {d.get('features')} do not match this version's {tuple(features)}")
        return cls(d["mean"], d["scale"], d["weights"], d["intercept"], features)

    @classmethod
    def fit(cls, x: np.ndarray, supported: np.ndarray, sample_weight: np.ndarray | None = None,
            l2: float = 1.0, iterations: int = 50, features: Sequence[str] = FEATURES) -> LogisticModel:
        """Penalised maximum likelihood by Newton's method (a few features: no solver library needed)."""
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale[scale == 0] = 1.0
        z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
        y = supported.astype(float)
        w = np.ones(len(x)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        beta = np.zeros(z.shape[1])
        penalty = np.diag([0.0] + [l2] * x.shape[1])
        for _ in range(iterations):
            p = 1.0 / (1.0 + np.exp(-z @ beta))
            gradient = z.T @ (w * (y - p)) - penalty @ beta
            hessian = (z * (w * p * (1 - p))[:, None]).T @ z + penalty
            step = np.linalg.solve(hessian, gradient)
            beta += step
            if np.abs(step).max() < 1e-8:
                break
        return cls(mean, scale, beta[1:], beta[0], features)


class SupportV2Scorer(SupportScorer):
    """``support-v2`` (see the module docstring): the score is P(supported) from the shipped model."""

    name = SUPPORT_V2_NAME
    version = "1"

    def __init__(self, embed: Any, threshold: float | None = None, model: LogisticModel | None = None) -> None:
        entry = shipped_calibration(SUPPORT_V2_NAME, self.version) or {}
        if model is None:
            if "model" not in entry:
                raise RuntimeError("support-v2 has no fitted model in thresholds.json (run benchmarks/faithfulness_ragtruth.py)")
            model = LogisticModel.from_dict(entry["model"])
        self.model = model
        super().__init__(embed, threshold=threshold)

    @property
    def claim_threshold(self) -> float:
        return CLAIM_SUPPORTED

    def features_encoded(self, batch: Sequence[SupportPair]) -> list[np.ndarray | None]:
        """The model's inputs per pair; None for an answer with no checkable sentence."""
        vectors = self._vectors(self._texts(batch))
        return [self._features(pair, self._checks(pair, vectors)) for pair in batch]

    def _features(self, pair: SupportPair, checks: list[ClaimCheck]) -> np.ndarray | None:
        if not checks:
            return None
        return answer_features(checks, support_score("\n".join(pair.contexts), _CITATION.sub("", pair.answer)) or 0.0)

    def _assess(self, pair: SupportPair, vectors: dict[str, np.ndarray]) -> Assessment:
        checks = self._checks(pair, vectors)
        if not checks:
            return Assessment(None)
        probability = float(self.model.probability(self._features(pair, checks))[0])
        return Assessment(round(probability, 4), tuple(self._claim(c) for c in checks))
