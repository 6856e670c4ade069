"""Maximum mean discrepancy (MMD) drift test on embedding vectors, with a permutation test.

The test follows alibi-detect's ``MMDDrift`` so that, on the same data, both report the same
statistic and p-values that agree up to the Monte-Carlo noise of their permutations:

- Gaussian kernel ``k(x, y) = exp(-|x - y|² / (2 sigma²))``; by default ``sigma`` is the
  median heuristic computed once, on the reference window, at ``fit``
  (``sigma² = median(|x_i - x_j|²) / 2`` over distinct reference pairs, the lower median:
  alibi-detect's default ``configure_kernel_from_x_ref=True`` with ``sigma_median``).
- Statistic: the unbiased MMD² (kernel diagonal zeroed, ``1/(n(n-1))`` normalisation).
- p-value: the share of permuted statistics ``>=`` the observed one; drift when
  ``p < alpha``.

What differs is the cost. Rather than permuting and re-summing an ``N x N`` kernel matrix
once per permutation, every permutation (and the observed split) becomes one row of a
``(P, N)`` weight matrix ``W`` and all statistics come from one more matrix product,
``diag(W K Wᵀ) = ((W K) * W).sum(1)``. ``W K`` is accumulated strip by strip while the kernel
is computed, so the full kernel matrix is never stored (``chunk_size`` rows at a time, and
only the upper triangle of the symmetric kernel is evaluated).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from rag_monitor.detectors.base import DriftScore, EmbeddingDriftDetector

__all__ = ["MMDDrift", "median_heuristic_sigma", "permutation_labels", "mmd2_permutation_statistics"]


def median_heuristic_sigma(reference: Any, *, max_points: int | None = 2000, seed: int = 0) -> float:
    """Kernel bandwidth from the median pairwise squared distance of the reference window.

    ``sigma = sqrt(median(|x_i - x_j|²) / 2)`` over distinct pairs ``i < j`` (lower median),
    as alibi-detect computes it. Above ``max_points`` vectors a seeded random subset is used:
    the median of 2,000 points' two million pairs is already stable, and all pairs of 10,000
    would need 400 MB.
    """
    import numpy as np

    points = np.asarray(reference)
    if max_points is not None and points.shape[0] > max_points:
        chosen = np.random.default_rng(seed).choice(points.shape[0], size=max_points, replace=False)
        points = points[np.sort(chosen)]
    squared_norms = np.einsum("ij,ij->i", points, points)
    distances = squared_norms[:, None] + squared_norms[None, :] - 2.0 * (points @ points.T)
    pairs = distances[np.triu_indices(points.shape[0], k=1)]
    if pairs.size == 0:
        raise ValueError("the median heuristic needs at least two reference vectors")
    np.maximum(pairs, 0.0, out=pairs)
    lower_median = np.partition(pairs, (pairs.size - 1) // 2)[(pairs.size - 1) // 2]
    if lower_median <= 0.0:
        raise ValueError(
            "more than half of the reference vectors are identical: the median distance is 0, "
            "so no kernel bandwidth can be inferred (pass bandwidth= explicitly)"
        )
    return float(np.sqrt(0.5 * float(lower_median)))


def permutation_labels(n_reference: int, n_current: int, n_permutations: int, seed: int | None) -> Any:
    """The observed split followed by ``n_permutations`` random relabellings, as booleans.

    Row 0 marks the current window as it was observed (the last ``n_current`` positions of
    the pooled sample); each further row is a uniformly random permutation of it. The same
    seed gives the same rows.
    """
    import numpy as np

    observed = np.zeros(n_reference + n_current, dtype=bool)
    observed[n_reference:] = True
    rng = np.random.default_rng(seed)
    permuted = rng.permuted(np.tile(observed, (n_permutations, 1)), axis=1)
    return np.vstack([observed[None, :], permuted])


def _kernel_strips(pooled: Any, gamma: float, chunk_size: int) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(start, stop, strip)``: rows ``start:stop`` of the kernel, columns ``start:``.

    Only the upper triangle (and the diagonal block) of the symmetric kernel is computed;
    the diagonal is zeroed as the unbiased statistic requires.
    """
    import numpy as np

    n_total = pooled.shape[0]
    squared_norms = np.einsum("ij,ij->i", pooled, pooled)
    for start in range(0, n_total, chunk_size):
        stop = min(start + chunk_size, n_total)
        strip = pooled[start:stop] @ pooled[start:].T
        # |x - y|² = |x|² + |y|² - 2 x·y, then exp(-gamma d²), all in place
        strip *= -2.0
        strip += squared_norms[start:stop, None]
        strip += squared_norms[None, start:]
        np.maximum(strip, 0.0, out=strip)
        strip *= -gamma
        np.exp(strip, out=strip)
        np.fill_diagonal(strip[:, : stop - start], 0.0)
        yield start, stop, strip


