"""The shadow report: per candidate pipeline, how it compares with production on the same queries.

From the sampled shadow pairs (review items stored with both halves; ``rag.shadow.candidate``
names the candidate, else it is called ``shadow``):

- **Win rate**, from each pair's first review: the candidate's answer preferred scores 1,
  production's 0, a tie 1/2 (so a candidate no better and no worse sits at 0.5, the null of a
  pairwise test); pairs the reviewer gave no verdict are left out. Weighted by the items' weights
  (1 / inclusion probability), with the 95% Wilson interval at the Kish effective sample size,
  as the other human-judged rates (``rates.py``). With no judged pair the rate is absent.
- **Position-swap consistency**: the win rate when the candidate's answer was shown first (A)
  and when it was shown second (B): a verdict that depends on the side, not the answer, shows
  as a gap between them. Pairs reviewed twice are shown in both orders (``blind.py``): the share
  whose two verdicts name the same answer (or both a tie) is the swap agreement.
- **Automatic comparisons**, over both halves of every sampled pair (reviewed or not, so paired
  on the same queries; unweighted): latency p50/p95 (linear interpolation between order
  statistics), cost per query as the agent prices it (priced queries only,
  ``price_query``: every call, per-call prices and the storage share included, with its components), refusal rate, and the faithfulness
  unsupported rate (unsupported over supported + unsupported, from one scorer's stored labels).
  The scorer scores a pair's production half with the pair, stored as ``<scorer>:pair-half``
  (``pair_half_scorer``) so that no faithfulness metric counts an answer not sampled for itself.
- **Reviewed unsupported and incorrect rates per side**: each side's answer is judged faithful
  and correct against the contexts *it* was given (``pair_verdicts``, ``blind.py``); from each
  pair's first review, the weighted share judged ``no`` over ``yes`` + ``no`` (``unsure`` left
  out), with its 95% Wilson interval, as the win rate.

Usage::

    report = shadow_report(store, call_cost=prices.call_cost)
    print(report.text()); json.dumps(report.to_dict())
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rag_monitor import semconv
from rag_monitor.collectors.pricing import price_query
from rag_monitor.record import ModelCall, QueryRecord
from rag_monitor.review.blind import pair_order
from rag_monitor.estimators import WeightedRate, weighted_rate

UNNAMED_CANDIDATE = semconv.VARIANT_SHADOW
PAIR_HALF_SUFFIX = ":pair-half"


def pair_half_scorer(scorer: str) -> str:
    """The scorer name a pair's production half is stored under (never counted in metrics)."""
    return scorer + PAIR_HALF_SUFFIX

SIDES = ("candidate", "production")
_JUDGED = ("supported", "unsupported")


@dataclass(frozen=True)
class WinRate:
    wins: int
    losses: int
    ties: int
    value: float | None
    """(weighted) wins + ties / 2 over judged pairs; None with none judged."""
    low: float | None
    high: float | None

    @property
    def judged(self) -> int:
        return self.wins + self.losses + self.ties


def win_rate(outcomes: Iterable[tuple[float, float]]) -> WinRate:
    """From ``(score, weight)`` pairs, score 1 (win), 0.5 (tie) or 0 (loss)."""
    counts = Counter()
    w = wy = w2 = 0.0
    for score, weight in outcomes:
        counts[score] += 1
        w, wy, w2 = w + weight, wy + weight * score, w2 + weight * weight
    if not w:
        return WinRate(0, 0, 0, None, None, None)
    rate = WeightedRate.from_sums(w, wy, w2)
    return WinRate(counts[1.0], counts[0.0], counts[0.5], rate.value, rate.low, rate.high)


@dataclass(frozen=True)
class PositionCheck:
    shown_first: WinRate
    shown_second: WinRate
    swapped_pairs: int
    """Pairs reviewed twice, in both orders."""
    swapped_agree: int
    """Of which both reviews named the same answer (or both a tie)."""

    @property
    def gap(self) -> float | None:
        """Win rate shown first minus shown second (0: no position effect)."""
        a, b = self.shown_first.value, self.shown_second.value
        return None if a is None or b is None else a - b

    @property
    def swap_agreement(self) -> float | None:
        return self.swapped_agree / self.swapped_pairs if self.swapped_pairs else None


