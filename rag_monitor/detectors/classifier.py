"""Classifier two-sample test: can a model tell the current window from the reference?

If nothing drifted, no classifier does better than chance at guessing which window a
held-out vector came from (AUC 0.5). A held-out AUC clearly above 0.5 is drift, and the
classifier's view of *which* vectors it separates says where.

p-value: the windows are split (stratified) into a training part and a held-out part; the
classifier is fit on the first and scores the second. Under no drift the held-out labels are
exchangeable with the held-out scores, so the held-out AUC is a Mann-Whitney U
(``U = AUC x n_ref x n_cur``) with the usual rank-sum null; we use its normal approximation
with the tie correction (accurate from about ten vectors a side). One-sided: only
better-than-chance separation is drift.

Why one held-out split and not k-fold cross-validation: summing the folds' U statistics (or
pooling their scores) treats the folds as independent, and they are not. Fold 1's model
learns the chance differences of fold 2 and vice versa, so the folds' AUCs err together:
on banking77 windows with no drift, 5-fold CV with a fold-stratified rank-sum test flagged
9% of windows at alpha = 0.05 (95% CI 5.4-13.9%, 200 windows). An exact CV p-value needs a
permutation test that refits every fold per permutation (``k x n_permutations`` fits). The
single split is exact and cheap; it spends half the data on training, which costs power
(measured in ``benchmarks/drift_power.py``: 1.5% false alarms on the same banking77 windows,
95% CI 0.3-4.3%).
"""

from __future__ import annotations

import math
from typing import Any

from rag_monitor.detectors.base import DriftScore, EmbeddingDriftDetector

__all__ = ["ClassifierDrift", "rank_sum_test"]


def rank_sum_test(scores: Any, is_current: Any) -> tuple[float, float, float]:
    """One-sided Mann-Whitney test that current scores rank above reference ones: (AUC, z, p)."""
    import numpy as np
    from scipy.stats import norm, rankdata

    ranks = rankdata(scores)
    n_cur = int(is_current.sum())
    n_ref = int(is_current.size - n_cur)
    u = float(ranks[is_current].sum()) - n_cur * (n_cur + 1) / 2.0
    total = n_ref + n_cur
    _, tie_counts = np.unique(scores, return_counts=True)
    tie_term = float((tie_counts**3 - tie_counts).sum()) / (total * (total - 1))
    variance = n_ref * n_cur / 12.0 * ((total + 1) - tie_term)
    auc = u / (n_ref * n_cur)
    if variance <= 0.0:  # every held-out score tied: the model learned nothing
        return auc, 0.0, 1.0
    z = (u - n_ref * n_cur / 2.0) / math.sqrt(variance)
    return auc, z, float(norm.sf(z))


class ClassifierDrift(EmbeddingDriftDetector):
    """Drift when a cross-validated classifier separates current vectors from reference ones.

    Logistic regression on standardised embeddings by default: a linear probe is fast
    (well under a second for two windows of 2,000 x 384) and already sees shifts in the
    mixture of topics, which is what query drift mostly is.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> detector = ClassifierDrift(signal="query_embedding").fit(rng.normal(size=(300, 8)))
    >>> result = detector.predict(rng.normal(0.5, 1.0, size=(300, 8)))
    >>> result.is_drift, result.statistic > 0.6   # held-out AUC
    (True, True)

    Parameters
    ----------
    alpha
        Significance level: the false-alarm rate accepted on windows that did not drift.
    signal
        Name of the watched signal, copied into results.
    train_fraction
        Share of each window used to train the classifier; the rest is held out and scored.
        Half and half balances learning the difference against measuring it.
    regularization
        Inverse L2 strength ``C`` of the default logistic regression: smaller is smoother,
        less prone to memorise a few hundred vectors in 384 dimensions.
    estimator
        Any scikit-learn classifier with ``predict_proba`` or ``decision_function``, used
        instead of the default (it is cloned for every test).
    seed
        Seed of the train/held-out split.
    min_window_size
        Fewest vectors accepted in a window (each held-out side needs about ten).
    """

    detector_name = "classifier"

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        signal: str = "",
        train_fraction: float = 0.5,
        regularization: float = 0.1,
        estimator: Any = None,
        seed: int | None = 0,
        min_window_size: int = 20,
    ) -> None:
        super().__init__(alpha=alpha, signal=signal, min_window_size=min_window_size)
        if not 0.0 < float(train_fraction) < 1.0:
            raise ValueError(f"train_fraction must be strictly between 0 and 1, got {train_fraction!r}")
        if not float(regularization) > 0.0:
            raise ValueError(f"regularization must be positive, got {regularization!r}")
        self.train_fraction = float(train_fraction)
        self.regularization = float(regularization)
        self.estimator = estimator
        self.seed = seed

    def _make_estimator(self) -> Any:
        from sklearn.base import clone

        if self.estimator is not None:
            return clone(self.estimator)
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(C=self.regularization, max_iter=1000))

    def _score(self, reference: Any, current: Any) -> DriftScore:
        import numpy as np
        from sklearn.model_selection import train_test_split

        pooled = np.concatenate([reference, current], axis=0)
        is_current = np.zeros(pooled.shape[0], dtype=bool)
        is_current[reference.shape[0] :] = True
        train, held_out = train_test_split(
            np.arange(pooled.shape[0]), train_size=self.train_fraction, stratify=is_current, random_state=self.seed
        )
        if is_current[held_out].all() or not is_current[held_out].any():
            raise ValueError("windows too small to hold out vectors from both; use larger windows")
        model = self._make_estimator().fit(pooled[train], is_current[train])
        if hasattr(model, "predict_proba"):
            scores = model.predict_proba(pooled[held_out])[:, 1]
        else:
            scores = model.decision_function(pooled[held_out])
        auc, z, p_value = rank_sum_test(scores, is_current[held_out])
        return DriftScore(
            statistic=float(auc),
            p_value=p_value,
            metadata={"z": float(z), "n_train": int(train.size), "n_held_out": int(held_out.size)},
        )
