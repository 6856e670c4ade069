"""Metrics computed from the shared store when Prometheus scrapes.

Every replica reads the same store, so these gauges agree across replicas (alert rules take
``max``). The false-exclusion series are absent, not 0, when no reviewed query qualifies.

The false-exclusion rate covers 30 days of reviews. Re-reading them on every scrape grows with
the review history, so ``ReviewStatsCollector`` keeps hourly aggregates per release and reads
only the reviews stored since its last refresh (the ``scrape_cache`` job, and a scrape after
this replica stored a review); hours older than the window fall off. The aggregates keep each
raw release; the release fold (``ReleaseLabels.label``, as in every family) applies when read,
so a release that leaves the labelled set moves into ``other`` here as in the query metrics.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rag_monitor.agent.drift.export import latest_tested
from rag_monitor.review.stats import FalseExclusionStats, false_exclusion_stats

log = logging.getLogger(__name__)

BUCKET_S = 3600.0
OVERLAP_S = 120.0
"""Reviews are re-read this far behind the newest one seen: a replica's review committed late
(or with a slightly slow clock) is still counted, once (review ids already counted are skipped)."""


class ReviewStatsCollector(Collector):
    def __init__(self, store, window_s: float = 30 * 86400, clock=time.time,
                 release_label: Callable[[str | None], str] = lambda r: r or "unknown"):
        self.store = store
        self.release_label = release_label
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[float, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
        self._counted: dict[int, float] = {}
        """Review id -> review time, for reviews within OVERLAP_S of the newest seen."""
        self._newest = 0.0
        self._fresh = False
        self.rows_read = 0
        """Reviews read from the store so far (tests check that a refresh reads only new ones)."""

    def invalidate(self) -> None:
        """Refresh on the next scrape (this replica just stored a review)."""
        self._fresh = False

    def refresh(self) -> None:
        """Fold the reviews stored since the last refresh into the hourly aggregates."""
        with self._lock:
            now = self.clock()
            horizon = now - self.window_s
            since = max(horizon, self._newest - OVERLAP_S) if self._newest else horizon
            new = [(item, review) for item, review in self.store.queue.reviewed(since=since)
                   if review.id not in self._counted]
            self.rows_read += len(new)
            for item, review in new:
                self._counted[review.id] = review.created_at
                self._newest = max(self._newest, review.created_at)
                hour = math.floor(review.created_at / BUCKET_S) * BUCKET_S
                for s in false_exclusion_stats([(item, review)]):
                    b = self._buckets[(hour, s.release)]
                    b[0] += s.eligible
                    b[1] += s.false_exclusions
                    b[2] += s.weighted_eligible
                    b[3] += s.weighted_false_exclusions
                    b[4] += s.weighted_eligible_squares
            keep_after = self._newest - OVERLAP_S
            self._counted = {i: t for i, t in self._counted.items() if t >= keep_after}
            for key in [k for k in self._buckets if k[0] + BUCKET_S <= horizon]:
                del self._buckets[key]
            self._fresh = True

    def stats(self) -> list[FalseExclusionStats]:
        """Per release label (folded), over the window (to the hour)."""
        if not self._fresh:
            self.refresh()
        totals: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
        with self._lock:
            for (_, release), b in self._buckets.items():
                label = self.release_label(release)
                totals[label] = [t + v for t, v in zip(totals[label], b)]
        return [FalseExclusionStats(r, int(c[0]), int(c[1]), c[2], c[3], c[4]) for r, c in sorted(totals.items())]

    def collect(self):
        ratio = GaugeMetricFamily("rag_filter_false_exclusion_ratio", "Weighted share of reviewed queries whose relevance filter removed every eligible relevant document.", labels=["release"])
        lower = GaugeMetricFamily("rag_filter_false_exclusion_ratio_lower", "Lower end of the 95% Wilson interval of rag_filter_false_exclusion_ratio (Kish effective sample size).", labels=["release"])
        upper = GaugeMetricFamily("rag_filter_false_exclusion_ratio_upper", "Upper end of the 95% Wilson interval of rag_filter_false_exclusion_ratio.", labels=["release"])
        eligible = GaugeMetricFamily("rag_filter_false_exclusion_eligible", "Reviewed queries with at least one entitlement-eligible relevant document (the denominator).", labels=["release"])
        excluded = GaugeMetricFamily("rag_filter_false_exclusions", "Reviewed queries whose relevance filter removed every eligible relevant document (the numerator).", labels=["release"])
        try:
            stats = self.stats()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape must still answer
            log.warning("could not compute review stats: %s", exc)
            stats = []
        for s in stats:
            eligible.add_metric([s.release], s.eligible)
            excluded.add_metric([s.release], s.false_exclusions)
            if s.ratio is not None:
                ratio.add_metric([s.release], s.ratio)
            if s.interval is not None:
                lower.add_metric([s.release], s.interval[0])
                upper.add_metric([s.release], s.interval[1])
        yield ratio
        yield lower
        yield upper
        yield eligible
        yield excluded


class StoreGauges:
    """Gauges read from the store at scrape time: small indexed reads (queue depth, latest drift runs)."""

    def __init__(self, store, profiles, drift_exporter, metrics):
        self.store = store
        self.profiles = profiles
        self.drift_exporter = drift_exporter
        self.metrics = metrics

    def refresh(self) -> None:
        try:
            for state, n in self.store.queue.depth().items():
                self.metrics.review_queue_depth.labels(state).set(n)
            for profile in self.profiles:
                self._export_drift(profile)
        except Exception as exc:  # noqa: BLE001 - a scrape must still answer when the store is down
            log.warning("could not read store gauges: %s", exc)

    def _export_drift(self, profile) -> None:
        """The latest completed run of a profile, whichever replica ran it."""
        run = latest_tested(self.store, profile)
        if run is not None:
            self.drift_exporter.export(profile, run)
