"""Two reviewers in real Chromium, over https through a real nginx, round-robin between two agent
replicas on PostgreSQL: log in, label blind in two steps with the keyboard, review twice, see
agreement, export. Nothing in the relevance step's DOM or network responses tells delivered
from dropped; no entitlement-excluded or other tenant's document ever reaches a reviewer."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from rag_monitor.record import Document, FilterApplied, QueryRecord
from rag_monitor.review.auth import hash_token
from rag_monitor.store import open_store
from tests.review.nginx import TLSProxy

pytestmark = pytest.mark.integration

N_ITEMS = 3
FORBIDDEN = ("PRIVATE-", "GLOBEX-")
"""Entitlement-excluded documents and another tenant's items, documents and answers."""
# faithful labels (alice, bob) per item: observed 2/3, chance (2*1 + 1*2)/9, kappa (2/3 - 4/9) / (5/9) = 0.4
FAITHFUL = [("yes", "yes"), ("no", "no"), ("yes", "no")]


def acme_record(i: int) -> QueryRecord:
    live, dropped = Document(f"live-{i}", f"LIVE {i}: cancel online."), Document(f"drop-{i}", f"DROPPED {i}: cancel by phone.")
    return QueryRecord(
        trace_id=f"{i + 1:032x}", root_span_id="00" * 8, start_ns=1, end_ns=2, tenant="acme", session_id=f"s{i}",
        query=f"Question {i}: how do I cancel?", answer=f"ANSWER {i}: cancel online.", release="r1", variant="production",
        filters=[FilterApplied("entitlement", "tenant = acme", 5, 4, [f"priv-{i}"], [Document(f"priv-{i}", f"PRIVATE-{i} globex terms")]),
                 FilterApplied("relevance", "version = 2", 4, 1, [f"drop-{i}", f"blank-{i}"], [dropped])],
        retrieved=[live, Document(f"priv-{i}", f"PRIVATE-{i} globex terms"), Document(f"other-{i}", f"OTHER {i}: refunds."),
                   Document(f"x-{i}", f"GLOBEX-DOC {i}", metadata={"tenant": "globex"})],
        delivered=[live],
    )


def seed(url: str) -> None:
    store = open_store(url)
    try:
        for i in range(N_ITEMS):
            store.queue.enqueue(acme_record(i), stratum="base", inclusion_prob=0.5)
        globex = acme_record(9)
        globex.tenant, globex.trace_id, globex.query = "globex", "ff" * 16, "GLOBEX-QUESTION"
        store.queue.enqueue(globex, stratum="base", inclusion_prob=1.0)
    finally:
        store.close()


class Reviewer:
    """One person in their own browser context, with every API response they receive."""

    def __init__(self, browser, base: str, name: str):
        self.context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 1000})
        self.page = self.context.new_page()
        self.base, self.name = base, name
        self.responses: list[str] = []
        self.page.route(re.compile(r".*/api/review/.*"), self._through)

    def _through(self, route) -> None:
        """Pass the request on and keep the exact body the browser receives."""
        response = route.fetch()
        self.responses.append(response.text())
        route.fulfill(response=response)

    def login(self) -> None:
        self.page.goto(f"{self.base}/review")
        self.page.fill("#reviewer", self.name)
        self.page.fill("#token", f"{self.name}-token")
        self.page.keyboard.press("Enter")
        self.page.wait_for_selector("#relevance:visible, #status:has-text('queue is empty')")

    def bodies(self) -> list[str]:
        out, self.responses = self.responses, []
        return out


def check_relevance_step_is_blind(page, bodies: list[str]) -> int:
    """Assert the step-one DOM and responses cannot tell delivered from dropped; the item's number."""
    dom = page.content()
    claims = [json.loads(b) for b in bodies if b.startswith("{") and "\"step\":\"relevance\"" in b]
    assert len(claims) == 1, bodies
    (claim,) = claims
    item = int(claim["item"])
    i = next(n for n in range(N_ITEMS) if f"Question {n}:" in claim["question"])
    for text in (dom, *bodies):
        assert f"ANSWER {i}" not in text  # the answer's wording would tell which document it used
        assert "live-" not in text and "drop-" not in text and "delivered" not in text.lower()
    assert set(claim) == {"item", "step", "question", "candidates", "left_out"} and claim["left_out"] == 1
    assert all(set(c) == {"key", "content"} for c in claim["candidates"])
    assert [c["key"] for c in claim["candidates"]] == [f"d{n + 1}" for n in range(len(claim["candidates"]))]
    assert sorted(c["content"].split(":")[0] for c in claim["candidates"]) == [f"DROPPED {i}", f"LIVE {i}", f"OTHER {i}"]
    # every candidate is the same markup around its text and its opaque key: nothing marks the delivered one
    shapes = page.eval_on_selector_all("#candidates li", """els => els.map(e => {
        const c = e.cloneNode(true); c.querySelector('p').textContent = '';
        c.querySelectorAll('input').forEach(i => i.setAttribute('value', '')); return c.outerHTML; })""")
    assert len(set(shapes)) == 1 and len(shapes) == 3
    assert page.is_visible("#left-out") and "1 candidate" in page.inner_text("#left-out")
    return item