@dataclass(frozen=True)
class ReviewedRate:
    """A side's weighted share of reviewed answers judged ``no`` (unfaithful, incorrect), 95% Wilson interval."""

    value: float
    low: float
    high: float
    judged: int


def reviewed_rate(outcomes: list[tuple[float, float]]) -> ReviewedRate | None:
    """From ``(1 if judged no else 0, weight)`` pairs; None with none judged."""
    rate = weighted_rate([w for _, w in outcomes], [y for y, _ in outcomes])
    return None if rate is None else ReviewedRate(rate.value, rate.low, rate.high, len(outcomes))


REVIEWED_MEASURES = (("reviewed_unsupported", "faithful"), ("reviewed_incorrect", "correct"))
"""SideStats field, and the per-side label whose ``no`` it counts."""


@dataclass(frozen=True)
class SideStats:
    """One half of the pairs (the candidate's answers, or production's on the same queries)."""

    queries: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    cost_per_query_usd: float | None
    priced: int
    refusal_rate: float | None
    unsupported_rate: float | None
    scored: int
    cost_components_usd: dict[str, float] = field(default_factory=dict)
    """Mean per priced query of each component (generation, embedding, rerank, retrieval, storage)."""
    reviewed_unsupported: ReviewedRate | None = None
    """Reviewers' verdict on this side's answers against this side's contexts (first review per pair)."""
    reviewed_incorrect: ReviewedRate | None = None


@dataclass(frozen=True)
class CandidateReport:
    candidate: str
    pairs: int
    """Sampled pairs stored whole."""
    reviewed: int
    win: WinRate
    position: PositionCheck
    sides: dict[str, SideStats]
    """``candidate`` and ``production``."""


@dataclass(frozen=True)
class ShadowReport:
    candidates: list[CandidateReport]
    scorer: str | None

    def to_dict(self) -> dict[str, Any]:
        out = []
        for c in self.candidates:
            d = asdict(c)
            d["win"]["judged"] = c.win.judged
            for side in ("shown_first", "shown_second"):
                d["position"][side]["judged"] = getattr(c.position, side).judged
            d["position"]["gap"] = c.position.gap
            d["position"]["swap_agreement"] = c.position.swap_agreement
            out.append(d)
        return {"scorer": self.scorer, "candidates": out}

    def text(self) -> str:
        if not self.candidates:
            return "no sampled shadow pairs yet (q.shadow(...) in the app, and shadow_pair_rate > 0)"
        lines = []
        for c in self.candidates:
            w, p = c.win, c.position
            lines.append(f"candidate {c.candidate}: {c.pairs} sampled pairs, {c.reviewed} reviewed")
            lines.append(f"  win rate vs production  {_rate(w)}  ({w.wins} wins, {w.ties} ties, {w.losses} losses;"
                         " a tie counts 1/2)")
            lines.append(f"  shown first (A)         {_rate(p.shown_first)}  ({p.shown_first.judged} pairs)")
            lines.append(f"  shown second (B)        {_rate(p.shown_second)}  ({p.shown_second.judged} pairs)")
            agreement = "-" if p.swap_agreement is None else f"{p.swap_agreement:.2f}"
            lines.append(f"  swap agreement          {agreement}  ({p.swapped_agree}/{p.swapped_pairs} pairs reviewed in both orders)")
            lines.append(f"  {'':22}  {'candidate':>12}  {'production':>12}")
            for name, attr, fmt in (("latency p50 (s)", "latency_p50_s", "{:.3f}"), ("latency p95 (s)", "latency_p95_s", "{:.3f}"),
                                    ("cost per query (USD)", "cost_per_query_usd", "{:.6f}"), ("refusal rate", "refusal_rate", "{:.3f}"),
                                    (f"unsupported ({self.scorer or 'no scorer'})", "unsupported_rate", "{:.3f}")):
                cells = [_cell(getattr(c.sides[s], attr), fmt) for s in SIDES]
                lines.append(f"  {name:22}  {cells[0]:>12}  {cells[1]:>12}")
                if attr == "unsupported_rate":
                    for label, measure in (("unsupported (reviewers)", "reviewed_unsupported"),
                                           ("incorrect (reviewers)", "reviewed_incorrect")):
                        cells = [_reviewed(getattr(c.sides[s], measure)) for s in SIDES]
                        lines.append(f"  {label:22}  {cells[0]:>12}  {cells[1]:>12}")
                if attr == "cost_per_query_usd":
                    parts = sorted({k for s in SIDES for k in c.sides[s].cost_components_usd})
                    for part in parts:
                        cells = [_cell(c.sides[s].cost_components_usd.get(part), fmt) for s in SIDES]
                        lines.append(f"    {part:20}  {cells[0]:>12}  {cells[1]:>12}")
        return "\n".join(lines)


