"""The estimator module against the authors' ``ppi_py``, Wilson's interval by hand, and the design.

``ppi_py`` (PPI++, Angelopoulos, Duchi, Zrnic) treats labeled and unlabeled data as independent
samples; on such data, at the same ``lam``, this module's estimate and interval are theirs. Its
own ``lam`` minimises the interval's variance estimate: close to ``ppi_py``'s tuned one on large
samples. For the agent's nested samples (the reviewed items are among the scored ones) and for
unequal weights, the standard error is checked against the spread of the estimate over many
draws of the sampling design from one fixed population.
"""

from __future__ import annotations

import math

import numpy as np
import ppi_py
import pytest

from rag_monitor.estimators import (
    MIN_LABELS_PER_CLASS,
    Z95,
    WeightedRate,
    kish_effective_size,
    ppi_mean,
    ppi_rate,
    weighted_rate,
    wilson,
)


def scorer_population(n: int, rate: float, spread: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """A calibrated scorer probability ``f`` (logits spread by ``spread``) and 0/1 truths drawn from it."""
    f = 1 / (1 + np.exp(-(rng.normal(0, spread, n) + math.log(rate / (1 - rate)))))
    return (rng.random(n) < f).astype(float), f


def test_wilson_by_hand_and_kish():
    low, high = wilson(0.5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert wilson(0.3, 0) == (0.0, 1.0)
    assert kish_effective_size(4.0, 10.0) == pytest.approx(1.6)
    rate = weighted_rate([1.0, 3.0], [1, 0])
    assert rate.value == pytest.approx(0.25) and rate.n_eff == pytest.approx(1.6)
    assert (rate.low, rate.high) == pytest.approx(wilson(0.25, 1.6))
    assert WeightedRate.from_sums(0.0, 0.0, 0.0) is None and weighted_rate([], []) is None


@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0])
def test_independent_samples_equal_ppi_py_at_the_same_lambda(lam):
    rng = np.random.default_rng(7)
    y, f = scorer_population(300, 0.3, 2.5, rng)
    _, f_unlabeled = scorer_population(3000, 0.3, 2.5, rng)
    est = ppi_mean(y, f, f_unlabeled, lam=lam)
    assert est.value == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y, f, f_unlabeled, lam=lam)[0]), abs=1e-12)
    low, high = ppi_py.ppi_mean_ci(y, f, f_unlabeled, alpha=0.05, lam=lam)
    assert est.interval(Z95) == pytest.approx((float(low[0]), float(high[0])), abs=1e-9)


def test_weighted_point_estimate_equals_ppi_py():
    rng = np.random.default_rng(8)
    y, f = scorer_population(200, 0.3, 2.0, rng)
    _, f_unlabeled = scorer_population(2000, 0.3, 2.0, rng)
    w, w_u = rng.choice([1.0, 5.0, 20.0], 200), rng.choice([1.0, 2.0], 2000)
    for lam in (0.0, 0.7):
        ours = ppi_mean(y, f, f_unlabeled, w, w_u, lam=lam).value
        theirs = float(ppi_py.ppi_mean_pointestimate(y, f, f_unlabeled, lam=lam, w=w, w_unlabeled=w_u)[0])
        assert ours == pytest.approx(theirs, abs=1e-12)


def test_tuned_lambda_is_close_to_ppi_py_and_never_widens():
    rng = np.random.default_rng(9)
    y, f = scorer_population(2000, 0.3, 2.5, rng)
    _, f_unlabeled = scorer_population(20000, 0.3, 2.5, rng)
    ours = ppi_mean(y, f, f_unlabeled)
    theirs_low, theirs_high = ppi_py.ppi_mean_ci(y, f, f_unlabeled, alpha=0.05)
    from ppi_py.ppi import _calc_lam_glm  # their tuning, on the same gradients as ppi_mean_ci
    theta = ppi_py.ppi_mean_pointestimate(y, f, f_unlabeled, lam=1)
    their_lam = _calc_lam_glm(y[:, None] - theta, f[:, None] - theta, f_unlabeled[:, None] - theta, np.eye(1), clip=True)
    assert 0 < their_lam < 1 and ours.lam == pytest.approx(their_lam, abs=0.05)
    ours_low, ours_high = ours.interval()
    assert ours_high - ours_low == pytest.approx(float(theirs_high[0] - theirs_low[0]), rel=0.02)
    assert ours.se <= ppi_mean(y, f, f_unlabeled, lam=0.0).se  # in every sample, by construction


