"""Maximum mean discrepancy (MMD) drift test on embedding vectors, aggregated over bandwidths.

- Gaussian kernels ``k(x, y) = exp(-|x - y|² / (2 sigma²))``. The *median heuristic* width
  ``sigma_med`` (``sigma² = median(|x_i - x_j|²) / 2`` over distinct reference pairs, the lower
  median, as alibi-detect computes it) is set once at ``fit``; the test uses the widths
  ``sigma_med x m`` for every multiplier ``m`` in ``bandwidths``.
- Statistic per width: the unbiased MMD² (kernel diagonal zeroed, ``1/(n(n-1))``).
- Aggregation (MMDAgg-style, Schrab et al. 2023, with a max of standardised statistics as in
  MMD-FUSE's spirit): every width's statistics over the observed split and the ``P`` permuted
  splits are standardised by their mean and standard deviation over those ``P + 1`` rows, and
  the test statistic of a split is the largest standardised value over the widths. One width
  (``bandwidths=(1.0,)``) is the classic single-bandwidth median-heuristic test.
- p-value: ``(1 + #{permuted >= observed}) / (1 + P)``, valid (never 0) because the observed
  split is one of the equally likely relabellings under no drift; the standardisation uses all
  ``P + 1`` rows symmetrically, so it does not break that.

- Nearest neighbours (``neighbours=k``, Schilling 1986 / Henze 1988): one more statistic joins
  the aggregation, the number of pairs ``(i, j)``, ``j`` among the ``k`` nearest neighbours of
  ``i`` in the pooled sample, whose two items sit in the same window. The neighbour graph is
  fixed before any relabelling, so its permutation distribution is exact as well. It sees a
  small new cluster (a new topic is a few percent of traffic packed in one spot) that a
  kernel width set for the whole distribution averages away.

Cost: the pairwise distances are computed once, strip by strip; each width turns a strip into
kernel values and every split's statistic comes from one matrix product with a ``(P + 1, N)``
weight matrix (``diag(W K Wᵀ)``), so the kernel matrix is never stored whole and permutations
are never re-summed one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Iterator

from rag_monitor.detectors.base import DegenerateWindowError, DriftScore, EmbeddingDriftDetector, blas_threads, fresh_seed

__all__ = [
    "DEFAULT_BANDWIDTHS",
    "MMDDrift",
    "aggregate_p_value",
    "knn_graph",
    "knn_permutation_statistics",
    "median_heuristic_sigma",
    "mmd2_permutation_statistics",
    "permutation_labels",
]

DEFAULT_BANDWIDTHS = (0.5, 0.7, 1.0, 1.4)
"""Multipliers of the median-heuristic width; chosen by ``benchmarks/drift_power.py`` (a new
topic is a tight cluster, seen best by widths below the median)."""

DEFAULT_NEIGHBOURS = 0
"""Neighbours of the nearest-neighbour statistic in a bare ``MMDDrift`` (0: none, the pure kernel
test); the shipped embedding profiles set 10 (``rag_monitor/defaults/detectors/profiles.yaml``, measured by
``benchmarks/drift_power.py``)."""

DEGENERATE_RELATIVE_DISTANCE = 1e-5
"""A median squared distance below this share of the mean squared norm is float32 rounding
noise of identical vectors (|x|² + |y|² - 2x·y cancels to ~1e-7 |x|², not to 0)."""


def median_heuristic_sigma(reference: Any, *, max_points: int | None = 2000, seed: int = 0) -> float:
    """Kernel width from the median pairwise squared distance of the reference window.

    ``sigma = sqrt(median(|x_i - x_j|²) / 2)`` over distinct pairs ``i < j`` (lower median).
    Above ``max_points`` vectors a seeded random subset is used. Raises
    ``DegenerateWindowError`` when more than half the pairs are (near-)identical.
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
    lower_median = float(np.partition(pairs, (pairs.size - 1) // 2)[(pairs.size - 1) // 2])
    scale = float(np.mean(squared_norms)) if squared_norms.size else 0.0
    if lower_median <= DEGENERATE_RELATIVE_DISTANCE * max(scale, 1e-30):
        raise DegenerateWindowError(
            "more than half of the reference vectors are identical or nearly so (median squared distance "
            f"{lower_median:.3g} against a mean squared norm of {scale:.3g}): no kernel width can be inferred; "
            "capture a reference of real traffic (rag-monitor drift reference reset) or pass bandwidth= explicitly"
        )
    return float(np.sqrt(0.5 * lower_median))


def permutation_labels(n_reference: int, n_current: int, n_permutations: int, seed: int | None) -> Any:
    """The observed split followed by ``n_permutations`` random relabellings, as booleans.

    Row 0 marks the current window as it was observed (the last ``n_current`` positions of
    the pooled sample); each further row is a uniformly random permutation of it.
    """
    import numpy as np

    observed = np.zeros(n_reference + n_current, dtype=bool)
    observed[n_reference:] = True
    rng = np.random.default_rng(seed)
    permuted = rng.permuted(np.tile(observed, (n_permutations, 1)), axis=1)
    return np.vstack([observed[None, :], permuted])


def _distance_strips(pooled: Any, chunk_size: int) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(start, stop, strip)``: squared distances of rows ``start:stop`` to columns ``start:``."""
    import numpy as np

    squared_norms = np.einsum("ij,ij->i", pooled, pooled)
    for start in range(0, pooled.shape[0], chunk_size):
        stop = min(start + chunk_size, pooled.shape[0])
        strip = pooled[start:stop] @ pooled[start:].T
        strip *= -2.0
        strip += squared_norms[start:stop, None]
        strip += squared_norms[None, start:]
        np.maximum(strip, 0.0, out=strip)
        yield start, stop, strip


def mmd2_permutation_statistics(pooled: Any, labels: Any, sigma: float | Sequence[float], *,
                                chunk_size: int | None = 512) -> Any:
    """Unbiased MMD² of every split in ``labels`` (rows of booleans, True = current window).

    ``sigma`` one width: returns ``(n_splits,)``; a sequence of widths: ``(n_widths, n_splits)``.
    With weights ``w = 1/n`` on reference positions and ``-1/m`` on current ones, ``wᵀ K₀ w``
    (``K₀`` the kernel, diagonal zeroed) gives the statistic together with ``w·(K₀ 1)`` and
    ``1ᵀ K₀ 1``, since the window indicators are affine in ``w``. Float64 results.
    """
    import numpy as np

    single = np.ndim(sigma) == 0
    sigmas = [float(sigma)] if single else [float(s) for s in sigma]
    labels = np.asarray(labels, dtype=bool)
    n_total = pooled.shape[0]
    n_current = int(labels[0].sum())
    n_reference = n_total - n_current
    if not (labels.sum(axis=1) == n_current).all():
        raise ValueError("every split must keep the current window's size")
    if n_reference < 2 or n_current < 2:
        raise ValueError("the unbiased MMD² needs at least two vectors in each window")
    weights = np.where(labels, -1.0 / n_current, 1.0 / n_reference).astype(pooled.dtype)
    chunk = n_total if chunk_size is None else max(1, int(chunk_size))
    gammas = [1.0 / (2.0 * s * s) for s in sigmas]

    weighted = np.zeros((len(sigmas),) + weights.shape, dtype=pooled.dtype)  # W K₀ per width
    row_sums = np.zeros((len(sigmas), n_total), dtype=np.float64)  # K₀ 1 per width
    for start, stop, distances in _distance_strips(pooled, chunk):
        for b, gamma in enumerate(gammas):
            strip = np.multiply(distances, -gamma)
            np.exp(strip, out=strip)
            np.fill_diagonal(strip[:, : stop - start], 0.0)
            # strip holds K₀[start:stop, start:]; its transpose stands for the lower triangle.
            weighted[b][:, start:] += weights[:, start:stop] @ strip
            row_sums[b, start:] += strip.sum(axis=0, dtype=np.float64)
            if stop < n_total:
                off_diagonal = strip[:, stop - start :]
                weighted[b][:, start:stop] += weights[:, stop:] @ off_diagonal.T
                row_sums[b, start:stop] += off_diagonal.sum(axis=1, dtype=np.float64)

    weights64 = weights.astype(np.float64)
    n, m = float(n_reference), float(n_current)
    scale = 1.0 / n + 1.0 / m
    out = np.empty((len(sigmas), labels.shape[0]), dtype=np.float64)
    for b in range(len(sigmas)):
        quadratic = np.einsum("pj,pj->p", weighted[b].astype(np.float64), weights64)  # wᵀ K₀ w
        linear = weights64 @ row_sums[b]
        total = row_sums[b].sum()
        within_reference = (quadratic + 2.0 * linear / m + total / (m * m)) / (scale * scale)
        within_current = (quadratic - 2.0 * linear / n + total / (n * n)) / (scale * scale)
        out[b] = quadratic + within_reference / (n * n * (n - 1.0)) + within_current / (m * m * (m - 1.0))
    return out[0] if single else out


def knn_graph(pooled: Any, k: int, *, chunk_size: int | None = 512, seed: int | None = None) -> Any:
    """``(N, k)`` indices of each pooled vector's ``k`` nearest others (squared Euclidean distance).

    Ties (repeated vectors: popular documents) are broken in a random order drawn from ``seed``,
    never by position: the pooled sample lists the reference first, so breaking ties by position
    would tie the graph to the observed labels and break the permutation test.
    """
    import numpy as np

    n_total = pooled.shape[0]
    if not 1 <= k < n_total:
        raise ValueError(f"neighbours must be between 1 and {n_total - 1}, got {k}")
    # a stream of its own: the permutations come from ``seed`` itself
    order = np.random.default_rng(None if seed is None else [seed, 0x6B6E6E]).permutation(n_total)
    shuffled = pooled[order]
    chunk = n_total if chunk_size is None else max(1, int(chunk_size))
    squared_norms = np.einsum("ij,ij->i", shuffled, shuffled)
    out = np.empty((n_total, k), dtype=np.int64)
    for start in range(0, n_total, chunk):
        stop = min(start + chunk, n_total)
        distances = shuffled[start:stop] @ shuffled.T
        distances *= -2.0
        distances += squared_norms[None, :]  # the row's own norm does not change its ranking
        distances[np.arange(stop - start), np.arange(start, stop)] = np.inf
        out[order[start:stop]] = order[np.argpartition(distances, k - 1, axis=1)[:, :k]]
    return out


def knn_permutation_statistics(neighbours: Any, labels: Any) -> Any:
    """``(n_splits,)`` counts of neighbour pairs inside one window, per split of ``labels``."""
    import numpy as np

    labels = np.asarray(labels, dtype=bool)
    out = np.empty(labels.shape[0], dtype=np.float64)
    for row in range(labels.shape[0]):  # one split at a time keeps memory at N x k
        split = labels[row]
        out[row] = np.count_nonzero(split[:, None] == split[neighbours])
    return out


def aggregate_p_value(statistics: Any) -> tuple[float, Any, int]:
    """``(p_value, aggregated, best_width)`` from ``(n_widths, 1 + P)`` statistics (row 0 observed).

    Each width's row is standardised over all ``1 + P`` splits; a split's aggregated statistic
    is its largest standardised value; ``p = (1 + #{permuted >= observed}) / (1 + P)``.
    """
    import numpy as np

    statistics = np.atleast_2d(np.asarray(statistics, dtype=np.float64))
    spread = statistics.std(axis=1, keepdims=True)
    standardised = (statistics - statistics.mean(axis=1, keepdims=True)) / np.where(spread > 0, spread, 1.0)
    aggregated = standardised.max(axis=0)
    observed, permuted = aggregated[0], aggregated[1:]
    p_value = (1.0 + float(np.sum(permuted >= observed))) / (1.0 + permuted.size)
    return p_value, aggregated, int(np.argmax(standardised[:, 0]))


class MMDDrift(EmbeddingDriftDetector):
    """Kernel two-sample test: has the distribution of embedding vectors moved?

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
        Significance level of one window's test (the page decision is separate, see
        ``rag_monitor.detectors.paging``).
    signal
        Name of the watched signal, copied into results.
    n_permutations
        Random relabellings ``P``; the smallest possible p-value is ``1 / (1 + P)``.
    bandwidth
        An explicit kernel width ``sigma`` (one width, no median heuristic).
    bandwidths
        Multipliers of the median-heuristic width, aggregated (default ``DEFAULT_BANDWIDTHS``);
        ``(1.0,)`` is the single-bandwidth test.
    neighbours
        ``k`` of the nearest-neighbour statistic aggregated with the kernel widths (0: none).
    median_max_points
        The median heuristic looks at pairs among at most this many reference vectors.
    chunk_size
        Kernel rows evaluated at once (peak memory about ``chunk_size x N`` floats per width).
    dtype
        ``"float32"`` (default) or ``"float64"``.
    seed
        Seed of the permutations. ``None`` (default) draws a fresh seed on every call and
        reports it in the result's metadata, so a run can be replayed.
    threads
        BLAS threads while scoring (default 1, so a drift job never starves the agent).
    min_window_size
        Fewest vectors accepted in a window.
    """

    detector_name = "mmd"

    def __init__(
        self,
        *,
        alpha: float = 0.05,
        signal: str = "",
        n_permutations: int = 300,
        bandwidth: float | None = None,
        bandwidths: Sequence[float] = DEFAULT_BANDWIDTHS,
        neighbours: int = DEFAULT_NEIGHBOURS,
        median_max_points: int | None = 2000,
        chunk_size: int | None = 512,
        dtype: str = "float32",
        seed: int | None = None,
        threads: int | None = 1,
        min_window_size: int = 10,
    ) -> None:
        super().__init__(alpha=alpha, signal=signal, min_window_size=min_window_size)
        if not isinstance(n_permutations, int) or n_permutations < 1:
            raise ValueError(f"n_permutations must be a positive integer, got {n_permutations!r}")
        if bandwidth is not None and not (float(bandwidth) > 0.0):
            raise ValueError(f"bandwidth must be a positive distance, got {bandwidth!r}")
        bandwidths = tuple(float(b) for b in bandwidths)
        if not bandwidths or not all(b > 0.0 for b in bandwidths):
            raise ValueError(f"bandwidths must be positive multipliers of the median width, got {bandwidths!r}")
        if not isinstance(neighbours, int) or neighbours < 0:
            raise ValueError(f"neighbours must be a non-negative integer, got {neighbours!r}")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.n_permutations = n_permutations
        self.bandwidth = None if bandwidth is None else float(bandwidth)
        self.bandwidths = bandwidths
        self.neighbours = neighbours
        self.median_max_points = median_max_points
        self.chunk_size = chunk_size
        self._dtype = dtype
        self.seed = seed
        self.threads = threads
        self.sigma_: float | None = None
        """The median-heuristic (or explicit) kernel width, set by ``fit``."""

    @property
    def sigmas_(self) -> tuple[float, ...]:
        """The kernel widths the test aggregates."""
        if self.sigma_ is None:
            return ()
        if self.bandwidth is not None:
            return (self.sigma_,)
        return tuple(self.sigma_ * b for b in self.bandwidths)

    def fit(self, reference: Any) -> "MMDDrift":
        """Set the reference window (``(n, dim)`` vectors) and, by default, the kernel widths."""
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
        with blas_threads(self.threads):
            self.sigma_ = median_heuristic_sigma(self._reference, max_points=self.median_max_points, seed=0)

    def _score(self, reference: Any, current: Any) -> DriftScore:
        import numpy as np

        if self.sigma_ is None:  # fit sets it; only reachable if a subclass skips fit
            self._configure_kernel()
        seed = fresh_seed() if self.seed is None else self.seed
        pooled = np.concatenate([reference, current], axis=0)
        labels = permutation_labels(reference.shape[0], current.shape[0], self.n_permutations, seed)
        sigmas = self.sigmas_
        with blas_threads(self.threads):
            statistics = np.atleast_2d(mmd2_permutation_statistics(pooled, labels, sigmas, chunk_size=self.chunk_size))
            if self.neighbours:
                k = min(self.neighbours, pooled.shape[0] - 1)
                graph = knn_graph(pooled, k, chunk_size=self.chunk_size, seed=seed)
                counts = knn_permutation_statistics(graph, labels)
                statistics = np.vstack([statistics, counts[None, :]])
        p_value, _, best = aggregate_p_value(statistics)
        knn_best = best == len(sigmas)
        kernel_best = aggregate_p_value(statistics[: len(sigmas)])[2] if knn_best else best
        return DriftScore(
            statistic=float(statistics[kernel_best, 0]),
            p_value=p_value,
            metadata={
                "sigma": self.sigma_,
                "sigmas": ",".join(f"{s:.4g}" for s in sigmas),
                "best_sigma": sigmas[kernel_best],
                "best_statistic": "neighbours" if knn_best else "kernel",
                "neighbours": self.neighbours,
                "n_permutations": self.n_permutations,
                "seed": seed,
                "dtype": self._dtype,
            },
        )
