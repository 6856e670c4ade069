"""The review loop end to end: a thumbs-down query reaches the queue, a reviewer labels it in a
real browser, and the label shows up in the false-exclusion rate, the score, the golden export
and the calibration report."""

from __future__ import annotations

import pytest

import rag_monitor
from rag_monitor.cli import main as cli
from rag_monitor.review.auth import hash_token
from rag_monitor.review.golden import read_jsonl
from tests.services import wait_until

pytestmark = pytest.mark.integration

CURRENT_POLICY = "Since 2026 you cancel any plan online under Settings > Billing > Cancel plan."
ARCHIVED_POLICY = "To cancel a plan, call our support line during office hours."


def ask(monitor) -> str:
    with monitor.query("How do I cancel my plan?", session_id="s1", tenant="acme") as q:
        q.filter(kind="entitlement", predicate="tenant = 'acme'", candidates_in=30, candidates_out=30)
        q.filter(kind="relevance", predicate="version = 'v1'", candidates_in=30, candidates_out=12,
                 excluded_ids=["policy-cancel-v2"],
                 excluded_documents=[{"id": "policy-cancel-v2", "content": CURRENT_POLICY}])
        with q.retrieve() as r:
            r.documents([{"id": "policy-cancel-v1", "content": ARCHIVED_POLICY, "score": 0.7}])
        with q.generate(model="gpt-4o-mini") as g:
            g.tokens(prompt=300, completion=20)
        q.answer("Call our support line during office hours.", citations=["policy-cancel-v1"])
    return q.trace_id


def test_thumbs_down_to_review_to_rates_export_and_calibration(start_agent, browser, tmp_path):
    agent = start_agent(review_tokens=f"alice:reviewer:{hash_token('alice-token')}", score_interval_s=0.5)
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="2026.12.01")
    try:
        trace_id = ask(monitor)
        monitor.force_flush()
        wait_until(lambda: agent.store.recent.get(trace_id) is not None, timeout=10, what="the record")
        monitor.feedback(trace_id, "thumbs_down", reason="outdated")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.store.queue.item_for_trace(trace_id) is not None, timeout=10, what="the review item")
    # the scorer worker scores the sampled answer in the background (lexical fallback here)
    wait_until(lambda: "lexical-v1" in agent.store.scores.for_trace(trace_id), timeout=20, what="the score")
    labels = {"release": "2026.12.01", "variant": "production", "scorer": "lexical-v1"}
    assert sum(agent.metric("rag_faithfulness_scored_total", {**labels, "verdict": v}) or 0 for v in ("supported", "unsupported")) == 1

    page = browser.new_page()
    page.goto(f"{agent.http_url}/review")
    page.fill("#reviewer", "alice")
    page.fill("#token", "alice-token")
    page.click("#login")
    page.wait_for_selector("#question:has-text('How do I cancel my plan?')")
    # step one: the filtered-out current policy is offered blind, among the candidates; it is gold
    page.locator("#candidates li", has_text=CURRENT_POLICY).locator("input.gold").check()
    page.click("#relevance-submit")
    page.wait_for_selector("#answer-step:visible")
    page.check("input[name=faithful][value=yes]")   # faithful to its (archived) context ...
    page.check("input[name=correct][value=no]")     # ... but wrong
    page.locator("#reasons label", has_text="wrong").locator("input").check()
    page.click("#submit")
    page.wait_for_selector("#status:has-text('queue is empty')")

    rel = {"release": "2026.12.01"}
    assert agent.metric("rag_filter_false_exclusion_eligible", rel) == 1
    assert agent.metric("rag_filter_false_exclusion_ratio", rel) == 1.0

    settings = agent.agent.settings
    golden = tmp_path / "golden.jsonl"
    assert cli(["export", "golden", "--data-dir", settings.data_dir, "--out", str(golden), "--corpus-version", "kb-7"]) == 0
    (row,) = read_jsonl(golden)
    assert row["trace_id"] == trace_id and row["gold_doc_ids"] == ["policy-cancel-v2"]
    assert row["labels"]["correct"] == "no" and row["labels"]["reasons"] == ["wrong"]
    assert row["stratum"] == "thumbs_down" and row["weight"] == 1.0 and row["reviewer"] == "alice"
    assert row["versions"]["corpus"] == "kb-7" and "lexical-v1" in row["scores"]
    assert [c["id"] for c in row["contexts"]] == ["policy-cancel-v1"]

    report = tmp_path / "calibration.html"
    assert cli(["calibrate", "--golden", str(golden), "--scorer", "lexical-v1", "--out", str(report)]) == 0
    assert "lexical-v1" in report.read_text()
