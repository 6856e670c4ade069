"""Metrics computed from the shared store when Prometheus scrapes.

Every replica reads the same store, so these gauges agree across replicas (alert rules take
``max``). The false-exclusion series are absent, not 0, when no reviewed query qualifies.

The false-exclusion rate covers 30 days of reviews, counted to the hour (an hour falls off
whole). ``ReviewStatsCollector`` reads them from the agent's ``ReviewedCache``, shared with the
other review collectors, which reads only what changed since its last refresh (the
``scrape_cache`` job, a scrape after ``min_interval_s``, and one after this replica stored a
review); the rates are recomputed only when the reviewed items or the window's first hour
change. The release fold (``ReleaseLabels.label``, as in every family) applies when read, so a
release that leaves the labelled set moves into ``other`` here as in the query metrics.
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
from rag_monitor.review.reviewed_cache import ReviewedCache
from rag_monitor.review.stats import FalseExclusionStats, false_exclusion_stats

log = logging.getLogger(__name__)

BUCKET_S = 3600.0
"""The window's granularity: it starts on the hour of ``now - window_s``."""


class ReviewStatsCollector(Collector):
    def __init__(self, store, window_s: float = 30 * 86400, clock=time.time,
                 release_label: Callable[[str | None], str] = lambda r: r or "unknown",
                 reviewed: ReviewedCache | None = None):
        self.reviewed = reviewed if reviewed is not None else ReviewedCache(store.queue, window_s=window_s, clock=clock)
        """The agent's one cache of reviewed items (a private one when none is given)."""
        self.release_label = release_label
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._computed: tuple[tuple[int, float] | None, list[FalseExclusionStats]] = (None, [])
        """((cache version, window start), per raw release): recomputed when either changes."""

    @property
    def rows_read(self) -> int:
        """Reviews read from the store so far (tests check that a refresh reads only new ones)."""
        return self.reviewed.rows_read

    def invalidate(self) -> None:
        """Refresh on the next scrape (this replica just stored a review)."""
        self.reviewed.invalidate()

    def refresh(self) -> None:
        """Take in the reviews stored since the last refresh (the ``scrape_cache`` job)."""
        self.reviewed.refresh()

    def stats(self) -> list[FalseExclusionStats]:
        """Per release label (folded), over the window (to the hour)."""
        start = math.floor((self.clock() - self.window_s) / BUCKET_S) * BUCKET_S
        version, pairs = self.reviewed.read(since=start)
        with self._lock:
            key = (version, start)
            if self._computed[0] != key:
                self._computed = (key, false_exclusion_stats(pairs))
            per_release = self._computed[1]
        totals: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
        for s in per_release:
            label = self.release_label(s.release)
            values = (s.eligible, s.false_exclusions, s.weighted_eligible, s.weighted_false_exclusions,
                      s.weighted_eligible_squares)
            totals[label] = [t + v for t, v in zip(totals[label], values)]
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
