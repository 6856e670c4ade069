"""Citation clicks, shares and edits: SDK -> OTLP -> a real agent -> its metrics and store, with
the edited text redacted before anything keeps it (store, /metrics, logs)."""

from __future__ import annotations

import logging
import sqlite3

import rag_monitor
from tests.agent.test_agent_pii_everywhere import CARD, EMAIL, PHONE, leaks
from tests.services import wait_until


def _ask(monitor, text: str, doc_id: str) -> str:
    with monitor.query(text, session_id="s1") as q:
        with q.retrieve() as r:
            r.documents([{"id": doc_id, "content": "Refunds are accepted within 30 days."}])
        q.answer("Refunds are accepted within 30 days.", citations=[doc_id])
    return q.trace_id


def test_citation_click_share_and_edit_are_counted_and_stored(start_agent):
    agent = start_agent()
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="r1")
    try:
        first = _ask(monitor, "what is the refund window?", "kb-refunds")
        private = _ask(monitor, "and for my account?", f"kb/{EMAIL}/notes.md")  # an id with PII in it
        assert monitor.force_flush(10)
        wait_until(lambda: agent.store.recent.get(private) is not None, timeout=20, what="the queries")
        monitor.citation_click(first, "kb-refunds")
        monitor.citation_click(private, f"kb/{EMAIL}/notes.md")
        monitor.share(first, "export")
        monitor.share(first)
        monitor.edit(first, "Refunds are accepted within 14 days.")
        assert monitor.force_flush(10)
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.metric_sum("rag_feedback_total") == 5, timeout=20, what="the feedback counted")
    counted = {kind: agent.metric_sum("rag_feedback_total", kind=kind, release="r1")
               for kind in ("citation_click", "share", "edit")}
    assert counted == {"citation_click": 2.0, "share": 2.0, "edit": 1.0}
    assert 'rag_feedback_total{kind="citation_click",release="r1",variant="production"} 2.0' in agent.scrape()

    stored = {(e.kind, e.value) for e in agent.store.feedback.for_trace(first)}
    assert stored == {("citation_click", "kb-refunds"), ("share", "export"), ("share", "link"),
                      ("edit", "Refunds are accepted within 14 days.")}
    # A document id with PII is pseudonymised alike on the click and on the retrieved document: they join.
    (click,) = agent.store.feedback.for_trace(private)
    assert click.value == agent.store.recent.get(private).retrieved[0].id == agent.agent.redactor.pseudonym(f"kb/{EMAIL}/notes.md")


def test_pii_typed_in_an_edit_never_reaches_store_metrics_or_logs(start_agent, caplog):
    caplog.set_level(logging.DEBUG)
    agent = start_agent(log_level="debug")
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="r1")
    try:
        trace_id = _ask(monitor, "what is the refund window?", "kb-refunds")
        monitor.edit(trace_id, f"Refund to card {CARD}; write to {EMAIL} or call {PHONE}.")
        assert monitor.force_flush(10)
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.metric_sum("rag_feedback_total", kind="edit") == 1, timeout=20, what="the edit counted")
    (edit,) = agent.store.feedback.for_trace(trace_id)
    assert "<EMAIL>" in edit.value and "<CARD>" in edit.value and not leaks(edit.value)
    db = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert "<EMAIL>" in dump and not leaks(dump)
    assert not leaks(agent.scrape())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "config files" in logged and not leaks(logged)  # the agent's own log lines were captured
