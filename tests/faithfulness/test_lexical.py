"""The lexical support check (the fallback scorer) and the background worker loop."""

from __future__ import annotations

import threading

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


def test_background_worker_scores_off_the_caller_thread_and_reports_by_callback():
    received: list = []
    threads: set[str] = set()
    done = threading.Event()

    def on_result(scores):
        threads.add(threading.current_thread().name)
        received.extend(scores)
        if len(received) >= 5:
            done.set()

    worker = FaithfulnessWorker(LexicalScorer(threshold=0.8), max_batch=2, on_result=on_result)
    worker.start()
    try:
        pairs = [Pair(f"t{i}", [CONTEXT], f"The tower is {300 + 15 * i} metres tall.", weight=2.0) for i in range(4)]
        pairs.append(Pair("r", [CONTEXT], "I can't help with that.", refused=True))
        assert worker.submit(pairs) == 5
        assert done.wait(10), "the worker never reported"
        assert worker.flush(10)
        assert worker.backlog() == 0
    finally:
        worker.shutdown()
    assert threads == {"faithfulness-worker"}
    by_key = {s.key: s for s in received}
    assert by_key["t2"].value == 1.0 and by_key["t2"].unsupported is False  # 330 is in the context
    assert by_key["t0"].unsupported is True and by_key["t0"].weight == 2.0
    assert by_key["r"].status == "refused"
    assert worker.scored == 4 and worker.dropped == 0


def test_submit_is_bounded_and_counts_what_it_drops():
    worker = FaithfulnessWorker(LexicalScorer(), max_queue=3)  # not started: nothing drains
    assert worker.submit([Pair(str(i), ["x"], "y") for i in range(5)]) == 3
    assert worker.backlog() == 3 and worker.dropped == 2


def test_a_failing_scorer_yields_error_results_and_the_worker_survives():
    class Broken(LexicalScorer):
        def score_encoded(self, batch):
            raise RuntimeError("boom")

    received: list = []
    worker = FaithfulnessWorker(Broken(), on_result=received.extend)
    worker.start()
    try:
        worker.submit([Pair("a", ["x"], "Paris is big.")])
        assert worker.flush(10)
        worker.scorer = LexicalScorer()
        worker.submit([Pair("b", ["Paris is big."], "Paris is big.")])
        assert worker.flush(10)
    finally:
        worker.shutdown()
    assert [(s.key, s.status) for s in received] == [("a", "error"), ("b", "scored")]
    assert "boom" in received[0].error and worker.errors == 1


def test_invalid_worker_settings_are_rejected():
    with pytest.raises(ValueError, match="positive"):
        FaithfulnessWorker(LexicalScorer(), batch_tokens=0)
