"""What the reviews say, per release and variant: the human-judged rates of the release worksheet.

- ``correct``: answers accepted as correct, over answers judged yes or no;
- ``supported``: answers supported by their context (``faithful``), over those judged yes or no;
- ``refusal_appropriate``: refusals judged appropriate, over refusals judged yes or no;
- ``evidence_coverage``: reviewed answerable queries (at least one gold document) whose gold
  documents were all delivered, over those queries.

Each reviewed query counts with its weight (1 / inclusion probability, from the sampling
design), so oversampled complaints do not bias a rate. The 95% interval is Wilson's, at the
Kish effective sample size (``rag_monitor.estimators.weighted_rate``). Shadow-pair items are left out: their labels judge two answers.

Usage::

    for rate in judged_rates(store.queue.reviewed()):
        rate.measure, rate.release, rate.variant, rate.value, rate.low, rate.high, rate.items
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rag_monitor.estimators import WeightedRate
from rag_monitor.record import QueryRecord

MEASURES = ("correct", "supported", "refusal_appropriate", "evidence_coverage")


@dataclass(frozen=True)
class JudgedRate:
    measure: str
    release: str
    variant: str
    value: float
    low: float
    high: float
    items: int
    """Reviewed queries in the denominator."""
    positives: int
    """Of which judged positive (unweighted)."""


def judged_outcome(measure: str, record: QueryRecord, labels: dict[str, Any]) -> bool | None:
    """True/False when the query counts for ``measure``; None when it does not."""
    if measure == "evidence_coverage":
        gold = set(labels.get("gold_documents") or [])
        if not gold:
            return None
        delivered = {d.id for d in record.delivered if d.id}
        return gold <= delivered
    label = {"correct": "correct", "supported": "faithful", "refusal_appropriate": "refusal_appropriate"}[measure]
    if measure == "refusal_appropriate" and not record.refused and labels.get(label) is None:
        return None
    value = labels.get(label)
    return None if value not in ("yes", "no") else value == "yes"


def judged_rates(reviewed: Iterable[tuple[Any, Any]],
                 release_label: Callable[[str | None], str] = lambda r: r or "unknown") -> list[JudgedRate]:
    """From ``(ReviewItem, Review)`` pairs (``store.queue.reviewed()``: one, the first, per item)."""
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0])
    for item, review in reviewed:
        if item.pair_trace_id:
            continue
        record = item.query_record
        release = release_label(record.release)
        variant = record.variant or "production"
        for measure in MEASURES:
            outcome = judged_outcome(measure, record, review.labels)
            if outcome is None:
                continue
            s = sums[(measure, release, variant)]
            w = float(item.weight)
            s[0] += w
            s[1] += w * outcome
            s[2] += w * w
            s[3] += 1
            s[4] += int(outcome)
    rates = []
    for (measure, release, variant), (w, wy, w2, n, k) in sorted(sums.items()):
        rate = WeightedRate.from_sums(w, wy, w2, int(n))
        rates.append(JudgedRate(measure, release, variant, rate.value, rate.low, rate.high, int(n), int(k)))
    return rates
