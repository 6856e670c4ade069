"""The review page in real headless Chromium (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rag_monitor.review.auth import hash_token
from tests.review.test_review_api import HIDDEN_VALUES, sample_record

pytestmark = pytest.mark.integration

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "review-page.png"


def test_reviewer_logs_in_labels_with_the_keyboard_and_the_item_leaves_the_queue(start_agent, browser, tmp_path):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}")
    agent.store.enqueue(sample_record(), stratum="thumbs_down", inclusion_prob=1.0)
    page = browser.new_page(viewport={"width": 1100, "height": 1000})
    page.goto(f"{agent.http_url}/review")
    page.fill("#token", "alice-token")
    page.click("#login")
    page.wait_for_selector("#question:has-text('How do I cancel?')")

    visible = page.inner_text("body") + page.content()
    for hidden in HIDDEN_VALUES:
        assert hidden not in visible, f"the page reveals {hidden!r}"
    assert page.locator("#candidates li").count() == 4
    page.screenshot(path=str(tmp_path / "review.png"), full_page=True)
    if os.environ.get("RAG_MONITOR_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copy(tmp_path / "review.png", SCREENSHOT)

    page.keyboard.press("f")  # faithful: yes
    page.keyboard.press("x")  # correct: no
    page.keyboard.press("1")  # first candidate relevant
    assert page.is_checked("input[name=faithful][value=yes]") and page.is_checked("input[name=correct][value=no]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#status:has-text('queue is empty')")

    assert agent.store.queue_depth().get("reviewed") == 1
    (item, review), = agent.store.reviewed()
    assert review.labels["faithful"] == "yes" and review.labels["correct"] == "no"
    assert len(review.labels["relevant_documents"]) == 1


def test_page_without_a_session_shows_only_the_login_form(start_agent, browser):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}")
    agent.store.enqueue(sample_record(), stratum="base", inclusion_prob=1.0)
    page = browser.new_page()
    page.goto(f"{agent.http_url}/review")
    assert page.locator("#token").count() == 1
    assert "How do I cancel?" not in page.content()
    page.fill("#token", "not-a-token")
    page.click("#login")
    assert "Unknown token" in page.content()
