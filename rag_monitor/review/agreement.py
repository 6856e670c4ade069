"""Do reviewers agree? Cohen's kappa per label over the items reviewed twice.

Kappa is (observed agreement - chance agreement) / (1 - chance agreement), chance taken from
each reviewer position's own label frequencies (first and second review of an item). Only
pairs where both reviewers gave the label count; 1 is perfect agreement, 0 chance level.
With no pair, or when both positions used a single category (chance agreement 1), kappa is
undefined (None), never 0.

Usage::

    agreement_by_label(store.review.all_reviews())["faithful"]   # Agreement(kappa=0.62, pairs=40, observed=0.85)
    item_agreement(reviews_of_one_item)                   # 'agreed', 'disagreed', 'single' or 'pending'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

AGREEMENT_LABELS = ("faithful", "correct", "refusal_appropriate")


@dataclass(frozen=True)
class Agreement:
    label: str
    kappa: float | None
    pairs: int
    observed: float | None


def cohen_kappa(pairs: Sequence[tuple[Any, Any]]) -> float | None:
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    chance = sum(first[c] * second[c] for c in set(first) | set(second)) / (n * n)
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)


def _labels(review: Any) -> Mapping[str, Any]:
    return review.labels if hasattr(review, "labels") else review


def label_pairs(reviews_by_item: Mapping[Any, Sequence[Any]], label: str) -> list[tuple[Any, Any]]:
    pairs = []
    for reviews in reviews_by_item.values():
        if len(reviews) < 2:
            continue
        a, b = _labels(reviews[0]).get(label), _labels(reviews[1]).get(label)
        if a is not None and b is not None:
            pairs.append((a, b))
    return pairs


def agreement_by_label(reviews_by_item: Mapping[Any, Sequence[Any]],
                       labels: Iterable[str] = AGREEMENT_LABELS) -> dict[str, Agreement]:
    """Per label, over items with two reviews (reviews or their label dicts, first review first)."""
    out = {}
    for label in labels:
        pairs = label_pairs(reviews_by_item, label)
        observed = sum(a == b for a, b in pairs) / len(pairs) if pairs else None
        out[label] = Agreement(label, cohen_kappa(pairs), len(pairs), observed)
    return out


def item_agreement(reviews: Sequence[Any], reviews_needed: int = 1) -> str:
    """``single`` (one review, one needed), ``pending`` (waiting for the second), ``agreed`` or ``disagreed``."""
    if len(reviews) < 2:
        return "pending" if reviews_needed > 1 else "single"
    a, b = _labels(reviews[0]), _labels(reviews[1])
    keys = [k for k in (*AGREEMENT_LABELS, "gold_documents") if a.get(k) is not None and b.get(k) is not None]
    return "agreed" if all(a.get(k) == b.get(k) for k in keys) else "disagreed"


def agreement_from_golden(rows: Iterable[Mapping[str, Any]], labels: Iterable[str] = AGREEMENT_LABELS) -> dict[str, Agreement]:
    """The same, from golden-set export rows (their ``reviews``): for the calibration report."""
    return agreement_by_label({row["trace_id"]: [r["labels"] for r in row.get("reviews", [])] for row in rows}, labels)
