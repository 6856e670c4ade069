"""Shadow evaluation end to end: the SDK runs a candidate beside production into a real agent, two
reviewers judge the pairs blind over HTTP (the second sees each pair in the other order), and the
report, the CLI's JSON and /metrics give the win rate the reviewers' verdicts make."""

from __future__ import annotations

import json
import math

import pytest

import rag_monitor
from rag_monitor.cli import main as cli
from rag_monitor.review.auth import hash_token
from rag_monitor.sdk import ShadowConfig
from tests.review.test_review_api import Client
from tests.services import wait_until

pytestmark = pytest.mark.integration

CURRENT = "Cancel online under Settings > Billing > Cancel plan (current policy)."
ARCHIVED = "To cancel, call our support line during office hours (archived policy)."
REFUNDS = "Refunds reach your card within 5 working days."
# Four questions where production serves the archived policy and the candidate the current one,
# two where both answer alike: the reviewers' truth is 4 wins and 2 ties, (4 + 2/2) / 6.
QUESTIONS = [(f"How do I cancel plan {i}?", True) for i in range(4)] + [(f"When is refund {i} paid?", False) for i in range(2)]
Z = 1.959963984540054


def pipeline(q, question: str, policy_question: bool, fixed: bool, prompt_tokens: int) -> None:
    content = (CURRENT if fixed else ARCHIVED) if policy_question else REFUNDS
    with q.retrieve() as r:
        r.documents([{"id": "policy", "content": content, "score": 0.8}])
    with q.generate(model="gpt-4o-mini") as g:
        g.tokens(prompt=prompt_tokens, completion=20)
    q.answer(content, citations=["policy"])


def prefer_current(view: dict) -> str:
    a, b = view["answers"]
    if a == b:
        return "tie"
    return "A" if "current policy" in a else "B"


def review_all(client: Client) -> list[list[str]]:
    shown = []
    while True:
        status, body = client.api("POST", "/api/review/claim")
        if status == 204:
            return shown
        item = json.loads(body)["item"]
        status, body = client.api("POST", f"/api/review/items/{item}/relevance", {})
        view = json.loads(body)
        assert "answers" in view and "variant" not in json.dumps(view)  # blind: the page names no variant
        # each answer beside the contexts its own side was given (the answers quote them)
        assert view["answer_contexts"] == [[answer] for answer in view["answers"]]
        shown.append(view["answers"])
        labels = {"preferred": prefer_current(view)}
        for side, answer in zip("ab", view["answers"]):  # faithful to its contexts; the archived policy is wrong
            labels |= {f"faithful_{side}": "yes", f"correct_{side}": "no" if "archived" in answer else "yes"}
        assert client.api("POST", f"/api/review/items/{item}/labels", labels)[0] == 200