def mmd2_permutation_statistics(
    pooled: Any, labels: Any, sigma: float, *, chunk_size: int | None = 512
) -> Any:
    """Unbiased MMD² of every split in ``labels`` (rows of booleans, True = current window).

    All splits come from the same kernel, evaluated once, strip by strip: with the weights
    ``w = 1/n`` on reference positions and ``-1/m`` on current ones, ``wᵀ K₀ w`` (``K₀`` the
    kernel with its diagonal zeroed) is the biased-normalised statistic, and the unbiased one
    adds two within-window terms recovered from ``wᵀ K₀ w``, ``w·(K₀ 1)`` and ``1ᵀ K₀ 1``,
    since the window indicators are affine in ``w``. Returns float64 statistics, one per row.
    """
    import numpy as np

    labels = np.asarray(labels, dtype=bool)
    n_total = pooled.shape[0]
    n_current = int(labels[0].sum())
    n_reference = n_total - n_current
    if not (labels.sum(axis=1) == n_current).all():
        raise ValueError("every split must keep the current window's size")
    if n_reference < 2 or n_current < 2:
        raise ValueError("the unbiased MMD² needs at least two vectors in each window")
    weights = np.where(labels, -1.0 / n_current, 1.0 / n_reference).astype(pooled.dtype)
    gamma = 1.0 / (2.0 * sigma * sigma)
    chunk = n_total if chunk_size is None else max(1, int(chunk_size))

    weighted_kernel = np.zeros(weights.shape, dtype=pooled.dtype)  # W K₀, filled strip by strip
    row_sums = np.zeros(n_total, dtype=np.float64)  # K₀ 1
    for start, stop, strip in _kernel_strips(pooled, gamma, chunk):
        # strip holds K₀[start:stop, start:]; its transpose stands for the lower triangle.
        weighted_kernel[:, start:] += weights[:, start:stop] @ strip
        row_sums[start:] += strip.sum(axis=0, dtype=np.float64)
        if stop < n_total:
            off_diagonal = strip[:, stop - start :]
            weighted_kernel[:, start:stop] += weights[:, stop:] @ off_diagonal.T
            row_sums[start:stop] += off_diagonal.sum(axis=1, dtype=np.float64)

    weights64 = weights.astype(np.float64)
    quadratic = np.einsum("pj,pj->p", weighted_kernel.astype(np.float64), weights64)  # wᵀ K₀ w
    linear = weights64 @ row_sums  # w · K₀ 1
    total = row_sums.sum()  # 1ᵀ K₀ 1
    n, m = float(n_reference), float(n_current)
    scale = 1.0 / n + 1.0 / m
    # reference indicator a = (w + 1/m) / scale and current indicator b = (1/n - w) / scale
    within_reference = (quadratic + 2.0 * linear / m + total / (m * m)) / (scale * scale)
    within_current = (quadratic - 2.0 * linear / n + total / (n * n)) / (scale * scale)
    return quadratic + within_reference / (n * n * (n - 1.0)) + within_current / (m * m * (m - 1.0))


@contextlib.contextmanager
def _blas_threads(threads: int | None) -> Iterator[None]:
    if threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        yield


