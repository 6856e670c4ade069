"""MMDDrift: verdicts on synthetic shifts, and the one-matrix permutation test against a naive loop."""

from __future__ import annotations

import numpy as np
import pytest

from rag_monitor.detectors import DriftResult, MMDDrift
from rag_monitor.detectors.mmd import median_heuristic_sigma, mmd2_permutation_statistics, permutation_labels


def gaussian(rng: np.random.Generator, n: int, dim: int = 8, mean: float = 0.0) -> np.ndarray:
    return rng.normal(mean, 1.0, size=(n, dim))


def naive_permutation_p_value(reference, current, sigma, n_permutations, seed):
    """Textbook version: full kernel, then one relabelled sum per permutation (float64)."""
    pooled = np.concatenate([reference, current]).astype(np.float64)
    squared = ((pooled[:, None, :] - pooled[None, :, :]) ** 2).sum(-1)
    kernel = np.exp(-squared / (2 * sigma**2))
    np.fill_diagonal(kernel, 0.0)

    def unbiased_mmd2(is_current):
        ref, cur = ~is_current, is_current
        n, m = ref.sum(), cur.sum()
        return (
            kernel[np.ix_(ref, ref)].sum() / (n * (n - 1))
            + kernel[np.ix_(cur, cur)].sum() / (m * (m - 1))
            - 2 * kernel[np.ix_(ref, cur)].mean()
        )

    labels = permutation_labels(len(reference), len(current), n_permutations, seed)
    statistics = np.array([unbiased_mmd2(row) for row in labels])
    return (1 + float(np.sum(statistics[1:] >= statistics[0]))) / (1 + n_permutations), statistics


def test_same_distribution_gives_high_p_value_and_mean_shift_low():
    rng = np.random.default_rng(0)
    detector = MMDDrift(signal="query_embedding", seed=1).fit(gaussian(rng, 200))
    same = detector.predict(gaussian(rng, 150))
    shifted = detector.predict(gaussian(rng, 150, mean=0.6))
    assert isinstance(same, DriftResult)
    assert not same.is_drift and same.p_value > 0.2
    assert shifted.is_drift and shifted.p_value == 1 / (1 + detector.n_permutations)  # never 0
    assert shifted.statistic > 10 * abs(same.statistic)
    assert (shifted.detector, shifted.signal, shifted.threshold) == ("mmd", "query_embedding", 0.05)
    assert (shifted.n_reference, shifted.n_current) == (200, 150)
    assert shifted.metadata["sigma"] == detector.sigma_


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_matrix_permutation_test_matches_naive_loop(dtype):
    rng = np.random.default_rng(3)
    reference, current = gaussian(rng, 40), gaussian(rng, 30, mean=0.1)
    detector = MMDDrift(n_permutations=200, seed=11, dtype=dtype, chunk_size=16, bandwidths=(1.0,)).fit(reference)
    result = detector.predict(current)
    naive_p, naive_statistics = naive_permutation_p_value(reference, current, detector.sigma_, 200, seed=11)
    assert result.p_value == naive_p
    tolerance = 1e-12 if dtype == "float64" else 1e-6
    assert result.statistic == pytest.approx(naive_statistics[0], abs=tolerance)
    assert 0.0 < naive_p < 1.0  # an informative case: neither extreme


def test_chunked_equals_unchunked():
    rng = np.random.default_rng(5)
    pooled = gaussian(rng, 75, dim=6)
    labels = permutation_labels(45, 30, 50, seed=2)
    whole = mmd2_permutation_statistics(pooled, labels, 1.7, chunk_size=None)
    for chunk_size in (1, 7, 32, 74, 1000):
        np.testing.assert_allclose(mmd2_permutation_statistics(pooled, labels, 1.7, chunk_size=chunk_size), whole, rtol=0, atol=1e-13)


def test_same_seed_same_p_value_and_seed_none_draws_fresh_permutations():
    rng = np.random.default_rng(8)
    reference, current = gaussian(rng, 60), gaussian(rng, 60, mean=0.1)
    first = MMDDrift(seed=4).fit(reference).predict(current)
    again = MMDDrift(seed=4).fit(reference).predict(current)
    assert first == again
    unseeded = MMDDrift(n_permutations=500).fit(reference)  # the default: a fresh seed per run
    results = [unseeded.predict(current) for _ in range(4)]
    assert len({r.p_value for r in results}) > 1
    seeds = [r.metadata["seed"] for r in results]
    assert len(set(seeds)) == 4  # recorded, so a run can be replayed:
    replay = MMDDrift(n_permutations=500, seed=seeds[0]).fit(reference).predict(current)
    assert replay.p_value == results[0].p_value


