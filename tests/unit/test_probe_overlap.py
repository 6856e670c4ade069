"""Jaccard@k and rank-biased overlap on lists whose values are worked out by hand."""

from __future__ import annotations

import itertools
import random

import pytest

from rag_monitor.detectors.overlap import jaccard, rbo


def test_jaccard_known_values():
    assert jaccard(["a", "b", "c"], ["a", "c", "d"]) == 2 / 4
    assert jaccard(["a", "b"], ["b", "a"]) == 1.0  # a set measure: order does not count
    assert jaccard(["a", "b"], ["c", "d"]) == 0.0
    assert jaccard([], []) == 1.0
    assert jaccard(["a"], []) == 0.0


def test_rbo_by_hand():
    # X_1 = 1, X_2 = 1, X_3 = 3 -> agreements 1, 1/2, 1; p = 0.5:
    # (1-p)/p * (1*0.5 + 0.5*0.25 + 1*0.125) + 1 * 0.125 = 0.75 + 0.125
    assert rbo(["a", "b", "c"], ["a", "c", "b"], p=0.5) == pytest.approx(0.875, abs=1e-12)
    # A swap at the top costs more than one at the bottom: agreements 0, 1, 1 -> 0.25 + 0.125 + 0.125
    assert rbo(["a", "b", "c"], ["b", "a", "c"], p=0.5) == pytest.approx(0.5, abs=1e-12)
    # One of three replaced at rank 3: agreements 1, 1, 2/3 -> 0.5 + 0.25 + 0.0833.. + 0.0833..
    assert rbo(["a", "b", "c"], ["a", "b", "x"], p=0.5) == pytest.approx(0.5 + 0.25 + 1 / 12 + 1 / 12, abs=1e-12)


def test_rbo_identical_and_disjoint():
    ten = [f"d{i}" for i in range(10)]
    for p in (0.5, 0.9, 0.98):
        assert rbo(ten, ten, p) == pytest.approx(1.0, abs=1e-12)
        assert rbo(ten, [f"x{i}" for i in range(10)], p) == 0.0
    assert rbo([], []) == 1.0


def test_a_shorter_reply_counts_its_missing_documents_as_changed():
    # Padded with items that match nothing: agreements 1, 1, 2/3 at p = 0.5 as in the replacement case.
    assert rbo(["a", "b", "c"], ["a", "b"], p=0.5) == pytest.approx(rbo(["a", "b", "c"], ["a", "b", "x"], p=0.5))
    assert rbo(["a", "b", "c"], ["a", "b"]) < 1.0


def test_rbo_is_symmetric_within_bounds_and_matches_its_definition():
    rng = random.Random(7)
    pool = [f"d{i}" for i in range(15)]
    for _ in range(200):
        a, b = rng.sample(pool, 10), rng.sample(pool, 10)
        p = rng.choice([0.5, 0.8, 0.9])
        value = rbo(a, b, p)
        assert value == pytest.approx(rbo(b, a, p))
        assert 0.0 <= value <= 1.0
        # The definition, term by term: (1-p)/p * sum_d A_d p^d + A_k p^k, A_d = |a[:d] & b[:d]| / d
        agreement = [len(set(a[:d]) & set(b[:d])) / d for d in range(1, 11)]
        direct = (1 - p) / p * sum(ad * p ** d for d, ad in enumerate(agreement, 1)) + agreement[-1] * p ** 10
        assert value == pytest.approx(direct, abs=1e-12)


def test_rbo_rejects_bad_input():
    with pytest.raises(ValueError, match="persistence"):
        rbo(["a"], ["a"], p=1.0)
    with pytest.raises(ValueError, match="repeated"):
        rbo(["a", "a"], ["a"])


@pytest.mark.parametrize("moved", list(itertools.permutations(range(3))))
def test_any_permutation_keeps_jaccard_but_not_rbo(moved):
    a = ["a", "b", "c"]
    b = [a[i] for i in moved]
    assert jaccard(a, b) == 1.0
    assert (rbo(a, b) == pytest.approx(1.0)) == (b == a)
