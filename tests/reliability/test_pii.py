"""Seeded PII never reaches a sink: the store, the spans forwarded to Phoenix, the review page
and API, the golden export, the logs."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest

import rag_monitor
from rag_monitor.review.auth import hash_token
from rag_monitor.review.golden import golden_rows, write_jsonl
from tests.review.test_review_api import Client
from tests.services import wait_until

pytestmark = pytest.mark.integration

SEEDS = {
    "email": ["jane.doe@example.com", "ops+billing@corp.example.org"],
    "phone": ["+1 415-555-0132", "(415) 555-0199", "+44 20 7946 0958"],
    "card": ["4111 1111 1111 1111", "5500-0000-0000-0004"],
    "iban": ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432"],
    "ip": ["192.168.10.24", "2001:db8::8a2e:370:7334"],
}
ALL = [s for values in SEEDS.values() for s in values]


def leaks(text: str) -> list[str]:
    compact = text.replace(" ", "").replace("-", "")
    return [s for s in ALL if s in text or s.replace(" ", "").replace("-", "") in compact]


def test_seeded_pii_reaches_no_sink(start_agent, phoenix_server, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    agent = start_agent(phoenix_url=phoenix_server.url, phoenix_project="pii-audit",
                        review_tokens=f"alice:reviewer:{hash_token('alice-token')}")
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
    trace_ids = []
    try:
        for i, (kind, values) in enumerate(SEEDS.items()):
            seeded = " and ".join(values)
            with monitor.query(f"My {kind} is {seeded}, why was I charged twice?", session_id=f"s{i}", user_id=values[0]) as q:
                q.filter(kind="relevance", predicate="locale = 'en'", candidates_in=5, candidates_out=1,
                         excluded_ids=["doc-x"], excluded_documents=[{"id": "doc-x", "content": f"Contact: {seeded}"}])
                with q.retrieve() as r:
                    r.documents([{"id": f"doc-{i}", "content": f"Customer record: {seeded}. Duplicate charges are refunded.",
                                  "metadata": {"owner": values[0]}}])
                with q.generate(model="gpt-4o-mini") as g:
                    g.tokens(prompt=100, completion=20)
                q.answer(f"We refunded the charge; we will write to {seeded}.")
            trace_ids.append(q.trace_id)
        monitor.force_flush()
        for trace_id in trace_ids:
            monitor.feedback(trace_id, "thumbs_down", reason=f"wrong, call me at {SEEDS['phone'][0]}")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.store.queue.depth().get("queued") == len(trace_ids), timeout=20, what="every query in review")
    assert agent.metric_sum("rag_agent_pii_redactions_total") >= len(ALL)

    # the store: every table, every column, as SQLite holds it
    db = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert "Duplicate charges are refunded" in dump and not leaks(dump)

    # the review page and API
    alice = Client(agent.http_url)
    alice.login("alice-token")
    seen = []
    while (response := alice.api("POST", "/api/review/claim"))[0] == 200:
        view = json.loads(response[1])
        seen.append(response[1].decode())
        status, step_two = alice.api("POST", f"/api/review/items/{view['item']}/relevance", {})
        assert status == 200
        seen.append(step_two.decode())
        assert alice.api("POST", f"/api/review/items/{view['item']}/labels", {"faithful": "yes"})[0] == 200
    assert len(seen) == 2 * len(trace_ids) and not leaks("\n".join(seen))  # both steps of every item

    # the golden export
    golden = tmp_path / "golden.jsonl"
    write_jsonl(golden_rows(agent.store), golden)
    assert not leaks(golden.read_text())

    # the spans forwarded to Phoenix
    from phoenix.client import Client as PhoenixClient

    def forwarded():
        frame = PhoenixClient(base_url=phoenix_server.url).spans.get_spans_dataframe(project_identifier="pii-audit")
        return frame if len(frame) >= 5 * len(trace_ids) else None

    wait_until(lambda: forwarded() is not None, timeout=30, interval=0.5, what="the spans in Phoenix")
    frame = forwarded()
    assert "<EMAIL>" in frame.to_json() and not leaks(frame.to_json())

    # the logs
    assert not leaks(caplog.text)