def _rate(w: WinRate) -> str:
    return "-" if w.value is None else f"{w.value:.3f} [{w.low:.3f}, {w.high:.3f}]"


def _reviewed(rate: ReviewedRate | None) -> str:
    return "-" if rate is None else f"{rate.value:.3f} n={rate.judged}"


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def quantile(values: list[float], q: float) -> float | None:
    """Linear interpolation between order statistics (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def query_cost(record: QueryRecord, call_cost: Callable[[ModelCall], float | None],
               storage_usd_per_query: float = 0.0) -> float | None:
    """The query's cost as the agent's ``rag_query_cost_usd`` has it (``price_query``)."""
    return price_query(record, call_cost, storage_usd_per_query).total_usd


def side_stats(records: list[QueryRecord], labels: dict[str, str | None],
               call_cost: Callable[[ModelCall], float | None] | None, storage_usd_per_query: float = 0.0) -> SideStats:
    """``labels``: trace id -> the scorer's stored verdict (``supported``, ``unsupported``, ...)."""
    latencies = [r.duration_s for r in records]
    costs = [c for c in (price_query(r, call_cost, storage_usd_per_query) for r in records)] if call_cost else []
    priced = [c for c in costs if c.total_usd is not None]
    components: dict[str, float] = defaultdict(float)
    for cost in priced:
        for name, usd in cost.components.items():
            components[name] += usd / len(priced)
    verdicts = [labels.get(r.trace_id) for r in records]
    judged = [v for v in verdicts if v in _JUDGED]
    return SideStats(
        queries=len(records),
        latency_p50_s=quantile(latencies, 0.5),
        latency_p95_s=quantile(latencies, 0.95),
        cost_per_query_usd=sum(c.total_usd for c in priced) / len(priced) if priced else None,
        priced=len(priced),
        refusal_rate=sum(r.refused for r in records) / len(records) if records else None,
        unsupported_rate=judged.count("unsupported") / len(judged) if judged else None,
        scored=len(judged),
        cost_components_usd=dict(components),
    )


def halves(item) -> tuple[QueryRecord, QueryRecord] | None:
    """``(candidate, production)`` of a pair item, whichever half the item itself is."""
    own, other = item.query_record, item.paired_record
    if other is None:
        return None
    return (own, other) if own.shadow_of else (other, own)


def verdict(labels: dict[str, Any], candidate: QueryRecord, production: QueryRecord) -> float | None:
    """1 / 0.5 / 0 for the candidate from a review's ``preferred`` label; None when not judged."""
    preferred = labels.get("preferred")
    if preferred == "tie":
        return 0.5
    if candidate.variant == production.variant:
        return None  # nothing tells the two answers apart
    return {candidate.variant: 1.0, production.variant: 0.0}.get(preferred)


