"""The blind view: nothing that reveals the pipeline, candidates shuffled, pairs in random order."""

from __future__ import annotations

import json

import pytest

from rag_monitor.record import Document, FilterApplied, QueryRecord
from rag_monitor.review.blind import blind_view, candidates, unblind_labels


def record(variant: str, answer: str, trace: str = "a" * 32) -> QueryRecord:
    return QueryRecord(
        trace_id=trace, root_span_id="b" * 16, start_ns=0, end_ns=1, query="q?", answer=answer, variant=variant,
        release="secret-release", llm_model="secret-model",
        delivered=[Document("doc-live", "delivered text")],
        filters=[FilterApplied("relevance", "", 3, 1, ["doc-gone"], [Document("doc-gone", "dropped text")])],
    )


def test_view_reveals_neither_pipeline_fields_nor_which_candidate_was_dropped():
    view = blind_view(7, record("candidate", "an answer"))
    text = json.dumps(view)
    assert not any(secret in text for secret in ("secret-release", "secret-model", "candidate\"", "a" * 32, "doc-live", "doc-gone"))
    assert sorted(c["content"] for c in view["candidates"]) == ["delivered text", "dropped text"]
    orders = {tuple(c.document_id for c in candidates(i, record("production", "x"))) for i in range(20)}
    assert orders == {("doc-live", "doc-gone"), ("doc-gone", "doc-live")}  # the order depends on the item, not on the pipeline
    assert candidates(7, record("production", "x")) == candidates(7, record("production", "x"))  # stable on reload


def test_pairs_show_both_answers_in_random_order_and_map_the_preference_back():
    shadow, production = record("shadow", "shadow answer"), record("production", "production answer", "c" * 32)
    seen = set()
    for item_id in range(20):
        view = blind_view(item_id, shadow, paired=production)
        assert "answer" not in view and sorted(view["answers"]) == ["production answer", "shadow answer"]
        seen.add(tuple(view["answers"]))
        labels = unblind_labels(item_id, shadow, {"preferred": "A"}, paired=production)
        expected = "shadow" if view["answers"][0] == "shadow answer" else "production"
        assert labels["preferred"] == expected
    assert len(seen) == 2


@pytest.mark.parametrize("labels, message", [
    ({"faithful": "maybe"}, "faithful"),
    ({"relevant": ["d9"]}, "unknown candidates"),
    ({"reasons": ["rude"]}, "reasons"),
    ({"note": "x" * 5000}, "note"),
    ([], "JSON object"),
])
def test_bad_labels_are_refused_with_the_field_named(labels, message):
    with pytest.raises(ValueError, match=message):
        unblind_labels(1, record("production", "x"), labels)
