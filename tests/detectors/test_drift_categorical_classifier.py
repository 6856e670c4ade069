"""ChiSquareDrift on category mixes and ClassifierDrift on embeddings: sanity of verdicts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from rag_monitor.detectors import ChiSquareDrift, ClassifierDrift


def test_chi_square_matches_scipy_on_a_plain_table():
    reference = {"billing": 120, "card": 80, "refund": 50}
    current = {"billing": 40, "card": 60, "refund": 20}
    result = ChiSquareDrift(signal="intent").fit(reference).predict(current)
    expected = chi2_contingency(np.array([[120, 80, 50], [40, 60, 20]]), correction=False)
    assert result.statistic == pytest.approx(expected.statistic)
    assert result.p_value == pytest.approx(expected.pvalue)
    assert result.metadata["degrees_of_freedom"] == 2 and result.is_drift


def test_chi_square_same_mix_is_not_drift():
    detector = ChiSquareDrift().fit(["a"] * 300 + ["b"] * 200 + ["c"] * 100)
    result = detector.predict(["a"] * 51 + ["b"] * 33 + ["c"] * 16)
    assert not result.is_drift and result.p_value > 0.5


def test_category_unseen_in_reference_counts_as_drift():
    detector = ChiSquareDrift().fit(["billing"] * 100 + ["card"] * 100)
    result = detector.predict(["billing"] * 40 + ["card"] * 40 + ["crypto"] * 20)
    assert result.is_drift and result.p_value < 1e-6
    assert result.metadata["unseen_in_reference"] == ("crypto",)
    assert result.metadata["reference_share"]["crypto"] == 0.0


def test_rare_categories_are_binned_by_pooled_count():
    reference = {"a": 100, "b": 100, "x1": 1, "x2": 1}
    current = {"a": 50, "b": 48, "x3": 2}
    result = ChiSquareDrift().fit(reference).predict(current)
    # x1, x2, x3 (pooled counts 1, 1, 2) each expect < 5 in the smaller window: binned in
    # order of pooled count; that bin is still short, so it takes "b", the next smallest
    assert result.metadata["merged_bins"] == (("x1", "x2", "x3", "b"),)
    assert result.metadata["degrees_of_freedom"] == 1 and not result.is_drift


def test_many_small_categories_keep_their_signal_in_bins():
    """67 intents of ~15 reference queries each, current window 200: every intent alone expects
    fewer than 5 in the current window, yet new intents (20%) must still be detected."""
    rng = np.random.default_rng(0)
    known = [f"intent{i}" for i in range(67)]
    reference = list(rng.choice(known, size=1000))
    steady = list(rng.choice(known, size=200))
    shifted = steady[:160] + list(rng.choice([f"new{i}" for i in range(10)], size=40))
    detector = ChiSquareDrift(signal="intent").fit(reference)
    same = detector.predict(steady)
    moved = detector.predict(shifted)
    assert same.metadata["degrees_of_freedom"] >= 10 and not same.is_drift
    assert moved.is_drift and moved.p_value < 1e-6


def test_single_category_everywhere_has_nothing_to_compare():
    result = ChiSquareDrift(signal="refused").fit([False] * 50).predict([False] * 20)
    assert result.p_value == 1.0 and result.statistic == 0.0 and not result.is_drift


def test_chi_square_reference_is_unchanged_by_predict_and_grows_by_update():
    detector = ChiSquareDrift().fit(["a"] * 20 + ["b"] * 20)
    detector.predict(["c"] * 30)
    assert dict(detector._reference) == {"a": 20, "b": 20}
    detector.update_reference(["c"] * 10)
    assert dict(detector._reference) == {"a": 20, "b": 20, "c": 10}


def test_classifier_separates_shifted_embeddings_not_identical_ones():
    rng = np.random.default_rng(0)
    detector = ClassifierDrift(signal="document_embedding", seed=0).fit(rng.normal(size=(200, 16)))
    same = detector.predict(rng.normal(size=(200, 16)))
    shifted = detector.predict(rng.normal(size=(200, 16)) + np.r_[1.0, np.zeros(15)])  # theoretical AUC 0.76
    assert not same.is_drift and 0.35 < same.statistic < 0.65
    assert shifted.is_drift and shifted.statistic > 0.6 and shifted.p_value < 1e-3
    assert shifted.metadata["n_held_out"] == 200


def test_classifier_accepts_a_custom_estimator():
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(1)
    detector = ClassifierDrift(estimator=KNeighborsClassifier(n_neighbors=7)).fit(rng.normal(size=(100, 4)))
    assert detector.predict(rng.normal(2.0, 1.0, size=(100, 4))).is_drift
