"""The blind views: nothing that reveals the pipeline, candidates shuffled, pairs in random order."""

from __future__ import annotations

import json

import pytest

from rag_monitor.record import Document, FilterApplied, QueryRecord
from rag_monitor.review.blind import answer_labels, answer_view, candidates, neutralise, relevance_labels, relevance_view


def record(variant: str, answer: str, trace: str = "a" * 32, **changes) -> QueryRecord:
    fields = dict(
        trace_id=trace, root_span_id="b" * 16, start_ns=0, end_ns=1, query="q?", answer=answer, variant=variant,
        release="secret-release", llm_model="secret-model",
        delivered=[Document("doc-live", "delivered text")],
        filters=[FilterApplied("entitlement", "", 4, 3, ["doc-denied"], [Document("doc-denied", "denied text")]),
                 FilterApplied("relevance", "", 3, 1, ["doc-gone", "doc-empty"], [Document("doc-gone", "dropped text")])],
        retrieved=[Document("doc-live", "delivered text"), Document("doc-denied", "denied text")],
    )
    fields.update(changes)
    return QueryRecord(**fields)


def test_relevance_step_reveals_neither_pipeline_fields_nor_which_candidate_was_delivered():
    view = relevance_view(7, record("candidate", "an answer"))
    text = json.dumps(view)
    for secret in ("secret-release", "secret-model", "candidate\"", "a" * 32, "doc-", "an answer", "denied text"):
        assert secret not in text, secret
    assert sorted(c["content"] for c in view["candidates"]) == ["delivered text", "dropped text"]
    assert view["left_out"] == 1  # doc-empty has no recorded content
    orders = {tuple(c.document_id for c in candidates(i, record("production", "x"))[0]) for i in range(20)}
    assert orders == {("doc-live", "doc-gone"), ("doc-gone", "doc-live")}  # the order depends on the item, not on the pipeline
    # the same documents listed in another order by the pipeline give the same page
    swapped = record("production", "x", delivered=[Document("doc-gone", "dropped text")],
                     retrieved=[],
                     filters=[FilterApplied("entitlement", "", 4, 3, ["doc-denied"]),
                              FilterApplied("relevance", "", 3, 1, ["doc-live"], [Document("doc-live", "delivered text")])])
    assert [c.content for c in candidates(7, swapped)[0]] == [c.content for c in candidates(7, record("production", "x"))[0]]


def test_answer_step_shows_the_delivered_contexts_and_pairs_in_random_order():
    shadow, production = record("shadow", "shadow answer"), record("production", "production answer", "c" * 32)
    assert answer_view(1, shadow)["contexts"] == ["delivered text"]
    seen = set()
    for item_id in range(20):
        view = answer_view(item_id, shadow, paired=production)
        assert "answer" not in view and sorted(view["answers"]) == ["production answer", "shadow answer"]
        seen.add(tuple(view["answers"]))
        labels = answer_labels(item_id, shadow, {"preferred": "A"}, paired=production)
        expected = "shadow" if view["answers"][0] == "shadow answer" else "production"
        assert labels["preferred"] == expected
    assert len(seen) == 2


def test_gold_implies_relevant_and_keys_map_back_to_ids():
    rec = record("production", "x")
    keys = {c.document_id: c.key for c in candidates(3, rec)[0]}
    labels = relevance_labels(3, rec, {"relevant": [keys["doc-live"]], "gold": [keys["doc-gone"]]})
    assert labels == {"relevant_documents": ["doc-gone", "doc-live"], "gold_documents": ["doc-gone"]}


def test_bidirectional_controls_are_made_visible():
    assert neutralise("a\u202eb\u2066c\u200fd") == "a<U+202E>b<U+2066>c<U+200F>d"
    view = relevance_view(1, record("production", "x", query="\u202eevil"))
    assert view["question"] == "<U+202E>evil"


@pytest.mark.parametrize("step, labels, message", [
    ("answer", {"faithful": "maybe"}, "faithful"),
    ("relevance", {"relevant": ["d9"]}, "unknown candidates"),
    ("relevance", {"gold": "d1"}, "gold"),
    ("answer", {"reasons": ["rude"]}, "reasons"),
    ("answer", {"note": "x" * 5000}, "note"),
    ("answer", {"corrected_answer": 3}, "corrected_answer"),
    ("answer", [], "JSON object"),
    ("relevance", [], "JSON object"),
])
def test_bad_labels_are_refused_with_the_field_named(step, labels, message):
    validate = relevance_labels if step == "relevance" else answer_labels
    with pytest.raises(ValueError, match=message):
        validate(1, record("production", "x"), labels)


def test_an_id_less_relevant_document_removed_by_the_filter_is_a_false_exclusion():
    """The review names an id-less document by its content key; the filter's removed set must too."""
    from rag_monitor.review.stats import is_false_exclusion

    kept, dropped = Document(None, "kept text"), Document(None, "the only relevant text")
    rec = record("production", "an answer", delivered=[kept], retrieved=[kept],
                 filters=[FilterApplied("relevance", "", 2, 1, [], [dropped])])
    keys = {c.content: c.key for c in candidates(5, rec)[0]}
    labels = relevance_labels(5, rec, {"relevant": [keys["the only relevant text"]]})
    assert is_false_exclusion(rec, labels["relevant_documents"]) is True
    # Relevant and kept: not excluded. Relevant but removed by the entitlement filter: not eligible.
    labels = relevance_labels(5, rec, {"relevant": [keys["kept text"], keys["the only relevant text"]]})
    assert is_false_exclusion(rec, labels["relevant_documents"]) is False
    entitled = record("production", "an answer", delivered=[kept], retrieved=[kept],
                      filters=[FilterApplied("entitlement", "", 2, 1, [], [dropped])])
    assert is_false_exclusion(entitled, relevance_labels(5, rec, {"relevant": [keys["the only relevant text"]]})["relevant_documents"]) is None
