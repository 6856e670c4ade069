"""Classifier two-sample test: can a model tell the current window from the reference?

If nothing drifted, no classifier does better than chance at guessing which window a
held-out vector came from (AUC 0.5). A held-out AUC clearly above 0.5 is drift, and the
classifier's view of *which* vectors it separates says where.

p-value: within each cross-validation fold the held-out scores come from a model that never
saw that fold, so under no drift the fold's labels are exchangeable with its scores and its
Mann-Whitney U (``U = AUC x n_ref x n_cur``) has the usual rank-sum null. The folds' U
statistics are summed and compared with the sum of their null means and variances (normal
approximation, with the tie correction), a stratified rank-sum test in the manner of van
Elteren. Ranking within folds rather than across them matters: scores of different fold
models are not on one scale, and pooling them mixes that offset into the AUC. A permutation
test would be exact but costs ``k x n_permutations`` model fits; the normal approximation is
accurate for the window sizes drift jobs use (tens of vectors per fold and up), and
``benchmarks/drift_power.py`` measures its false-alarm rate on real text.
"""

from __future__ import annotations

import math
from typing import Any

from rag_monitor.detectors.base import DriftScore, EmbeddingDriftDetector

__all__ = ["ClassifierDrift"]


def _fold_rank_sum(scores: Any, is_current: Any) -> tuple[float, float, float, float]:
    """Mann-Whitney U of the current window's scores in one fold: (U, null mean, null variance, AUC)."""
    import numpy as np
    from scipy.stats import rankdata

    ranks = rankdata(scores)
    n_cur = int(is_current.sum())
    n_ref = int(is_current.size - n_cur)
    u = float(ranks[is_current].sum()) - n_cur * (n_cur + 1) / 2.0
    total = n_ref + n_cur
    _, tie_counts = np.unique(scores, return_counts=True)
    tie_term = float((tie_counts**3 - tie_counts).sum()) / (total * (total - 1))
    variance = n_ref * n_cur / 12.0 * ((total + 1) - tie_term)
    return u, n_ref * n_cur / 2.0, variance, u / (n_ref * n_cur)


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
    n_folds
        Cross-validation folds (stratified by window). Every vector is scored once, by a
        model that did not train on it.
    regularization
        Inverse L2 strength ``C`` of the default logistic regression: smaller is smoother,
        less prone to memorise a few hundred vectors in 384 dimensions.
    estimator
        Any scikit-learn classifier with ``predict_proba`` or ``decision_function``, used
        instead of the default (it is cloned for every fold).
    seed
        Seed of the fold assignment.
    min_window_size
        Fewest vectors accepted in a window; at least ``n_folds`` so each fold holds both.
    """

    detector_name = "classifier"

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        signal: str = "",
        n_folds: int = 5,
        regularization: float = 0.1,
        estimator: Any = None,
        seed: int | None = 0,
        min_window_size: int = 20,
    ) -> None:
        super().__init__(alpha=alpha, signal=signal, min_window_size=min_window_size)
        if not isinstance(n_folds, int) or n_folds < 2:
            raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
        if min_window_size < n_folds:
            raise ValueError(f"min_window_size ({min_window_size}) must be at least n_folds ({n_folds})")
        if not float(regularization) > 0.0:
            raise ValueError(f"regularization must be positive, got {regularization!r}")
        self.n_folds = n_folds
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
        from scipy.stats import norm
        from sklearn.model_selection import StratifiedKFold

        pooled = np.concatenate([reference, current], axis=0)
        is_current = np.zeros(pooled.shape[0], dtype=bool)
        is_current[reference.shape[0] :] = True
        folds = StratifiedKFold(n_splits=self.n_folds, shuffle=True, random_state=self.seed)
        u_sum = mean_sum = variance_sum = 0.0
        fold_aucs = []
        for train, test in folds.split(pooled, is_current):
            model = self._make_estimator().fit(pooled[train], is_current[train])
            if hasattr(model, "predict_proba"):
                scores = model.predict_proba(pooled[test])[:, 1]
            else:
                scores = model.decision_function(pooled[test])
            u, mean, variance, auc = _fold_rank_sum(scores, is_current[test])
            u_sum, mean_sum, variance_sum = u_sum + u, mean_sum + mean, variance_sum + variance
            fold_aucs.append(auc)
        if variance_sum <= 0.0:  # every held-out score tied: the model learned nothing
            z, p_value = 0.0, 1.0
        else:
            z = (u_sum - mean_sum) / math.sqrt(variance_sum)
            p_value = float(norm.sf(z))  # one-sided: only better-than-chance separation is drift
        return DriftScore(
            statistic=float(np.mean(fold_aucs)),
            p_value=p_value,
            metadata={"z": float(z), "fold_auc": tuple(float(a) for a in fold_aucs), "n_folds": self.n_folds},
        )
