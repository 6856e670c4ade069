"""Counter and histogram families for the per-query path: what a record costs to count.

prometheus_client's ``Histogram.observe`` checks the child, takes two locks and scans the
buckets in a Python loop (41 latency buckets: about 3 us an observation, and a query makes nine);
``Counter.inc`` checks and locks too. These families keep each series as plain numbers under
one lock, find the bucket by bisection and build the exposition at scrape time. They are
used only for the families ``QueryObserver`` updates per query (``alerts/metrics.py``); the
exposition is prometheus_client's (the same samples, but no ``_created``: nothing reads it).

    queries = LeanCounter("rag_queries_total", "Queries answered.", ["release"], registry=registry)
    queries.labels("r1").inc()
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class _Family:
    """Label handling and registration shared by both kinds: ``labels`` returns the series
    (created at 0 on first use, as prometheus_client does), ``collect`` the exposition."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry):
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._series: dict[tuple[str, ...], object] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str, **named: str):
        if named:
            if values:
                raise ValueError("labels: pass label values by position or by name, not both")
            values = tuple(named[n] for n in self._labelnames)
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name}: {len(self._labelnames)} label values expected, got {len(values)}")
        values = tuple(str(v) for v in values)
        series = self._series.get(values)
        if series is None:
            with self._lock:
                series = self._series.setdefault(values, self._new_series())
        return series

    def _new_series(self):
        raise NotImplementedError

    def _snapshot(self) -> list[tuple[tuple[str, ...], object]]:
        with self._lock:
            return list(self._series.items())

    def describe(self) -> list[Metric]:
        return [self._empty()]

    def _empty(self) -> Metric:
        raise NotImplementedError


class _CounterSeries:
    __slots__ = ("_value", "_lock")

    def __init__(self):
        self._value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        with self._lock:
            self._value += amount

    def get(self) -> float:
        return self._value


class LeanCounter(_Family):
    def _new_series(self) -> _CounterSeries:
        return _CounterSeries()

    def _empty(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._empty()
        for values, series in self._snapshot():
            family.add_metric(values, series.get())
        yield family


class _HistogramSeries:
    __slots__ = ("_bounds", "_counts", "_sum", "_lock")

    def __init__(self, bounds: tuple[float, ...]):
        self._bounds = bounds
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, amount: float) -> None:
        at = bisect.bisect_left(self._bounds, amount)  # the first bucket whose bound is >= amount ("le")
        with self._lock:
            if at < len(self._counts):  # NaN: counted in the sum only, as prometheus_client does
                self._counts[at] += 1
            self._sum += amount

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self._counts), self._sum


class LeanHistogram(_Family):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], *, buckets: Sequence[float],
                 registry: CollectorRegistry):
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._bound_labels = [floatToGoString(b) for b in bounds]
        super().__init__(name, documentation, labelnames, registry)

    def _new_series(self) -> _HistogramSeries:
        return _HistogramSeries(self._bounds)

    def _empty(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> Iterable[Metric]:
        family = self._empty()
        for values, series in self._snapshot():
            counts, total = series.snapshot()
            cumulative, buckets = 0, []
            for bound, n in zip(self._bound_labels, counts):
                cumulative += n
                buckets.append((bound, cumulative))
            family.add_metric(values, buckets, total)
        yield family
