"""support-v2's answer features and logistic model (no MiniLM needed: the features come from v1's checks)."""

from __future__ import annotations

import numpy as np
import pytest

from rag_monitor.faithfulness.support import ClaimCheck
from rag_monitor.faithfulness.support_v2 import FEATURES, LogisticModel, answer_features


def check(support: float, similarity: float, numbers: int = 0, novel_numbers: int = 0, names: int = 0,
          novel_names: int = 0, contradicted: bool = False) -> ClaimCheck:
    return ClaimCheck("s", "e", support, support, similarity, numbers, novel_numbers, names, novel_names, contradicted, ())


def test_features_share_novel_numbers_and_names_over_the_whole_answer():
    x = dict(zip(FEATURES, answer_features([check(0.9, 0.8, numbers=2, names=1), check(0.3, 0.5, numbers=2, novel_numbers=1,
                                                                                        names=1, novel_names=1, contradicted=True)],
                                           lexical=0.7)))
    assert x["mean_support"] == pytest.approx(0.6) and x["min_support"] == pytest.approx(0.3)
    assert x["weak_share"] == 0.5 and x["novel_number_share"] == 0.25 and x["novel_name_share"] == 0.5
    assert x["contradicted_share"] == 0.5 and x["answer_lexical"] == 0.7 and x["log_sentences"] == pytest.approx(np.log(3))
    # No number at all is no novel number (not a division by zero).
    assert dict(zip(FEATURES, answer_features([check(1.0, 0.9)], lexical=1.0)))["novel_number_share"] == 0.0


def test_the_fit_orders_answers_by_their_support_and_round_trips():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (400, len(FEATURES)))
    supported = rng.uniform(0, 1, 400) < x[:, 0]  # only mean support matters
    model = LogisticModel.fit(x, supported)
    assert model.weights[0] > 1.0 and np.abs(model.weights[1:]).max() < 0.5 * model.weights[0]
    again = LogisticModel.from_dict(model.as_dict())
    assert np.allclose(again.probability(x[:5]), model.probability(x[:5]), atol=1e-4)
    low, high = x[:1].copy(), x[:1].copy()
    low[0, 0], high[0, 0] = 0.05, 0.95
    assert model.probability(low)[0] < 0.3 < 0.7 < model.probability(high)[0]


def test_a_model_for_other_features_is_refused():
    model = LogisticModel.fit(np.eye(len(FEATURES)), np.array([True, False] * (len(FEATURES) // 2)))
    stale = {**model.as_dict(), "features": ["mean_support"]}
    with pytest.raises(ValueError, match="do not match"):
        LogisticModel.from_dict(stale)


def test_the_scorer_takes_its_own_shipped_model_and_threshold_and_flags_an_invented_number():
    from rag_monitor.faithfulness.support_v2 import SupportV2Scorer
    from rag_monitor.faithfulness.thresholds import shipped_calibration

    def embed(texts):  # one fixed vector: every sentence matches, only the hard checks differ
        return np.ones((len(texts), 4)) / 2.0

    scorer = SupportV2Scorer(embed)
    entry = shipped_calibration("support-v2", "1")
    assert scorer.threshold == entry["threshold"] != shipped_calibration("support-v1", "1")["threshold"]
    same = scorer.assess(["The museum opened in 1889 in Paris."], "The museum opened in 1889 in Paris.")
    invented = scorer.assess(["The museum opened in 1889 in Paris."], "The museum opened in 1901 in Rome.")
    assert invented.value < same.value and invented.claims[0].verdict == "not_in_context"


def test_the_agent_setting_selects_support_v2_with_the_real_minilm():
    from rag_monitor.faithfulness import load_scorer

    scorer = load_scorer(None, offline="support-v2", torch_threads=None)
    assert (scorer.name, scorer.version) == ("support-v2", "1")
    grounded = scorer.assess(["Refunds take five business days."], "Refunds take five business days.")
    invented = scorer.assess(["Refunds take five business days."], "Refunds take 30 days and cost $12.")
    assert invented.value < grounded.value