class MMDDrift(EmbeddingDriftDetector):
    """Kernel two-sample test: has the distribution of embedding vectors moved?

    MMD compares every vector with every other through a Gaussian kernel, so it notices a
    change in *where* queries land in embedding space (new topics, a different user base,
    another language) without labels. A permutation test turns the distance into a p-value.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> detector = MMDDrift(signal="query_embedding", seed=0).fit(rng.normal(size=(300, 8)))
    >>> detector.predict(rng.normal(size=(200, 8))).is_drift
    False
    >>> detector.predict(rng.normal(0.5, 1.0, size=(200, 8))).is_drift
    True

    Parameters
    ----------
    alpha
        Significance level: the false-alarm rate accepted on windows that did not drift.
    signal
        Name of the watched signal (``query_embedding``, ``document_embedding``), copied
        into results.
    n_permutations
        Random relabellings of the pooled windows used to estimate the p-value. 100 resolves
        p-values to about ±0.02 near 0.05; more is steadier and costs one row each.
    bandwidth
        Kernel width ``sigma`` in embedding-distance units. ``None`` (default) sets it from
        the reference at ``fit`` with the median heuristic, as alibi-detect does.
    median_max_points
        The median heuristic looks at pairs among at most this many reference vectors.
    chunk_size
        Kernel rows evaluated at once. Peak memory is about ``chunk_size x (n_ref + n_cur)``
        floats instead of the full square; ``None`` evaluates it in one piece.
    dtype
        ``"float32"`` (default, BLAS single precision, as alibi-detect on float32 input) or
        ``"float64"``.
    seed
        Seed of the permutations: the same seed, reference and window give the same p-value.
        ``None`` draws fresh permutations on every call.
    threads
        BLAS threads used while scoring (default 1, so a drift job never starves the agent);
        ``None`` leaves the BLAS library's own setting.
    min_window_size
        Fewest vectors accepted in a window.
    """

    detector_name = "mmd"

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        signal: str = "",
        n_permutations: int = 100,
        bandwidth: float | None = None,
        median_max_points: int | None = 2000,
        chunk_size: int | None = 512,
        dtype: str = "float32",
        seed: int | None = 0,
        threads: int | None = 1,
        min_window_size: int = 10,
    ) -> None:
        super().__init__(alpha=alpha, signal=signal, min_window_size=min_window_size)
        if not isinstance(n_permutations, int) or n_permutations < 1:
            raise ValueError(f"n_permutations must be a positive integer, got {n_permutations!r}")
        if bandwidth is not None and not (float(bandwidth) > 0.0):
            raise ValueError(f"bandwidth must be a positive distance, got {bandwidth!r}")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.n_permutations = n_permutations
        self.bandwidth = None if bandwidth is None else float(bandwidth)
        self.median_max_points = median_max_points
        self.chunk_size = chunk_size
        self._dtype = dtype
        self.seed = seed
        self.threads = threads
        self.sigma_: float | None = None
        """The kernel width in use, set by ``fit``."""

    def fit(self, reference: Any) -> "MMDDrift":
        """Set the reference window (``(n, dim)`` vectors) and, by default, the kernel width."""
        super().fit(reference)
        self._configure_kernel()
        return self

    def update_reference(self, batch: Any, *, max_size: int | None = None) -> None:
        """Append to the reference and re-derive the median-heuristic width from it."""
        super().update_reference(batch, max_size=max_size)
        self._configure_kernel()

    def _configure_kernel(self) -> None:
        if self.bandwidth is not None:
            self.sigma_ = self.bandwidth
            return
        with _blas_threads(self.threads):
            self.sigma_ = median_heuristic_sigma(
                self._reference, max_points=self.median_max_points, seed=0 if self.seed is None else self.seed
            )

    def _score(self, reference: Any, current: Any) -> DriftScore:
        import numpy as np

        if self.sigma_ is None:  # fit sets both; only reachable if a subclass skips fit
            self._configure_kernel()
        pooled = np.concatenate([reference, current], axis=0)
        labels = permutation_labels(reference.shape[0], current.shape[0], self.n_permutations, self.seed)
        with _blas_threads(self.threads):
            statistics = mmd2_permutation_statistics(pooled, labels, self.sigma_, chunk_size=self.chunk_size)
        observed, permuted = float(statistics[0]), statistics[1:]
        p_value = float(np.mean(permuted >= observed))
        # the MMD² a window would need to be flagged, as alibi-detect reports it
        distance_threshold = float(np.sort(permuted)[::-1][int(self.alpha * permuted.size)])
        return DriftScore(
            statistic=observed,
            p_value=p_value,
            metadata={
                "sigma": self.sigma_,
                "n_permutations": self.n_permutations,
                "distance_threshold": distance_threshold,
                "seed": self.seed,
                "dtype": self._dtype,
            },
        )
