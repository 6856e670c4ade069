"""What reviewers type (notes, corrected answers, skip reasons) is redacted like spans before it is
stored: seeded e-mails and card numbers reach no sink (the store, the golden export, the page)."""

from __future__ import annotations

import json
import sqlite3

from rag_monitor.cli import main as cli
from rag_monitor.review.auth import hash_token
from tests.agent.test_agent_pii_everywhere import CARD, CARD2, EMAIL, EMAIL2, leaks
from tests.review.test_review_api import Client, sample_record

NOTE = f"customer {EMAIL} disputes card {CARD}"
CORRECTED = f"Write to {EMAIL2} or pay with {CARD2}; ref " + EMAIL.replace("@", "\\u0040")
SKIP = f"this is my neighbour {EMAIL}, card {CARD2}"


def test_seeded_pii_typed_by_reviewers_reaches_no_sink(start_agent, tmp_path):
    agent = start_agent(review_tokens=",".join([f"alice:reviewer:{hash_token('alice-token')}",
                                                f"bob:reviewer:{hash_token('bob-token')}",
                                                f"carol:admin:{hash_token('carol-token')}"]))
    for trace_id in ("aa" * 16, "bb" * 16):
        agent.store.queue.enqueue(sample_record(trace_id), stratum="base", inclusion_prob=0.5)
    alice = Client(agent.http_url)
    assert alice.login("alice-token") == 200
    labels = {"faithful": "yes", "correct": "no", "note": NOTE, "corrected_answer": CORRECTED}
    assert alice.review({}, labels) == 200
    status, body = alice.api("POST", "/api/review/claim")
    item = json.loads(body)["item"]
    assert alice.api("POST", f"/api/review/items/{item}/skip", {"reason": SKIP})[0] == 200

    # Stored redacted, with the span redactor's rules and pseudonyms
    redact = agent.agent.redactor.redact_text
    [stored] = [r for reviews in agent.store.review.all_reviews().values() for r in reviews]
    assert stored.labels["note"] == redact(NOTE)[0] == "customer <EMAIL> disputes card <CARD>"
    assert stored.labels["corrected_answer"] == redact(CORRECTED)[0] and "<EMAIL>" in stored.labels["corrected_answer"]
    db = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert "disputes card <CARD>" in dump and "my neighbour <EMAIL>" in dump
    assert not leaks(dump)

    # The golden export, through the command line
    out = tmp_path / "golden.jsonl"
    assert cli(["export", "golden", "--data-dir", agent.agent.settings.data_dir, "--out", str(out)]) == 0
    exported = out.read_text()
    assert "<EMAIL>" in exported and not leaks(exported)

    # The pages: the review page, progress, stats, and the skipped item as the next reviewer sees it
    bob, carol = Client(agent.http_url), Client(agent.http_url)
    assert bob.login("bob-token") == 200 and carol.login("carol-token") == 200
    pages = [bob.call("GET", "/review")[1], bob.api("POST", "/api/review/claim")[1],
             bob.api("GET", "/api/review/progress", csrf=False)[1], carol.api("GET", "/api/review/stats", csrf=False)[1]]
    assert not leaks("\n".join(p.decode() for p in pages))