def _nested_draws(population_y, population_f, p_score, p_review, draws, rng):
    """Estimates and standard errors over ``draws`` Poisson samples: S with p_score, R within it."""
    values, ses = [], []
    for _ in range(draws):
        u = rng.random(len(population_y))
        s, r = u < p_score, u < p_review
        est = ppi_mean(population_y[r], population_f[r], population_f[s], 1 / p_review[r], 1 / p_score[s],
                       w_scored_of_labeled=1 / p_score[r])
        values.append(est.value)
        ses.append(est.se)
    return np.array(values), np.array(ses)


def test_nested_weighted_standard_error_matches_the_design_spread():
    rng = np.random.default_rng(10)
    n = 40000
    y, f = scorer_population(n, 0.25, 3.0, rng)
    complaint = rng.random(n) < 0.05 + 0.15 * y  # an oversampled stratum, richer in bad answers
    p_review = np.where(complaint, 0.2, 0.01)
    p_score = np.maximum(p_review, 0.1)
    values, ses = _nested_draws(y, f, p_score, p_review, 400, rng)
    assert abs(values.mean() - y.mean()) < 3 * values.std() / math.sqrt(len(values))  # unbiased
    assert np.median(ses) == pytest.approx(values.std(), rel=0.12)
    covered = np.mean(np.abs(values - y.mean()) <= Z95 * ses)
    assert covered >= 0.92


def test_ppi_rate_falls_back_to_the_humans_with_few_labels_of_a_class():
    y = [0.0] * 40 + [1.0] * (MIN_LABELS_PER_CLASS - 1)
    f = [0.1] * 40 + [0.9] * (MIN_LABELS_PER_CLASS - 1)
    rate = ppi_rate(y, f, [1.0] * len(y), f * 10, [1.0] * len(f) * 10, [1.0] * len(y))
    assert rate.fallback == "few_labels" and rate.lam == 0.0
    assert (rate.value, rate.low, rate.high) == (rate.human.value, rate.human.low, rate.human.high)
    assert ppi_rate([], [], [], [0.5], [1.0], []) is None


def test_ppi_rate_is_narrower_than_the_humans_with_a_good_scorer():
    rng = np.random.default_rng(11)
    y, f = scorer_population(20000, 0.3, 4.0, rng)
    u = rng.random(len(y))
    s, r = u < 0.2, u < 0.01
    rate = ppi_rate(y[r], f[r], np.full(r.sum(), 100.0), f[s], np.full(s.sum(), 5.0), np.full(r.sum(), 5.0))
    assert rate.fallback is None and rate.labels == r.sum()
    assert rate.low <= y.mean() <= rate.high
    assert rate.high - rate.low < 0.8 * rate.human.width


def test_rate_difference_is_newcombes_method_10():
    """Newcombe (1998), Table II: 56/70 - 48/80 and 9/10 - 3/10 with equal weights."""
    from rag_monitor.estimators import rate_difference

    for (a, n, b, m), (low, high) in (((56, 70, 48, 80), (0.0524, 0.3339)), ((9, 10, 3, 10), (0.1705, 0.8090))):
        d = rate_difference(weighted_rate([1.0] * n, [1] * a + [0] * (n - a)), weighted_rate([1.0] * m, [1] * b + [0] * (m - b)))
        assert d.value == pytest.approx(a / n - b / m)
        assert (round(d.low, 4), round(d.high, 4)) == (low, high)


def test_weighted_auc_equals_sklearn_and_its_interval_narrows_with_items():
    from sklearn.metrics import roc_auc_score

    from rag_monitor.estimators import weighted_auc

    rng = np.random.default_rng(3)
    y = rng.random(400) < 0.3
    scores = np.round(rng.normal(y * 0.8, 1.0), 1)  # ties, handled as halves
    w = rng.uniform(1, 6, 400)
    auc = weighted_auc(scores, y, w)
    assert auc.value == pytest.approx(roc_auc_score(y, scores, sample_weight=w))
    assert auc.low < auc.value < auc.high and auc.positives == y.sum()
    small = weighted_auc(scores[:100], y[:100], w[:100])
    assert small.high - small.low > auc.high - auc.low
    assert weighted_auc(scores, np.zeros(400), w) is None  # one class: no AUC
