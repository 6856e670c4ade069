"""The review page's step two in real headless Chromium: a shadow pair judged per side, each answer
against the contexts it was given; and a span scorer's flagged spans shown only once the verdict
is saved (the page's HTML before and after)."""

from __future__ import annotations

import json

import pytest

from rag_monitor.faithfulness.claims import NOT_IN_CONTEXT, Claim, claims_json
from rag_monitor.record import Document, QueryRecord
from rag_monitor.review.auth import hash_token
from rag_monitor.review.shadow import shadow_report
from rag_monitor.store import Score
from tests.review.test_review_api import Client, sample_record

pytestmark = pytest.mark.integration

CURRENT = "Cancel online under Settings > Billing > Cancel plan (current policy)."
ARCHIVED = "To cancel, call our support line during office hours (archived policy)."


def pair_records() -> tuple[QueryRecord, QueryRecord]:
    """A production answer from the archived policy and the candidate's from the current one."""
    production = QueryRecord(trace_id="aa" * 16, root_span_id="a1" * 8, start_ns=1, end_ns=2, query="How do I cancel?",
                             answer="Call the support line during office hours.", tenant="acme",
                             delivered=[Document("archived", ARCHIVED)])
    candidate = QueryRecord(trace_id="bb" * 16, root_span_id="b1" * 8, start_ns=1, end_ns=3, query="How do I cancel?",
                            answer="Cancel online under Settings > Billing.", tenant="acme", variant="shadow",
                            shadow_of=production.trace_id, candidate="fixed", delivered=[Document("current", CURRENT)])
    return production, candidate


def log_in(browser, agent):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(f"{agent.http_url}/review")
    page.fill("#reviewer", "alice")
    page.fill("#token", "alice-token")
    page.keyboard.press("Enter")
    page.wait_for_selector("#relevance:visible, #answer-step:visible")
    if page.is_visible("#relevance"):
        page.keyboard.press("Enter")
    page.wait_for_selector("#answer-step:visible")
    return page


def span_score(record: QueryRecord, phrase: str | None, scorer: str = "lettucedetect") -> Score:
    claims = ()
    if phrase is not None:
        start = record.answer.index(phrase)
        claims = (Claim(phrase, NOT_IN_CONTEXT, 0.97, start=start, end=start + len(phrase)),)
    return Score(record.trace_id, scorer, 0.03 if claims else 0.9, "local", "unsupported" if claims else "supported",
                 threshold=0.5, claims=claims_json(claims))


def test_a_shadow_pair_is_judged_per_side_against_its_own_contexts(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}", review_double_share=0.0)
    production, candidate = pair_records()
    agent.store.queue.enqueue(candidate, stratum="shadow_pair", inclusion_prob=0.5, pair_trace_id=production.trace_id,
                        pair_record=production)
    page = log_in(browser, agent)
    assert page.is_hidden("#single-answer") and page.is_visible("#pair-answers")
    html = page.content()
    for hidden in ("fixed", "shadow", "production", "candidate"):  # blind: nothing names a side
        assert hidden not in page.inner_text("body") and f">{hidden}<" not in html
    shown = {side: page.inner_text(f"#answer-{side}") for side in "ab"}
    own_contexts = {candidate.answer: [CURRENT], production.answer: [ARCHIVED]}
    for side in "ab":  # each answer beside the contexts that side was given
        assert page.locator(f"#contexts-{side} li").all_inner_texts() == own_contexts[shown[side]]
    role = {side: "candidate" if shown[side] == candidate.answer else "production" for side in "ab"}

    page.keyboard.press("f")        # A: faithful yes
    page.keyboard.press("c")        # A: correct yes
    page.keyboard.press("Shift+U")  # B: faithful no
    page.keyboard.press("Shift+X")  # B: correct no
    assert page.is_checked("input[name=faithful_a][value=yes]") and page.is_checked("input[name=correct_b][value=no]")
    assert not page.is_checked("input[name=faithful][value=yes]")
    page.check("input[name=preferred][value=A]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('queue is empty')")

    (item, review), = agent.store.queue.reviewed()
    verdicts = review.labels["pair_verdicts"]
    assert verdicts[role["a"]] == {"faithful": "yes", "correct": "yes"}
    assert verdicts[role["b"]] == {"faithful": "no", "correct": "no"}
    # the item's own answer (the candidate's) keeps the plain labels every other consumer reads
    assert (review.labels["faithful"], review.labels["correct"]) == tuple(verdicts["candidate"].values())
    assert review.labels["preferred"] == (candidate.variant if role["a"] == "candidate" else production.variant)

    report = shadow_report(agent.store).to_dict()
    (fixed,) = report["candidates"]
    for side in ("candidate", "production"):
        wrong = float(side == role["b"])
        for measure in ("reviewed_unsupported", "reviewed_incorrect"):
            rate = fixed["sides"][side][measure]
            assert (rate["value"], rate["judged"]) == (wrong, 1) and rate["low"] <= wrong <= rate["high"]
    metric = agent.metric("rag_shadow_reviewed_incorrect_ratio", {"variant": "fixed", "side": role["b"]})
    assert metric == 1.0
    assert agent.metric("rag_shadow_reviewed_unsupported_ratio", {"variant": "fixed", "side": role["a"]}) == 0.0