def label(reviewer: Reviewer, position: int, seen: list[str]) -> str:
    page = reviewer.page
    page.wait_for_selector("#relevance:visible")
    bodies = reviewer.bodies()
    seen += [*bodies, page.content()]
    check_relevance_step_is_blind(page, bodies)
    question = page.inner_text("#question")
    i = int(re.search(r"Question (\d+)", question).group(1))
    texts = page.eval_on_selector_all("#candidates li p", "els => els.map(e => e.textContent)")
    live = next(n for n, t in enumerate(texts) if t.startswith("LIVE")) + 1
    page.keyboard.press(f"Digit{live}")          # relevant ...
    page.keyboard.press(f"Shift+Digit{live}")    # ... and gold
    page.keyboard.press("Enter")
    page.wait_for_selector("#answer-step:visible")
    seen += [*reviewer.bodies(), page.content()]  # step two may show the delivered contexts
    assert page.inner_text("#contexts") == f"LIVE {i}: cancel online." and f"ANSWER {i}" in page.inner_text("#answer")
    page.keyboard.press("f" if FAITHFUL[i][position] == "yes" else "u")
    page.keyboard.press("x")                     # not correct ...
    page.keyboard.press("a")                     # ... and what it should have said
    page.keyboard.type(f"EXPECTED {i}: cancel online under Billing.")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    page.wait_for_selector("#relevance:visible, #status:has-text('queue is empty')")
    return page.content()


def test_two_reviewers_over_https_through_nginx_to_two_replicas(browser, postgres_url, start_agent_process, tmp_path):
    seed(postgres_url)
    tokens = ",".join(f"{name}:reviewer:{hash_token(name + '-token')}:acme" for name in ("alice", "bob"))
    tokens += f",carol:admin:{hash_token('carol-token')}"
    replicas = [start_agent_process(store_url=postgres_url, review_tokens=tokens, trusted_proxies="127.0.0.1",
                                    review_double_share=1.0, detector_profiles="") for _ in range(2)]
    proxy = TLSProxy([r.http_port for r in replicas])
    try:
        alice, bob = Reviewer(browser, proxy.url, "alice"), Reviewer(browser, proxy.url, "bob")
        seen: list[str] = []
        for position, reviewer in enumerate((alice, bob)):
            reviewer.login()
            cookie = next(c for c in reviewer.context.cookies() if "rag_monitor_review" in c["name"])
            assert cookie["name"].startswith("__Host-") and cookie["secure"] and cookie["httpOnly"]
            for _ in range(N_ITEMS):
                label(reviewer, position, seen)
            reviewer.page.wait_for_selector("#status:has-text('queue is empty')")
            seen += [*reviewer.bodies(), reviewer.page.content()]
        # both replicas served the reviewers; nothing forbidden ever reached a browser
        assert len(proxy.upstreams_used()) == 2
        everything = "\n".join(seen)
        assert "LIVE 0" in everything and "DROPPED 0" in everything and "OTHER 0" in everything  # the capture works
        for forbidden in FORBIDDEN:
            assert forbidden not in everything

        # agreement on the page (after a reload, from whichever replica answers) and in /metrics
        bob.page.reload()
        bob.page.wait_for_selector("#agreement td:has-text('faithful')")
        row = bob.page.inner_text("#agreement tbody tr:first-child")
        assert row.split() == ["faithful", "0.40", "3"]
        assert "alice" in bob.page.inner_text("#team") and "3" in bob.page.inner_text("#team")
        for replica in replicas:
            assert replica.metric_sum("rag_review_agreement_kappa", label="faithful") == pytest.approx(0.4)
            assert replica.metric_sum("rag_review_judged_ratio", measure="evidence_coverage", release="r1") == pytest.approx(1.0)
        if __import__("os").environ.get("RAG_MONITOR_E2E_SCREENSHOTS"):
            bob.page.screenshot(path=str(tmp_path / "agreement.png"), full_page=True)

        # the golden-set export carries what the reviewers wrote
        out = tmp_path / "golden.jsonl"
        subprocess.run([sys.executable, "-m", "rag_monitor.cli", "export", "golden", "--store-url", postgres_url, "--out", str(out)],
                       check=True, capture_output=True)
        rows = {r["question"]: r for r in map(json.loads, out.read_text().splitlines())}
        assert len(rows) == N_ITEMS
        for i in range(N_ITEMS):
            row = rows[f"Question {i}: how do I cancel?"]
            assert row["expected_answer"] == f"EXPECTED {i}: cancel online under Billing."
            assert row["gold_doc_ids"] == [f"live-{i}"] and row["export_version"] == "2"
            assert row["agreement"] == ("agreed" if FAITHFUL[i][0] == FAITHFUL[i][1] else "disagreed")
            assert [r["reviewer"] for r in row["reviews"]] == ["alice", "bob"]
            assert row["links"]["trace_id"] == f"{i + 1:032x}"
        assert len({r["split"] for r in rows.values()}) >= 1
    finally:
        proxy.stop()
