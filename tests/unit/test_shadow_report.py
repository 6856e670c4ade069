"""The shadow report's numbers on reviewed pairs whose outcome is known by construction."""

from __future__ import annotations

import math

import pytest

from rag_monitor.record import ModelCall, QueryRecord
from rag_monitor.review.shadow import build_report, quantile, win_rate
from rag_monitor.store import Review, ReviewItem, Score

Z = 1.959963984540054


def wilson_by_hand(wins: float, n: int) -> tuple[float, float]:
    p = wins / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return centre - half, centre + half


def record(trace: int, seconds: float, *, shadow_of: int | None = None, refused: bool = False, tokens: int = 0,
           candidate: str | None = "fixed") -> QueryRecord:
    return QueryRecord(
        trace_id=f"{trace:032x}", root_span_id=f"{trace:016x}", start_ns=0, end_ns=int(seconds * 1e9),
        variant="shadow" if shadow_of else "production", shadow_of=f"{shadow_of:032x}" if shadow_of else None,
        candidate=candidate if shadow_of else None, refused=refused, tenant="acme",
        model_calls=[ModelCall("llm", "m", tokens, 0)] if tokens else [],
    )


def pair_item(i: int, candidate: QueryRecord, production: QueryRecord, weight: float = 1.0) -> ReviewItem:
    return ReviewItem(id=i, queue="default", trace_id=candidate.trace_id, stratum="shadow_pair", inclusion_prob=1 / weight,
                      weight=weight, tenant="acme", record=candidate.to_dict(), pair_trace_id=production.trace_id,
                      state="reviewed", claimed_by=None, claim_expires_at=None, created_at=0.0, reviewed_at=1.0,
                      pair_record=production.to_dict())


def review(item_id: int, preferred: str | None, candidate_first: bool, n: int = 0) -> Review:
    order = ["shadow", "production"] if candidate_first else ["production", "shadow"]
    return Review(item_id * 10 + n, item_id, f"r{n}", {"preferred": preferred, "pair_order": order}, 1.0 + n)


# (preferred, candidate shown first): 4 shown first, 3 wins and 1 loss; 6 shown second, 3 wins,
# 1 loss, 2 ties. Overall 6 wins, 2 losses, 2 ties: (6 + 2/2) / 10 = 0.7.
VERDICTS = [("shadow", True)] * 3 + [("production", True)] + [("shadow", False)] * 3 + [("production", False)] + [("tie", False)] * 2


@pytest.fixture
def pairs():
    items, reviews = [], {}
    for i, (preferred, first) in enumerate(VERDICTS, start=1):
        candidate = record(100 + i, seconds=i, shadow_of=i, refused=(i == 10), tokens=1000)
        production = record(i, seconds=2 * i, tokens=3000)
        items.append(pair_item(i, candidate, production))
        reviews[i] = [review(i, preferred, first)]
    # Two pairs reviewed again in the other order: item 1 keeps its verdict, item 4 flips to the candidate.
    reviews[1].append(review(1, "shadow", False, n=1))
    reviews[4].append(review(4, "shadow", False, n=1))
    # An unreviewed pair counts in the automatic comparisons but not in the win rate.
    items.append(pair_item(11, record(111, 11, shadow_of=11, tokens=1000), record(11, 22, tokens=3000)))
    return items, reviews


def test_win_rate_ties_count_half_with_a_wilson_interval(pairs):
    items, reviews = pairs
    report = build_report(items, reviews, {}).candidates[0]
    assert (report.candidate, report.pairs, report.reviewed) == ("fixed", 11, 10)
    w = report.win
    assert (w.wins, w.losses, w.ties, w.judged) == (6, 2, 2, 10)
    assert w.value == pytest.approx(0.7)
    assert (w.low, w.high) == pytest.approx(wilson_by_hand(7, 10))


def test_position_swap_consistency(pairs):
    items, reviews = pairs
    position = build_report(items, reviews, {}).candidates[0].position
    assert position.shown_first.value == pytest.approx(3 / 4)
    assert position.shown_second.value == pytest.approx(4 / 6)
    assert position.gap == pytest.approx(3 / 4 - 4 / 6)
    assert (position.swapped_pairs, position.swapped_agree, position.swap_agreement) == (2, 1, 0.5)