def test_reviewed_shadow_pairs_produce_the_report(start_agent, tmp_path, capsys):
    sampling = tmp_path / "sampling.yaml"
    # No production answer is scored in its own right (score_rate 0): each is scored only as a pair half.
    sampling.write_text("base_rate: 0.0\nlow_confidence_rate: 0.0\nrefusal_rate: 0.0\nshadow_pair_rate: 1.0\nscore_rate: 0.0\n")
    tokens = ",".join(f"{n}:reviewer:{hash_token(n + '-token')}" for n in ("alice", "bob"))
    agent = start_agent(review_tokens=tokens, review_double_share=1.0, sampling_config=str(sampling), score_interval_s=0.5)
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="r2",
                               shadow=ShadowConfig(share=1.0, timeout_s=30))
    try:
        for question, policy in QUESTIONS:
            with monitor.query(question, tenant="acme", session_id="s1") as q:
                future = q.shadow("fixed", lambda ctx, p=policy: pipeline(ctx.query, ctx.text, p, True, 600))
                pipeline(q, question, policy, False, 300)
            future.result(timeout=30)
        monitor.force_flush()
        assert monitor.shadow_stats().completed == len(QUESTIONS)
    finally:
        monitor.shutdown()
    store = agent.store
    wait_until(lambda: len(store.queue.paired_items()) == len(QUESTIONS), timeout=20, what="the sampled pairs, stored whole")

    alice, bob = Client(agent.http_url), Client(agent.http_url)
    assert alice.login("alice-token") == 200 and bob.login("bob-token") == 200
    first, second = review_all(alice), review_all(bob)
    assert len(first) == len(second) == len(QUESTIONS)
    reviews = store.review.all_reviews()
    orders = [tuple(r.labels["pair_order"]) for item_reviews in reviews.values() for r in item_reviews]
    assert all(r[0].labels["pair_order"] == r[1].labels["pair_order"][::-1] for r in reviews.values())  # swapped
    assert len(orders) == 2 * len(QUESTIONS)

    # the scorer scores each shadow answer and, beside it, its production half (metrics count only the former)
    productions = [item.pair_trace_id for item in store.queue.paired_items()]
    wait_until(lambda: all("lexical-v1:pair-half" in store.scores.for_trace(t) for t in productions), timeout=120,
               what="the production halves' scores")
    scored = {v: agent.metric_sum("rag_faithfulness_scored_total", variant=v) for v in ("shadow", "production")}
    assert scored == {"shadow": len(QUESTIONS), "production": 0}

    settings = agent.agent.settings
    capsys.readouterr()
    assert cli(["shadow", "report", "--json", "--data-dir", settings.data_dir]) == 0
    report = json.loads(capsys.readouterr().out)
    (fixed,) = report["candidates"]
    assert (fixed["candidate"], fixed["pairs"], fixed["reviewed"]) == ("fixed", 6, 6)
    win = fixed["win"]
    assert (win["wins"], win["ties"], win["losses"]) == (4, 2, 0)
    p, n = 5 / 6, 6
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    assert win["value"] == pytest.approx(p) and (win["low"], win["high"]) == pytest.approx((centre - half, centre + half))
    position = fixed["position"]
    assert position["shown_first"]["judged"] + position["shown_second"]["judged"] == 6
    assert (position["swapped_pairs"], position["swapped_agree"], position["swap_agreement"]) == (6, 6, 1.0)
    candidate, production = fixed["sides"]["candidate"], fixed["sides"]["production"]
    assert candidate["cost_per_query_usd"] == pytest.approx((600 * 0.15 + 20 * 0.60) / 1e6)
    assert production["cost_per_query_usd"] == pytest.approx((300 * 0.15 + 20 * 0.60) / 1e6)
    assert candidate["refusal_rate"] == production["refusal_rate"] == 0.0
    assert candidate["scored"] + production["scored"] > 0 and report["scorer"] == "lexical-v1"
    assert candidate["latency_p95_s"] is not None and production["latency_p50_s"] is not None
    # per side, from the first reviews: production served the archived policy on 4 of 6 queries
    assert (production["reviewed_incorrect"]["value"], production["reviewed_incorrect"]["judged"]) == (pytest.approx(4 / 6), 6)
    assert candidate["reviewed_incorrect"]["value"] == 0.0 and candidate["reviewed_unsupported"]["value"] == 0.0
    assert production["reviewed_unsupported"]["value"] == 0.0

    v = {"variant": "fixed"}
    wait_until(lambda: agent.metric("rag_shadow_win_rate", v) is not None, timeout=15, what="the shadow metrics")
    assert agent.metric("rag_shadow_win_rate", v) == pytest.approx(p)
    assert agent.metric("rag_shadow_win_rate_lower", v) == pytest.approx(centre - half)
    assert agent.metric("rag_shadow_pairs_reviewed", {**v, "verdict": "win"}) == 4
    assert agent.metric("rag_shadow_pairs_reviewed", {**v, "verdict": "tie"}) == 2
    assert agent.metric("rag_shadow_pairs_sampled", v) == 6
    assert agent.metric("rag_shadow_swap_agreement_ratio", v) == 1.0
    assert agent.metric("rag_shadow_cost_per_query_usd", {**v, "side": "candidate"}) == pytest.approx(candidate["cost_per_query_usd"])
    assert agent.metric("rag_shadow_reviewed_incorrect_ratio", {**v, "side": "production"}) == pytest.approx(4 / 6)
    assert agent.metric("rag_shadow_reviewed_incorrect_ratio", {**v, "side": "candidate"}) == 0.0
    assert "rag_shadow_win_rate{" in agent.scrape()
