"""Sample-based rates computed from human reviews.

Filter false-exclusion rate (DESIGN.md): over reviewed queries with at least one
entitlement-eligible document the reviewer marked relevant, the share where a relevance filter
removed all of them. Entitlement exclusions never count: a document the user may not see is
never a false exclusion. Each query counts with its weight (1 / inclusion probability) so
oversampled complaints don't bias the rate; with no qualifying query the rate is absent.
Shadow-pair items are left out: a shadow candidate's filters never served a user.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from rag_monitor import semconv
from rag_monitor.record import QueryRecord
from rag_monitor.estimators import WeightedRate


@dataclass(frozen=True)
class FalseExclusionStats:
    release: str
    eligible: int
    """Reviewed queries with at least one entitlement-eligible relevant document."""
    false_exclusions: int
    weighted_eligible: float
    weighted_false_exclusions: float
    weighted_eligible_squares: float = 0.0
    """Sum of the squared weights: the Kish effective size of the interval."""

    @property
    def ratio(self) -> float | None:
        return self.weighted_false_exclusions / self.weighted_eligible if self.weighted_eligible else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """95% Wilson interval at the Kish effective size, as for the judged rates (``rates.py``)."""
        if not self.weighted_eligible_squares:
            return None
        rate = WeightedRate.from_sums(self.weighted_eligible, self.weighted_false_exclusions, self.weighted_eligible_squares)
        return None if rate is None else (rate.low, rate.high)


def is_false_exclusion(record: QueryRecord, relevant_ids: Iterable[str]) -> bool | None:
    """True/False for a qualifying query; None when it has no eligible relevant document."""
    entitlement_removed: set[str] = set()
    relevance_removed: set[str] = set()
    for applied in record.filters:
        target = entitlement_removed if applied.kind == semconv.FILTER_ENTITLEMENT else relevance_removed
        # Named by excluded_ids or excluded_documents; an id-less document by its content key, as reviews name it.
        target.update(applied.removed_keys)
    eligible = set(relevant_ids) - entitlement_removed
    if not eligible:
        return None
    return eligible <= relevance_removed


def false_exclusion_stats(reviewed: Iterable[tuple[object, object]]) -> list[FalseExclusionStats]:
    """Per release, from ``(ReviewItem, Review)`` pairs as ``store.queue.reviewed()`` returns them."""
    counts: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
    for item, review in reviewed:
        if item.pair_trace_id:
            continue
        record = item.query_record
        verdict = is_false_exclusion(record, review.labels.get("relevant_documents", []))
        if verdict is None:
            continue
        c = counts[record.release or "unknown"]
        c[0] += 1
        c[2] += item.weight
        c[4] += item.weight * item.weight
        if verdict:
            c[1] += 1
            c[3] += item.weight
    return [FalseExclusionStats(release, int(c[0]), int(c[1]), c[2], c[3], c[4]) for release, c in sorted(counts.items())]