def test_flagged_spans_are_shown_only_after_the_verdict_is_saved(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}", review_double_share=0.0)
    record = sample_record()
    agent.store.queue.enqueue(record, stratum="base", inclusion_prob=1.0)
    agent.store.scores.upsert([span_score(record, "Settings > Billing")])

    # over HTTP: neither step's view carries anything of the scorer
    client = Client(agent.http_url)
    assert client.login("alice-token", reviewer="alice") == 200
    status, body = client.api("POST", "/api/review/claim")
    assert status == 200 and not {"flagged", "claims", "spans", "score"} & set(json.loads(body))
    item = json.loads(body)["item"]
    status, body = client.api("POST", f"/api/review/items/{item}/relevance", {})
    assert status == 200 and not {"flagged", "claims", "spans", "score"} & set(json.loads(body))
    assert json.loads(body)["answer"] == record.answer

    page = log_in(browser, agent)  # the same reviewer's claimed item, step two
    before = page.content()
    assert page.locator("mark").count() == 0 and "<mark" not in before and page.is_hidden("#flagged")
    page.keyboard.press("u")
    page.keyboard.press("c")
    page.keyboard.press("Enter")
    page.wait_for_selector("#flagged:visible")
    assert page.is_hidden("#skip-form")  # saved: nothing left to skip
    assert page.locator("#flagged-answers mark").all_inner_texts() == ["Settings > Billing"]
    assert page.inner_text("#flagged-answers .flagged-answer") == record.answer
    assert agent.store.queue.reviewed()[0][1].labels["faithful"] == "no"  # saved before anything was shown
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('queue is empty')")


def test_a_pairs_spans_follow_the_sides_as_shown(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}", review_double_share=0.0)
    production, candidate = pair_records()
    agent.store.queue.enqueue(candidate, stratum="shadow_pair", inclusion_prob=0.5, pair_trace_id=production.trace_id,
                        pair_record=production)
    # the production half is scored as a pair half; the candidate's answer has nothing flagged
    agent.store.scores.upsert([span_score(production, "office hours", scorer="lettucedetect:pair-half"),
                               span_score(candidate, None)])
    page = log_in(browser, agent)
    assert page.locator("mark").count() == 0
    shown = {side: page.inner_text(f"#answer-{side}") for side in "ab"}
    page.check("input[name=preferred][value=tie]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#flagged:visible")
    blocks = page.locator("#flagged-answers > div")
    assert blocks.count() == 2
    for i, side in enumerate("ab"):
        marks = blocks.nth(i).locator("mark").all_inner_texts()
        assert marks == (["office hours"] if shown[side] == production.answer else [])
        assert blocks.nth(i).locator("h3").inner_text() == side.upper()
