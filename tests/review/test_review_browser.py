"""The review page in real headless Chromium (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import pytest

from rag_monitor.review.auth import hash_token
from tests.review.test_review_api import HIDDEN_VALUES, PRIVATE, sample_record

pytestmark = pytest.mark.integration


def _alice_on_her_first_item(agent, page):
    """Logs alice in (the keyboard's Enter) and waits for her first item's relevance step."""
    page.goto(f"{agent.http_url}/review")
    page.fill("#reviewer", "alice")
    page.fill("#token", "alice-token")
    page.keyboard.press("Enter")
    page.wait_for_selector("#relevance:visible")
    return page


def test_reviewer_labels_both_steps_with_the_keyboard_and_the_item_leaves_the_queue(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}", review_double_share=0.0)
    agent.store.queue.enqueue(sample_record(), stratum="thumbs_down", inclusion_prob=1.0)
    page = _alice_on_her_first_item(agent, browser.new_page(viewport={"width": 1200, "height": 900}))
    assert page.inner_text("#question") == "How do I cancel?"

    visible = page.inner_text("body") + page.content()
    for hidden in (*HIDDEN_VALUES, PRIVATE, "Settings > Billing."):
        assert hidden not in visible, f"the relevance step reveals {hidden!r}"
    assert page.locator("#candidates li").count() == 3
    assert "1 candidate document(s) were left out" in page.inner_text("#left-out")
    assert "Guidelines" in page.inner_text("#guidelines") and page.locator("#guidelines strong").count() > 0
    page.keyboard.press("Digit1")        # first candidate relevant
    page.keyboard.press("Shift+Digit2")  # second candidate gold
    assert page.is_checked("#candidates li:nth-child(1) input.relevant")
    assert page.is_checked("#candidates li:nth-child(2) input.gold")
    page.keyboard.press("Enter")

    page.wait_for_selector("#answer-step:visible")
    assert page.inner_text("#answer") == "Cancel under Settings > Billing."
    page.keyboard.press("f")  # faithful: yes
    page.keyboard.press("x")  # correct: no
    page.keyboard.press("a")  # the corrected answer
    page.keyboard.type("Cancel online under Settings > Billing > Cancel plan.")
    page.keyboard.press("Escape")
    assert page.is_checked("input[name=faithful][value=yes]") and page.is_checked("input[name=correct][value=no]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('queue is empty')")

    assert agent.store.queue.depth().get("reviewed") == 1
    (item, review), = agent.store.queue.reviewed()
    assert review.labels["faithful"] == "yes" and review.labels["correct"] == "no"
    assert len(review.labels["relevant_documents"]) == 2 and len(review.labels["gold_documents"]) == 1
    assert review.labels["corrected_answer"] == "Cancel online under Settings > Billing > Cancel plan."


def test_the_saved_verdict_stays_in_the_status_line_with_the_next_item(start_agent, browser):
    """"Saved." must not flash for one claim request: the reviewer (and a test) reads it with the next item."""
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}", review_double_share=0.0)
    for trace in ("a1" * 16, "b2" * 16):
        agent.store.queue.enqueue(sample_record(trace), stratum="base", inclusion_prob=1.0)
    page = _alice_on_her_first_item(agent, browser.new_page())
    page.keyboard.press("Enter")
    page.wait_for_selector("#answer-step:visible")
    page.keyboard.press("f")
    page.keyboard.press("c")

    page.route("**/labels", lambda route: route.abort())  # the agent gives no answer: the labels stay
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('No answer from the server')")
    assert page.is_visible("#answer-step") and page.is_checked("input[name=faithful][value=yes]")
    assert not agent.store.queue.depth().get("reviewed")

    page.unroute("**/labels")
    page.keyboard.press("Enter")
    page.wait_for_selector("#relevance:visible")  # the next item's first step
    assert page.inner_text("#status") == "Saved."
    assert agent.store.queue.depth().get("reviewed") == 1  # the second item is claimed, the first one stored


def test_skip_from_the_keyboard_needs_a_reason(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}")
    agent.store.queue.enqueue(sample_record(), stratum="base", inclusion_prob=1.0)
    page = _alice_on_her_first_item(agent, browser.new_page())
    page.keyboard.press("s")
    assert page.evaluate("document.activeElement.id") == "skip-reason"
    page.keyboard.type("not my area")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('queue is empty')")
    assert page.inner_text("#status").startswith("Skipped.")
    assert agent.metric("rag_review_reviewer_skips", {"reviewer": "alice"}) == 1


def test_page_without_a_session_shows_only_the_login_form(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}")
    agent.store.queue.enqueue(sample_record(), stratum="base", inclusion_prob=1.0)
    page = browser.new_page()
    page.goto(f"{agent.http_url}/review")
    assert page.locator("#token").count() == 1
    assert "How do I cancel?" not in page.content()
    page.fill("#reviewer", "alice")
    page.fill("#token", "not-a-token")
    page.click("#login")
    assert "Unknown reviewer or token" in page.content()