def test_automatic_comparisons_per_side(pairs):
    items, reviews = pairs
    scores = {f"{100 + i:032x}": {"support-v1": Score(f"{100 + i:032x}", "support-v1", 0.9, "1", "supported")} for i in range(1, 11)}
    # production halves are scored with their pair, under the pair-half name (never in the metrics)
    scores.update({f"{i:032x}": {"support-v1:pair-half": Score(f"{i:032x}", "support-v1:pair-half", 0.1, "1",
                                                               "unsupported" if i <= 4 else "supported")}
                   for i in range(1, 11)})
    scores[f"{111:032x}"] = {"support-v1": Score(f"{111:032x}", "support-v1", None, "1", "no_claims")}
    report = build_report(items, reviews, scores, call_cost=lambda call: call.input_tokens * 1e-6)
    assert report.scorer == "support-v1"
    cand, prod = report.candidates[0].sides["candidate"], report.candidates[0].sides["production"]
    assert cand.queries == prod.queries == 11
    assert (cand.latency_p50_s, cand.latency_p95_s) == pytest.approx((6.0, 10.5))  # 1..11 s
    assert (prod.latency_p50_s, prod.latency_p95_s) == pytest.approx((12.0, 21.0))
    assert (cand.cost_per_query_usd, prod.cost_per_query_usd) == pytest.approx((0.001, 0.003))
    assert (cand.refusal_rate, prod.refusal_rate) == pytest.approx((1 / 11, 0.0))
    assert (cand.unsupported_rate, cand.scored) == (0.0, 10)  # no_claims is not judged
    assert (prod.unsupported_rate, prod.scored) == (pytest.approx(0.4), 10)
    as_json = report.to_dict()["candidates"][0]
    assert as_json["win"]["value"] == pytest.approx(0.7) and as_json["position"]["swap_agreement"] == 0.5
    assert "0.700 [" in report.text()
    # The cost line is followed by its components (here all generation).
    assert cand.cost_components_usd == pytest.approx({"generation": 0.001})
    assert "    generation                0.001000      0.003000" in report.text()


def test_weights_and_edges():
    assert win_rate([]).value is None
    weighted = win_rate([(1.0, 1.0), (0.0, 3.0)])  # a loss weighing three times a win
    assert weighted.value == pytest.approx(0.25) and (weighted.wins, weighted.losses) == (1, 1)
    # Kish effective size (1 + 3)^2 / (1 + 9) = 1.6
    n = 1.6
    p = 0.25
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    assert (weighted.low + weighted.high) / 2 == pytest.approx(centre)
    assert quantile([], 0.5) is None and quantile([3.0], 0.95) == 3.0
    assert build_report([], {}, {}).text().startswith("no sampled shadow pairs")


def test_unnamed_candidates_and_missing_pair_order_fall_back_to_the_page_order():
    from rag_monitor.review.blind import pair_order

    candidate, production = record(201, 1, shadow_of=200, candidate=None), record(200, 1)
    item = pair_item(7, candidate, production)
    first = pair_order(7, item.query_record, item.paired_record)[0] == "shadow"
    old = Review(1, 7, "r", {"preferred": "shadow"}, 1.0)  # a review stored before pair_order existed
    report = build_report([item], {7: [old]}, {}).candidates[0]
    assert report.candidate == "shadow"
    assert (report.position.shown_first if first else report.position.shown_second).wins == 1


def test_a_shadow_candidates_filters_never_count_as_production_false_exclusions():
    from rag_monitor.record import FilterApplied
    from rag_monitor.review.stats import false_exclusion_stats

    removed = [FilterApplied("relevance", excluded_ids=["gold"])]
    candidate = record(301, 1, shadow_of=300)
    candidate.filters = removed
    production = record(300, 1)
    production.filters = removed
    alone = pair_item(9, production, production)
    alone = ReviewItem(**{**alone.__dict__, "pair_trace_id": None, "pair_record": None})
    labels = {"relevant_documents": ["gold"]}
    stats = false_exclusion_stats([(pair_item(8, candidate, production), Review(1, 8, "r", labels, 1.0)),
                                   (alone, Review(2, 9, "r", labels, 1.0))])
    assert [(s.eligible, s.false_exclusions) for s in stats] == [(1, 1)]  # the production item alone


class PairStore:
    """The three reads the shadow report makes, over fixed items (a fake inside a unit test): each
    repository it reads is this object."""

    def __init__(self, items, reviews):
        self.items, self.reviews = items, reviews
        self.queue = self.review = self.scores = self

    def paired_items(self, since=None):
        return self.items

    def all_reviews(self, item_ids=None):
        return self.reviews

    def for_traces(self, trace_ids):
        return {}


def test_the_metrics_carry_the_report_numbers(pairs):
    from prometheus_client import CollectorRegistry

    from rag_monitor.review.shadow_collector import ShadowMetricsCollector

    registry = CollectorRegistry()
    registry.register(ShadowMetricsCollector(PairStore(*pairs), call_cost=lambda call: call.input_tokens * 1e-6))
    v = {"variant": "fixed"}
    get = registry.get_sample_value
    assert get("rag_shadow_win_rate", v) == pytest.approx(0.7)
    assert (get("rag_shadow_win_rate_lower", v), get("rag_shadow_win_rate_upper", v)) == pytest.approx(wilson_by_hand(7, 10))
    assert [get("rag_shadow_pairs_reviewed", {**v, "verdict": k}) for k in ("win", "loss", "tie")] == [6, 2, 2]
    assert get("rag_shadow_pairs_sampled", v) == 11
    assert get("rag_shadow_position_win_rate", {**v, "position": "first"}) == pytest.approx(0.75)
    assert (get("rag_shadow_swapped_pairs", v), get("rag_shadow_swap_agreement_ratio", v)) == (2, 0.5)
    assert get("rag_shadow_latency_p50_seconds", {**v, "side": "production"}) == pytest.approx(12.0)
    assert get("rag_shadow_cost_per_query_usd", {**v, "side": "candidate"}) == pytest.approx(0.001)
    assert get("rag_shadow_unsupported_ratio", {**v, "side": "candidate"}) is None  # nothing scored: absent, not 0
