"""One log line per minute at most about data the agent dropped, read from its own counters.

The hot path only bumps counters; this job compares them with the last look and logs what grew,
by metric and reason, so an operator reading the log sees drops without a line per span::

    dropped since the last report (60 s): rag_agent_spans_dropped_total{reason="queue_full"} +120, ...
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import Counter

log = logging.getLogger("rag_monitor.agent")

REPORT_INTERVAL_S = 60.0


class DropLog:
    def __init__(self, counters: Iterable[Counter], keep: Callable[[dict], bool] = lambda labels: True,
                 clock: Callable[[], float] = time.monotonic):
        self.counters = list(counters)
        self.keep = keep
        """Which labelled series count as drops (a counter of outcomes also counts what was sent)."""
        self.clock = clock
        self._seen = self._totals()
        self._since = clock()

    def _totals(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for counter in self.counters:
            for metric in counter.collect():
                for sample in metric.samples:
                    if sample.name.endswith("_total") and self.keep(sample.labels):
                        labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                        totals[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return totals

    def tick(self) -> str | None:
        """Log (WARNING) and return the line when anything was dropped since the last tick."""
        now, totals = self.clock(), self._totals()
        grown = {name: value - self._seen.get(name, 0.0) for name, value in totals.items() if value > self._seen.get(name, 0.0)}
        elapsed, self._seen, self._since = now - self._since, totals, now
        if not grown:
            return None
        line = (f"dropped since the last report ({elapsed:.0f} s): "
                + ", ".join(f"{name} +{delta:g}" for name, delta in sorted(grown.items())))
        log.warning("%s", line)
        return line