def shown_first(item, review_index: int, labels: dict[str, Any], candidate: QueryRecord,
                production: QueryRecord) -> bool:
    """Whether the candidate's answer was shown as A (recorded, else re-derived as the page did)."""
    order = labels.get("pair_order")
    if not (isinstance(order, list) and len(order) == 2):
        own, other = item.query_record, item.paired_record
        order = pair_order(item.id, own, other, swap=review_index % 2 == 1)
    return order[0] == candidate.variant


def build_report(items: list, reviews: dict[int, list], scores: dict[str, dict[str, Any]],
                 call_cost: Callable[[ModelCall], float | None] | None = None,
                 scorer: str | None = None, storage_usd_per_query: float = 0.0) -> ShadowReport:
    """The report from pair items, their reviews (item id -> reviews, first first) and stored scores."""
    if scorer is None:
        named = Counter(name.removesuffix(PAIR_HALF_SUFFIX) for by_scorer in scores.values()
                        for name, s in by_scorer.items() if s.label in _JUDGED)
        scorer = named.most_common(1)[0][0] if named else None
    labels: dict[str, str | None] = {}
    for trace, by_scorer in scores.items():
        found = by_scorer.get(scorer) or by_scorer.get(pair_half_scorer(scorer or ""))
        labels[trace] = found.label if found else None
    groups: dict[str, list] = defaultdict(list)
    for item in items:
        pair = halves(item)
        if pair is not None:
            groups[pair[0].candidate or UNNAMED_CANDIDATE].append((item, *pair))
    out = []
    for name in sorted(groups):
        outcomes, first, second = [], [], []
        judged_sides: dict[str, dict[str, list]] = {side: {m: [] for m, _ in REVIEWED_MEASURES} for side in SIDES}
        swapped = agree = reviewed = 0
        for item, candidate, production in groups[name]:
            item_reviews = reviews.get(item.id, [])
            if item_reviews:
                reviewed += 1
                per_side = item_reviews[0].labels.get("pair_verdicts") or {}
                for side in SIDES:
                    for measure, label in REVIEWED_MEASURES:
                        value = (per_side.get(side) or {}).get(label)
                        if value in ("yes", "no"):
                            judged_sides[side][measure].append((float(value == "no"), item.weight))
            judged = []
            for index, review in enumerate(item_reviews[:2]):
                score = verdict(review.labels, candidate, production)
                if score is None:
                    continue
                front = shown_first(item, index, review.labels, candidate, production)
                judged.append((score, front))
                if index == 0:  # the estimate counts each sampled query once
                    outcomes.append((score, item.weight))
                    (first if front else second).append((score, item.weight))
            if len(judged) == 2 and judged[0][1] != judged[1][1]:
                swapped += 1
                agree += judged[0][0] == judged[1][0]
        rows = groups[name]
        sides = {side: replace(side_stats([r[1 + i] for r in rows], labels, call_cost, storage_usd_per_query),
                               **{m: reviewed_rate(judged_sides[side][m]) for m, _ in REVIEWED_MEASURES})
                 for i, side in enumerate(SIDES)}
        out.append(CandidateReport(name, len(rows), reviewed, win_rate(outcomes),
                                   PositionCheck(win_rate(first), win_rate(second), swapped, agree), sides))
    return ShadowReport(out, scorer)


def shadow_report(store, *, since: float | None = None, call_cost: Callable[[ModelCall], float | None] | None = None,
                  scorer: str | None = None, keep: Callable[[Any], bool] | None = None,
                  storage_usd_per_query: float = 0.0) -> ShadowReport:
    """``build_report`` over the store's pairs (created since ``since``, Unix seconds; ``keep(item)``: a subset).

    ``call_cost`` and ``storage_usd_per_query`` as the agent prices queries (``price_query``).
    """
    items = [item for item in store.queue.paired_items(since) if keep is None or keep(item)]
    reviews = store.review.all_reviews([item.id for item in items]) if items else {}
    traces = [t for item in items for t in (item.trace_id, item.pair_trace_id)]
    scores = store.scores.for_traces(traces) if traces else {}
    return build_report(items, reviews, scores, call_cost, scorer, storage_usd_per_query)
