"""Conformal novelty count test: does the current window hold more items far from the reference
than the reference itself does?

MMD (``detectors/mmd.py``) asks whether the whole distribution moved, so it also sees a mix
shift among known topics; its permutation p-value cannot go below ``1 / (1 + P)``, and a small
new topic needs several days of windows to clear the page threshold. This test asks one narrower
question, with an exact p-value that has no floor: are there more *novel* items (far from every
reference item) than chance allows?

The test (split conformal outlier detection, Bates, Candès, Lei, Romano & Sesia, "Testing for
outliers with conformal p-values", Annals of Statistics 51(1), 2023; counted over a batch):

1. The reference draw is split at random into two disjoint lanes: a *fit* lane of ``F`` items and
   a *calibration* lane of ``m`` items.
2. Score of an item: the cosine distance to its ``k``-th nearest neighbour in the fit lane (on
   L2-normalised vectors; the deep k-NN out-of-distribution score of Sun, Ming, Zhu & Li, "Out-of-
   distribution detection with deep nearest neighbors", ICML 2022). A new topic's items sit far
   from every known one; known items have close neighbours.
3. ``tau`` is the ``j``-th largest calibration score, ``j = ceil(quantile x m)``; ``C`` counts the
   ``n`` current items scoring above ``tau``. Ties are broken by an independent uniform draw, so
   every score is distinct.

Null distribution. Given the fit lane the score is a fixed function; when the calibration items
and the current items are exchangeable (no drift: both uniform samples of the same traffic) every
ordering of their ``m + n`` scores is equally likely. As for i.i.d. continuous scores, ``F(tau)``
of the ``(m - j + 1)``-th order statistic is ``Beta(m - j + 1, j)``, each current item exceeds
``tau`` with chance ``1 - F(tau) ~ Beta(j, m - j + 1)``, and given it they do so independently:

    C ~ BetaBinomial(n, j, m - j + 1)          (exactly, for any score distribution)

the law of the empirical miscoverage of a split-conformal batch (Marques, "Universal distribution
of the empirical coverage in split conformal prediction", Statistics & Probability Letters, 2023;
the ``Beta`` law of calibration-conditional coverage is Vovk's, "Conditional validity of inductive
conformal predictors", 2012). The p-value ``P(C' >= C)`` is therefore valid, ``P(p <= u) <= u``,
and reaches any page threshold once the count is large enough: no permutation floor.

Cost: ``(m + n) x F`` dot products per test, in row blocks of ``chunk_size`` (peak memory about
``chunk_size x F`` floats); 4,000 items against 5,000 in 384 dimensions is a fraction of a second.
"""

from __future__ import annotations

import math
from typing import Any

from rag_monitor.detectors.base import DriftScore, EmbeddingDriftDetector, blas_threads, fresh_seed

__all__ = ["NoveltyDrift", "count_p_value", "kth_neighbour_distance", "novelty_count", "split_lanes"]


def kth_neighbour_distance(points: Any, fit: Any, k: int, *, chunk_size: int = 1024) -> Any:
    """Cosine distance of each row of ``points`` to its ``k``-th nearest row of ``fit`` (float64).

    Both are L2-normalised here (a zero vector stays zero: distance 1 to everything).
    """
    import numpy as np

    if not 1 <= k <= fit.shape[0]:
        raise ValueError(f"neighbours must be between 1 and the fit lane's size {fit.shape[0]}, got {k}")
    points, fit = _unit(points), _unit(fit)
    out = np.empty(points.shape[0], dtype=np.float64)
    for start in range(0, points.shape[0], max(1, int(chunk_size))):
        similarity = points[start:start + chunk_size] @ fit.T
        # the k-th largest similarity is the k-th nearest neighbour
        kth = np.partition(similarity, similarity.shape[1] - k, axis=1)[:, similarity.shape[1] - k]
        out[start:start + chunk_size] = 1.0 - kth
    return out


def _unit(x: Any) -> Any:
    import numpy as np

    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def split_lanes(n_reference: int, fit_size: int, calibration_size: int, rng: Any) -> tuple[Any, Any]:
    """Random disjoint ``(fit, calibration)`` index lanes of a reference draw of ``n_reference`` items.

    With fewer items than ``fit_size + calibration_size`` the draw is split in the same proportion.
    """
    order = rng.permutation(n_reference)
    wanted = fit_size + calibration_size
    m = calibration_size if n_reference >= wanted else int(round(n_reference * calibration_size / wanted))
    m = max(1, min(m, n_reference - 1))
    f = min(fit_size, n_reference - m)
    return order[m:m + f], order[:m]


