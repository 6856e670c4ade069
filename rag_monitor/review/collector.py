"""Review metrics computed from the shared store when Prometheus scrapes.

Per release and variant, the human-judged rates (``rates.py``) with their 95% interval and
counts; per implicit signal and verdict, its association with blind review (``signals.py``); per label, the agreement of items reviewed twice (Cohen's kappa); per reviewer,
progress and throughput. Every replica reads the same store, so replicas agree (rules take
``max``). A rate, interval or kappa with nothing to estimate it from is absent, never 0.

The reviewed items come from the agent's ``ReviewedCache`` (shared with the other review
collectors); the rest (every review of those items, reviewer progress, their feedback) is read
once per ``cache_s``. The agent registers one and calls ``invalidate()`` after each stored review::

    collector = ReviewMetricsCollector(store, reviewers=[r.name for r in reviewers], release_label=releases.label,
                                       reviewed=reviewed_cache)
    registry.register(collector)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rag_monitor.review.agreement import Agreement, agreement_by_label
from rag_monitor.review.rates import JudgedRate, judged_rates
from rag_monitor.review.reviewed_cache import ReviewedCache
from rag_monitor.review.signals import SignalAssociation, add_signal_metrics, signal_associations, signal_families

log = logging.getLogger(__name__)

@dataclass
class _Snapshot:
    rates: list[JudgedRate] = field(default_factory=list)
    agreement: dict[str, Agreement] = field(default_factory=dict)
    progress: dict[str, dict[str, int]] = field(default_factory=dict)
    signals: list[SignalAssociation] = field(default_factory=list)


class ReviewMetricsCollector(Collector):
    def __init__(self, store, *, reviewers: Iterable[str] | None = None,
                 release_label: Callable[[str | None], str] = lambda r: r or "unknown",
                 window_s: float = 30 * 86400, cache_s: float = 10.0, reviewed: ReviewedCache | None = None,
                 clock=time.time):
        self.store = store
        self.reviewed = reviewed if reviewed is not None else ReviewedCache(
            store.queue, window_s=window_s, min_interval_s=cache_s, clock=clock)
        self.reviewers = None if reviewers is None else set(reviewers)
        self.release_label = release_label
        """Raw release -> label value: the agent's ``ReleaseLabels.label``, the fold of every family."""
        self.window_s = window_s
        self.cache_s = cache_s
        self.clock = clock
        self._cached: tuple[float, _Snapshot] = (-float("inf"), _Snapshot())
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        """Recompute on the next scrape (after a review was stored)."""
        self._cached = (-float("inf"), _Snapshot())
        self.reviewed.invalidate()

    def snapshot(self) -> _Snapshot:
        with self._lock:
            at, snap = self._cached
            now = self.clock()
            if now - at < self.cache_s:
                return snap
            reviewed = self.reviewed.pairs(since=now - self.window_s)
            snap = _Snapshot(
                rates=judged_rates(reviewed, self.release_label),
                agreement=agreement_by_label(self.store.review.all_reviews([item.id for item, _ in reviewed])),
                progress=self.store.review.reviewer_progress(),
                signals=signal_associations(
                    reviewed, self.store.feedback.for_traces(item.trace_id for item, _ in reviewed), self.release_label),
            )
            self._cached = (now, snap)
            return snap

    @staticmethod
    def families() -> dict[str, GaugeMetricFamily]:
        rate = ["measure", "release", "variant"]
        return {
            "ratio": GaugeMetricFamily("rag_review_judged_ratio", "Human-judged rate per release and variant (measure: correct, supported, refusal_appropriate, evidence_coverage), weighted by inverse inclusion probability.", labels=rate),
            "lower": GaugeMetricFamily("rag_review_judged_ratio_lower", "Lower end of the 95% Wilson interval of rag_review_judged_ratio (Kish effective sample size).", labels=rate),
            "upper": GaugeMetricFamily("rag_review_judged_ratio_upper", "Upper end of the 95% Wilson interval of rag_review_judged_ratio.", labels=rate),
            "items": GaugeMetricFamily("rag_review_judged_items", "Reviewed queries in the denominator of rag_review_judged_ratio.", labels=rate),
            "positives": GaugeMetricFamily("rag_review_judged_positives", "Reviewed queries judged positive (unweighted numerator).", labels=rate),
            "kappa": GaugeMetricFamily("rag_review_agreement_kappa", "Cohen's kappa between the two reviews of items reviewed twice, per label.", labels=["label"]),
            "pairs": GaugeMetricFamily("rag_review_agreement_pairs", "Items reviewed twice where both reviewers gave the label.", labels=["label"]),
            "reviews": GaugeMetricFamily("rag_review_reviewer_reviews", "Reviews stored per reviewer.", labels=["reviewer"]),
            "recent": GaugeMetricFamily("rag_review_reviewer_recent_reviews", "Reviews per reviewer in the last hour (throughput).", labels=["reviewer"]),
            "skips": GaugeMetricFamily("rag_review_reviewer_skips", "Items each reviewer skipped (with a reason).", labels=["reviewer"]),
            "assigned": GaugeMetricFamily("rag_review_reviewer_assigned_open", "Unreviewed items assigned to a reviewer or group:<name>.", labels=["reviewer"]),
            **{f"signal_{key}": family for key, family in signal_families().items()},
        }

    def describe(self):
        return list(self.families().values())

    def collect(self):
        f = self.families()
        try:
            snap = self.snapshot()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape must still answer
            log.warning("could not compute review metrics: %s", exc)
            snap = _Snapshot()
        for r in snap.rates:
            labels = [r.measure, r.release, r.variant]
            f["ratio"].add_metric(labels, r.value)
            f["lower"].add_metric(labels, r.low)
            f["upper"].add_metric(labels, r.high)
            f["items"].add_metric(labels, r.items)
            f["positives"].add_metric(labels, r.positives)
        for label, a in snap.agreement.items():
            f["pairs"].add_metric([label], a.pairs)
            if a.kappa is not None:
                f["kappa"].add_metric([label], a.kappa)
        for name, p in sorted(snap.progress.items()):
            if self.reviewers is not None and name not in self.reviewers and not name.startswith("group:"):
                continue
            f["reviews"].add_metric([name], p["reviews"])
            f["recent"].add_metric([name], p["recent"])
            f["skips"].add_metric([name], p["skips"])
            f["assigned"].add_metric([name], p["assigned_open"])
        add_signal_metrics({key[len("signal_"):]: family for key, family in f.items() if key.startswith("signal_")}, snap.signals)
        yield from f.values()