def test_median_heuristic_matches_alibi_definition():
    rng = np.random.default_rng(9)
    points = gaussian(rng, 31, dim=4)
    distances = ((points[:, None] - points[None]) ** 2).sum(-1)
    # alibi-detect: sorted flattened matrix, index n + (n*n - n) // 2 - 1 skips the zero diagonal
    n = len(points)
    expected = np.sqrt(0.5 * np.sort(distances.ravel())[n + (n * n - n) // 2 - 1])
    assert median_heuristic_sigma(points) == pytest.approx(expected, rel=1e-12)


def test_predict_does_not_mutate_reference():
    rng = np.random.default_rng(2)
    reference = gaussian(rng, 50)
    detector = MMDDrift().fit(reference)
    stored = detector._reference.copy()
    sigma = detector.sigma_
    for _ in range(3):
        detector.predict(gaussian(rng, 40, mean=1.0))
    np.testing.assert_array_equal(detector._reference, stored)
    assert detector.sigma_ == sigma and detector.n_reference == 50


def test_update_reference_appends_and_trims():
    rng = np.random.default_rng(2)
    detector = MMDDrift().fit(gaussian(rng, 50))
    old_sigma = detector.sigma_
    newest = gaussian(rng, 30, mean=2.0)
    detector.update_reference(newest, max_size=40)
    assert detector.n_reference == 40
    np.testing.assert_array_equal(detector._reference[-30:], newest.astype(np.float32))
    assert detector.sigma_ != old_sigma  # the kernel width follows the new reference


def test_multi_bandwidth_statistics_equal_one_width_at_a_time():
    rng = np.random.default_rng(6)
    pooled = gaussian(rng, 60, dim=5)
    labels = permutation_labels(35, 25, 30, seed=3)
    several = mmd2_permutation_statistics(pooled, labels, [0.8, 1.7, 3.0], chunk_size=11)
    for row, sigma in zip(several, [0.8, 1.7, 3.0]):
        np.testing.assert_allclose(row, mmd2_permutation_statistics(pooled, labels, sigma, chunk_size=None), atol=1e-13)


def test_p_values_are_valid_under_no_drift():
    """(1 + #)/(1 + P) is super-uniform: P(p <= a) <= a for every a, with aggregation over widths."""
    rng = np.random.default_rng(12)
    p_values = []
    for i in range(120):
        detector = MMDDrift(n_permutations=39, seed=i).fit(gaussian(rng, 40, dim=4))
        p_values.append(detector.predict(gaussian(rng, 30, dim=4)).p_value)
    p_values = np.array(p_values)
    assert p_values.min() >= 1 / 40
    for level in (0.1, 0.25, 0.5):
        # binomial(120, level) upper 99.9% bound: a valid test stays under it
        assert np.mean(p_values <= level) <= level + 3.1 * np.sqrt(level * (1 - level) / 120)


@pytest.mark.parametrize("noise", [0.0, 1e-7])
def test_identical_or_near_identical_float32_reference_is_degenerate(noise):
    from rag_monitor.detectors import DegenerateWindowError

    rng = np.random.default_rng(1)
    base = rng.normal(size=(1, 384)).astype(np.float32)
    base /= np.linalg.norm(base)
    reference = (base + noise * rng.normal(size=(300, 384))).astype(np.float32)
    with pytest.raises(DegenerateWindowError, match="identical or nearly so"):
        MMDDrift().fit(reference)


def test_knn_graph_and_same_window_counts_match_brute_force():
    from rag_monitor.detectors.mmd import knn_graph, knn_permutation_statistics

    rng = np.random.default_rng(21)
    pooled = gaussian(rng, 50, dim=3)
    graph = knn_graph(pooled, 4, chunk_size=7)
    squared = ((pooled[:, None, :] - pooled[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(squared, np.inf)
    for i in range(50):
        assert set(graph[i]) == set(np.argsort(squared[i])[:4])
    labels = permutation_labels(30, 20, 10, seed=4)
    counts = knn_permutation_statistics(graph, labels)
    for row, count in zip(labels, counts):
        assert count == sum(row[i] == row[j] for i in range(50) for j in graph[i])


def test_neighbour_statistic_keeps_p_values_valid_and_sees_a_small_tight_cluster():
    rng = np.random.default_rng(22)
    p_values = []
    for i in range(120):
        detector = MMDDrift(n_permutations=39, seed=i, neighbours=5).fit(gaussian(rng, 40, dim=4))
        p_values.append(detector.predict(gaussian(rng, 30, dim=4)).p_value)
    p_values = np.array(p_values)
    for level in (0.1, 0.25, 0.5):
        assert np.mean(p_values <= level) <= level + 3.1 * np.sqrt(level * (1 - level) / 120)
    # 8% of the window is one tight new cluster on the unit sphere (where embeddings live):
    # the same-window neighbour count alone finds it, and the aggregated test with it
    from rag_monitor.detectors.mmd import aggregate_p_value, knn_graph, knn_permutation_statistics

    def sphere(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    reference = sphere(gaussian(rng, 400, dim=16))
    current = np.concatenate([sphere(gaussian(rng, 230, dim=16)), sphere(reference[0] + 0.03 * gaussian(rng, 20, dim=16))])
    pooled, labels = np.concatenate([reference, current]), permutation_labels(400, 250, 199, seed=3)
    counts = knn_permutation_statistics(knn_graph(pooled, 10), labels)
    assert aggregate_p_value(counts[None, :])[0] == 1 / 200
    verdict = MMDDrift(n_permutations=199, seed=3, neighbours=10).fit(reference).predict(current)
    assert verdict.p_value == 1 / 200 and verdict.metadata["neighbours"] == 10
    with pytest.raises(ValueError, match="neighbours"):
        MMDDrift(neighbours=-1)


def test_neighbour_statistic_stays_valid_on_repeated_vectors():
    """Popular documents repeat one vector many times: ties must not follow the reference-first order."""
    rng = np.random.default_rng(23)
    distinct = gaussian(rng, 12, dim=6)
    p_values = []
    for i in range(150):
        reference, current = distinct[rng.integers(0, 12, 60)], distinct[rng.integers(0, 12, 30)]
        p_values.append(MMDDrift(n_permutations=39, seed=i, neighbours=10, bandwidths=(1.0,))
                        .fit(reference).predict(current).p_value)
    p_values = np.array(p_values)
    for level in (0.05, 0.1, 0.25, 0.5):
        assert np.mean(p_values <= level) <= level + 3.1 * np.sqrt(level * (1 - level) / 150)