def novelty_count(calibration: Any, current: Any, j: int, rng: Any) -> tuple[int, float]:
    """``(C, tau)``: current scores above the ``j``-th largest calibration score, ties broken at random."""
    import numpy as np

    calibration, current = np.asarray(calibration, dtype=np.float64), np.asarray(current, dtype=np.float64)
    if not 1 <= j <= calibration.size:
        raise ValueError(f"j must be between 1 and the calibration lane's size {calibration.size}, got {j}")
    pooled = np.concatenate([calibration, current])
    order = np.lexsort((rng.random(pooled.size), pooled))  # by score, then the uniform tie-breaker
    rank = np.empty(pooled.size, dtype=np.int64)
    rank[order] = np.arange(pooled.size)
    cut = np.sort(rank[:calibration.size])[calibration.size - j]  # the j-th largest calibration rank
    return int(np.count_nonzero(rank[calibration.size:] > cut)), float(pooled[order[cut]])


def count_p_value(count: int, n: int, m: int, j: int) -> float:
    """``P(C' >= count)`` for ``C' ~ BetaBinomial(n, j, m - j + 1)``: the null law of the count."""
    from scipy.stats import betabinom

    return float(min(1.0, max(betabinom.sf(count - 1, n, j, m - j + 1), 0.0)))


class NoveltyDrift(EmbeddingDriftDetector):
    """Are more current items far from the reference than the reference's own share (``quantile``)?

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> known = np.array([1.0] * 7 + [0.02])  # the known topics barely use the last direction
    >>> detector = NoveltyDrift(signal="query_embedding", fit_size=2000, calibration_size=1000, seed=0)
    >>> detector = detector.fit(rng.normal(size=(3000, 8)) * known)
    >>> detector.predict(rng.normal(size=(500, 8)) * known).is_drift
    False
    >>> new_topic = np.eye(8)[7] + rng.normal(size=(50, 8)) * 0.05  # a tenth of the window, all in it
    >>> detector.predict(np.vstack([rng.normal(size=(450, 8)) * known, new_topic])).is_drift
    True

    Parameters
    ----------
    fit_size, calibration_size
        The two lanes split at random from the reference draw the detector is fitted on (in the
        same proportion when it holds fewer items).
    neighbours
        ``k``: the score is the cosine distance to the ``k``-th nearest fit item.
    quantile
        The calibration exceedance level: ``tau`` is the ``ceil(quantile x m)``-th largest
        calibration score, so about this share of no-drift items score above it.
    seed
        Seed of the lane split and the tie-breaker; ``None`` draws a fresh one per call (recorded).
    chunk_size, threads, min_window_size, alpha, signal
        As for ``MMDDrift``.
    """

    detector_name = "novelty"

    def __init__(self, *, alpha: float = 0.05, signal: str = "", fit_size: int = 5000, calibration_size: int = 2000,
                 neighbours: int = 5, quantile: float = 0.01, seed: int | None = None, chunk_size: int = 1024,
                 threads: int | None = 1, min_window_size: int = 10) -> None:
        super().__init__(alpha=alpha, signal=signal, min_window_size=min_window_size)
        for name, value in (("fit_size", fit_size), ("calibration_size", calibration_size),
                            ("neighbours", neighbours), ("chunk_size", chunk_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(quantile, (int, float)) and 0.0 < float(quantile) < 1.0):
            raise ValueError(f"quantile must be strictly between 0 and 1, got {quantile!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.fit_size, self.calibration_size = fit_size, calibration_size
        self.neighbours, self.quantile = neighbours, float(quantile)
        self.seed, self.chunk_size, self.threads = seed, chunk_size, threads

    def _score(self, reference: Any, current: Any) -> DriftScore:
        import numpy as np

        seed = fresh_seed() if self.seed is None else self.seed
        rng = np.random.default_rng(seed)
        fit_lane, calibration_lane = split_lanes(reference.shape[0], self.fit_size, self.calibration_size, rng)
        k = min(self.neighbours, fit_lane.size)
        with blas_threads(self.threads):
            scores = kth_neighbour_distance(np.concatenate([reference[calibration_lane], current]),
                                            reference[fit_lane], k, chunk_size=self.chunk_size)
        m, n = calibration_lane.size, current.shape[0]
        j = max(1, math.ceil(self.quantile * m))
        count, tau = novelty_count(scores[:m], scores[m:], j, rng)
        return DriftScore(
            statistic=count / n,
            p_value=count_p_value(count, n, m, j),
            metadata={"novel_count": count, "expected_count": n * j / (m + 1), "tau": tau, "j": j,
                      "calibration_size": m, "fit_size": int(fit_lane.size), "neighbours": k,
                      "quantile": self.quantile, "seed": seed},
        )
