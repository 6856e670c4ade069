"""The lexical support check (lexical-v1) and the length-bucketed batch worker."""

from __future__ import annotations

import pytest

from rag_monitor.faithfulness import FaithfulnessWorker, LexicalScorer, Pair, Scorer
from rag_monitor.faithfulness.lexical import claim_terms, stem, support_score

CONTEXT = "The Eiffel Tower in Paris was completed in 1889 and is 330 metres tall. It was designed by Gustave Eiffel's company."


def test_fully_supported_answer_scores_one():
    assert support_score(CONTEXT, "The tower was completed in 1889 and is 330 metres tall.") == 1.0


def test_a_wrong_number_costs_more_than_a_wrong_word():
    wrong_number = support_score(CONTEXT, "The tower was completed in 1901.")
    wrong_word = support_score(CONTEXT, "The tower was painted in 1889.")
    assert wrong_number < wrong_word < 1.0


def test_names_are_found_case_insensitively_and_unknown_names_count():
    assert support_score(CONTEXT.lower(), "It was designed by Gustave Eiffel.") == 1.0
    assert support_score(CONTEXT, "It was designed by Le Corbusier.") < 0.5


def test_terms_by_kind_with_numbers_normalised_and_words_stemmed():
    terms = claim_terms("In 2020 the Company hired 12,000 people, stopping layoffs.")
    assert terms.numbers == ("2020", "12000")
    assert terms.names == ("company",)
    assert set(terms.words) == {stem("hire"), "stop", "layoff", stem("people")}
    assert stem("crayons") == stem("crayon") and stem("stopped") == "stop" and stem("hired") == stem("hire")


def test_answers_without_claims_are_none_never_faithful():
    scorer = LexicalScorer()
    assert scorer.score([CONTEXT, CONTEXT], ["Sure, I think so!", ""]) == [None, None]
    results = FaithfulnessWorker(scorer).score_pairs([Pair("a", [CONTEXT], "Oh yes, I agree.")])
    assert results[0].status == "no_claims" and results[0].value is None and results[0].unsupported is None


def test_lexical_scorer_has_the_scorer_interface():
    scorer = LexicalScorer(threshold=0.7)
    assert isinstance(scorer, Scorer)
    assert (scorer.name, scorer.version, scorer.threshold) == ("lexical-v1", "1", 0.7)
    with pytest.raises(ValueError, match="premises"):
        scorer.score(["a"], ["b", "c"])
    with pytest.raises(ValueError, match="threshold"):
        LexicalScorer(threshold=2)


def test_worker_scores_in_order_with_refusals_apart_and_weights_kept():
    worker = FaithfulnessWorker(LexicalScorer(threshold=0.8), max_batch=2)
    pairs = [Pair(f"t{i}", [CONTEXT], f"The tower is {300 + 15 * i} metres tall.", weight=2.0) for i in range(4)]
    pairs.append(Pair("r", [CONTEXT], "I can't help with that.", refused=True))
    results = worker.score_pairs(pairs)
    assert [s.key for s in results] == ["t0", "t1", "t2", "t3", "r"]
    by_key = {s.key: s for s in results}
    assert by_key["t2"].value == 1.0 and by_key["t2"].unsupported is False  # 330 is in the context
    assert by_key["t0"].unsupported is True and by_key["t0"].weight == 2.0 and by_key["t0"].threshold == 0.8
    assert by_key["r"].status == "refused"


def test_a_failing_batch_yields_error_results_and_the_other_batches_still_score():
    class BrokenOnLong(LexicalScorer):
        def score_encoded(self, batch):
            if any(p.length > 30 for p in batch):
                raise RuntimeError("boom")
            return super().score_encoded(batch)

    worker = FaithfulnessWorker(BrokenOnLong(), max_batch=1)
    results = worker.score_pairs([Pair("long", [CONTEXT * 2], "Paris is big."), Pair("short", ["Paris is big."], "Paris is big.")])
    assert [(s.key, s.status) for s in results] == [("long", "error"), ("short", "scored")]
    assert "boom" in results[0].error and results[0].value is None and results[0].unsupported is None


def test_the_default_threshold_is_the_one_this_version_ships_with():
    from rag_monitor.faithfulness.thresholds import shipped_calibration

    entry = shipped_calibration("lexical-v1", "1")
    assert entry is not None and LexicalScorer().threshold == entry["threshold"]
    assert 0.0 < entry["threshold"] < 1.0


def test_invalid_worker_settings_are_rejected():
    with pytest.raises(ValueError, match="positive"):
        FaithfulnessWorker(LexicalScorer(), batch_tokens=0)
