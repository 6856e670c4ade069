"""The conformal novelty count test: its count follows the beta-binomial law under no drift, its
p-values are valid (super-uniform), ties cannot break that, and a small new topic pages at the
four-tests-a-day threshold, which no permutation floor stops. Fixed seeds; no timing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import betabinom, binom, chisquare

from rag_monitor.detectors.novelty import NoveltyDrift, count_p_value, kth_neighbour_distance, novelty_count, split_lanes
from rag_monitor.detectors.profiles import DriftProfile

FIT, CALIBRATION, CURRENT, DIM, QUANTILE = 150, 100, 60, 4, 0.05
DRAWS = 1500


def null_runs(sample, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, p_values)`` of ``DRAWS`` tests, reference and window from one distribution."""
    rng = np.random.default_rng(seed)
    counts, p_values = np.empty(DRAWS, dtype=int), np.empty(DRAWS)
    for d in range(DRAWS):
        detector = NoveltyDrift(fit_size=FIT, calibration_size=CALIBRATION, neighbours=3, quantile=QUANTILE,
                                seed=int(rng.integers(2**62)), min_window_size=2, threads=None)
        scored = detector.fit(sample(rng, FIT + CALIBRATION)).score(sample(rng, CURRENT))
        counts[d], p_values[d] = scored.metadata["novel_count"], scored.p_value
    return counts, p_values


def gaussian(rng, n):
    return rng.normal(size=(n, DIM))


def clumped(rng, n):
    """Exact repeats: 12 distinct vectors, so most k-th neighbour distances tie at 0."""
    return np.eye(DIM * 3, DIM)[rng.integers(12, size=n)] + np.eye(DIM * 3, DIM)[rng.integers(3, size=n)]


@pytest.fixture(scope="module", params=[gaussian, clumped], ids=["continuous", "ties"])
def null(request):
    return null_runs(request.param, seed=28)


def test_the_count_follows_the_beta_binomial_law(null):
    counts, _ = null
    j = math.ceil(QUANTILE * CALIBRATION)
    law = betabinom(CURRENT, j, CALIBRATION - j + 1)
    # pool the tail so every bin expects at least 5 draws
    edges = [c for c in range(CURRENT + 1) if law.cdf(c) < 1 - 5 / DRAWS and law.pmf(c) * DRAWS >= 5]
    observed = [np.sum(counts == c) for c in edges] + [np.sum(counts > edges[-1])]
    expected = [law.pmf(c) * DRAWS for c in edges] + [law.sf(edges[-1]) * DRAWS]
    observed[0] += np.sum(counts < edges[0])
    expected[0] += law.cdf(edges[0] - 1) * DRAWS
    assert chisquare(observed, expected).pvalue > 1e-3
    assert counts.mean() == pytest.approx(law.mean(), rel=0.05)


def test_p_values_are_super_uniform(null):
    _, p_values = null
    for level in (0.01, 0.05, 0.1, 0.25, 0.5):
        # P(p <= a) <= a, up to the binomial noise of DRAWS draws (one-sided 99.9%)
        assert np.mean(p_values <= level) <= binom.ppf(0.999, DRAWS, level) / DRAWS, level


def test_ties_are_broken_at_random_not_by_position():
    rng = np.random.default_rng(0)
    # every score ties: the count is the number of current items the tie-breaker puts above the cut
    counts = [novelty_count(np.zeros(99), np.zeros(50), 5, rng)[0] for _ in range(3000)]
    assert np.mean(counts) == pytest.approx(betabinom(50, 5, 95).mean(), rel=0.05)


def test_a_tenth_of_a_new_topic_pages_where_permutations_cannot():
    rng = np.random.default_rng(1)
    known = np.array([1.0] * (DIM - 1) + [0.02])
    detector = NoveltyDrift(fit_size=5000, calibration_size=2000, seed=3).fit(rng.normal(size=(7000, DIM)) * known)
    new_topic = np.eye(DIM)[DIM - 1] + rng.normal(size=(200, DIM)) * 0.05
    result = detector.predict(np.vstack([rng.normal(size=(1800, DIM)) * known, new_topic]))
    page_at = DriftProfile("n", "query_embedding", "novelty", interval_s=6 * 3600).page_rule().threshold
    assert page_at == pytest.approx(1200)  # four tests a day, one false page per 30 days budgeted
    assert result.p_value <= 1 / page_at and result.p_value < 1 / 301  # below the daily MMD test's floor
    assert result.metadata["novel_count"] >= 200 and result.statistic == result.metadata["novel_count"] / 2000
    assert result.metadata["expected_count"] == pytest.approx(2000 * 20 / 2001)


def test_scores_and_lanes():
    fit = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    points = np.array([[2.0, 0.0], [0.0, 0.0]])
    # cosine distance to the 2nd nearest: (1, 0) is at 0 from (1, 0), 1 - cos 45° from (1, 1)
    assert kth_neighbour_distance(points, fit, 2, chunk_size=1) == pytest.approx([1 - math.sqrt(0.5), 1.0])
    fit_lane, calibration = split_lanes(70, 50, 20, np.random.default_rng(0))
    assert (fit_lane.size, calibration.size) == (50, 20) and not set(fit_lane) & set(calibration)
    fit_lane, calibration = split_lanes(35, 50, 20, np.random.default_rng(0))  # fewer: the same proportion
    assert (fit_lane.size, calibration.size) == (25, 10)
    assert count_p_value(0, 100, 200, 2) == 1.0 and count_p_value(100, 100, 200, 2) < 1e-100


@pytest.mark.parametrize("kwargs, message", [
    ({"quantile": 1.0}, "quantile must be strictly between 0 and 1"),
    ({"fit_size": 0}, "fit_size must be a positive integer"),
    ({"neighbours": 2.5}, "neighbours must be a positive integer"),
])
def test_bad_parameters_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NoveltyDrift(**kwargs)


def test_profile_window_must_be_a_multiple_of_the_interval():
    with pytest.raises(ValueError, match=r"profile 'n': window_s must be a multiple of interval_s \(21600\)"):
        DriftProfile("n", "query_embedding", "novelty", interval_s=21600, window_s=30000)
    with pytest.raises(ValueError, match="detector 'novelty' does not test 'intent'"):
        DriftProfile("n", "intent", "novelty")
