"""Cohen's kappa against scikit-learn's, the weighted rates and their Wilson intervals against hand values."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from rag_monitor.review.agreement import agreement_by_label, agreement_from_golden, cohen_kappa, item_agreement
from rag_monitor.estimators import wilson
from rag_monitor.record import QueryRecord
from rag_monitor.review.rates import judged_rates


def test_kappa_matches_scikit_learn():
    from sklearn.metrics import cohen_kappa_score

    rng = random.Random(3)
    for _ in range(20):
        pairs = [(rng.choice("yn?"), rng.choice("yn?")) for _ in range(rng.randint(5, 40))]
        ours = cohen_kappa(pairs)
        theirs = cohen_kappa_score([a for a, _ in pairs], [b for _, b in pairs])
        assert ours == pytest.approx(theirs) if ours is not None else len({*pairs}) == 1
    assert cohen_kappa([]) is None and cohen_kappa([("y", "y")]) is None  # undefined, never 0


def test_agreement_per_label_and_per_item():
    reviews = {1: [{"faithful": "yes"}, {"faithful": "yes"}], 2: [{"faithful": "no"}, {"faithful": "yes"}],
               3: [{"faithful": "no"}, {"faithful": "no"}], 4: [{"faithful": "yes"}]}
    faithful = agreement_by_label(reviews)["faithful"]
    assert faithful.pairs == 3 and faithful.observed == pytest.approx(2 / 3)
    assert faithful.kappa == pytest.approx((2 / 3 - 4 / 9) / (5 / 9))
    rows = [{"trace_id": str(k), "reviews": [{"labels": r} for r in v]} for k, v in reviews.items()]
    assert agreement_from_golden(rows)["faithful"] == faithful
    assert [item_agreement(reviews[k], 2) for k in (1, 2, 4)] == ["agreed", "disagreed", "pending"]
    assert item_agreement(reviews[4]) == "single"


def test_wilson_interval_and_weighted_rates():
    low, high = wilson(0.5, 10)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    item = lambda w, **record: SimpleNamespace(weight=w, pair_trace_id=None, query_record=QueryRecord(  # noqa: E731
        trace_id="0" * 32, root_span_id="0" * 16, start_ns=0, end_ns=1, release="r", variant="v", **record))
    review = lambda **labels: SimpleNamespace(labels=labels)  # noqa: E731
    rates = judged_rates([(item(2.0), review(correct="yes")), (item(2.0), review(correct="no")),
                          (item(4.0, refused=True), review(refusal_appropriate="yes"))])
    by = {r.measure: r for r in rates}
    assert by["correct"].value == 0.5 and by["correct"].items == 2
    assert (by["correct"].low, by["correct"].high) == wilson(0.5, 2)  # equal weights: n_eff = n
    assert by["refusal_appropriate"].value == 1.0 and "supported" not in by
