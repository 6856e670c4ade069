"""Metrics computed from the shared store when Prometheus scrapes.

Every replica reads the same store, so these gauges agree across replicas (alert rules take
``max``). The false-exclusion series are absent, not 0, when no reviewed query qualifies.
"""

from __future__ import annotations

import logging
import time

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rag_monitor.review.stats import false_exclusion_stats

log = logging.getLogger(__name__)


class ReviewStatsCollector(Collector):
    def __init__(self, store, window_s: float = 30 * 86400, cache_s: float = 10.0):
        self.store = store
        self.window_s = window_s
        self.cache_s = cache_s
        self._cached: tuple[float, list] = (0.0, [])

    def invalidate(self) -> None:
        """Recompute on the next scrape (after a review was stored)."""
        self._cached = (0.0, [])

    def _stats(self) -> list:
        at, stats = self._cached
        if not at or time.monotonic() - at > self.cache_s:
            stats = false_exclusion_stats(self.store.reviewed(since=time.time() - self.window_s))
            self._cached = (time.monotonic(), stats)
        return stats

    def collect(self):
        ratio = GaugeMetricFamily("rag_filter_false_exclusion_ratio", "Weighted share of reviewed queries whose relevance filter removed every eligible relevant document.", labels=["release"])
        eligible = GaugeMetricFamily("rag_filter_false_exclusion_eligible", "Reviewed queries with at least one entitlement-eligible relevant document (the denominator).", labels=["release"])
        excluded = GaugeMetricFamily("rag_filter_false_exclusions", "Reviewed queries whose relevance filter removed every eligible relevant document (the numerator).", labels=["release"])
        try:
            stats = self._stats()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape must still answer
            log.warning("could not compute review stats: %s", exc)
            stats = []
        for s in stats:
            eligible.add_metric([s.release], s.eligible)
            excluded.add_metric([s.release], s.false_exclusions)
            if s.ratio is not None:
                ratio.add_metric([s.release], s.ratio)
        yield ratio
        yield eligible
        yield excluded
