"""The shadow report's numbers as Prometheus metrics, computed from the store at scrape time.

Per candidate pipeline (label ``variant``: the candidate's name), the win rate against
production with its 95% interval, the reviewed pairs by verdict, the win rate by the side the
candidate was shown on and the swap agreement; per candidate and ``side`` (``candidate`` or
``production``, on the same sampled queries), latency p50/p95, cost per query, refusal rate,
the scorer's unsupported rate, and the reviewers' unsupported and incorrect rates (each side
judged against its own contexts) with their intervals. Over the pairs sampled in the last ``window_s`` (30 days: the scrape reads
a bounded history, and a candidate's numbers follow its latest version). A value with nothing to
estimate it from is absent, never 0. Only the ``top_candidates`` candidates with the most
sampled pairs get series (the report lists all).

    registry.register(ShadowMetricsCollector(store, call_cost=prices.call_cost))
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rag_monitor.review.shadow import SIDES, ShadowReport, shadow_report

log = logging.getLogger(__name__)

_SIDE_GAUGES = (
    ("latency_p50", "latency_p50_s", "rag_shadow_latency_p50_seconds", "Median query latency over the sampled shadow pairs, per candidate and side (candidate or production, same queries)."),
    ("latency_p95", "latency_p95_s", "rag_shadow_latency_p95_seconds", "95th percentile query latency over the sampled shadow pairs, per candidate and side."),
    ("cost", "cost_per_query_usd", "rag_shadow_cost_per_query_usd", "Mean cost per priced query over the sampled shadow pairs, per candidate and side."),
    ("refusal", "refusal_rate", "rag_shadow_refusal_ratio", "Share of refused answers over the sampled shadow pairs, per candidate and side."),
    ("unsupported", "unsupported_rate", "rag_shadow_unsupported_ratio", "Faithfulness unsupported rate (unsupported over supported + unsupported, one scorer) over the scored halves of the sampled shadow pairs."),
)

_REVIEWED_GAUGES = (
    ("reviewed_unsupported", "rag_shadow_reviewed_unsupported_ratio", "Share of reviewed shadow-pair answers the reviewers judged not faithful to the contexts that side was given (no over yes + no; first review per pair, weighted by inverse inclusion probability), per candidate and side."),
    ("reviewed_incorrect", "rag_shadow_reviewed_incorrect_ratio", "Share of reviewed shadow-pair answers the reviewers judged incorrect (no over yes + no; first review per pair, weighted), per candidate and side."),
)


class ShadowMetricsCollector(Collector):
    def __init__(self, store, *, call_cost: Callable | None = None, top_candidates: int = 10,
                 window_s: float = 30 * 86400, cache_s: float = 10.0, storage_usd_per_query: float = 0.0):
        self.store = store
        self.storage_usd_per_query = storage_usd_per_query
        self.window_s = window_s
        self.call_cost = call_cost
        self.top_candidates = top_candidates
        self.cache_s = cache_s
        self._cached: tuple[float, ShadowReport | None] = (0.0, None)
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        """Recompute on the next scrape (after a review was stored)."""
        self._cached = (0.0, None)

    def report(self) -> ShadowReport:
        with self._lock:
            at, report = self._cached
            if report is not None and time.monotonic() - at <= self.cache_s:
                return report
            report = shadow_report(self.store, since=time.time() - self.window_s, call_cost=self.call_cost,
                                   storage_usd_per_query=self.storage_usd_per_query)
            self._cached = (time.monotonic(), report)
            return report

    @staticmethod
    def families() -> dict[str, GaugeMetricFamily]:
        v, vs, vp = ["variant"], ["variant", "side"], ["variant", "position"]
        out: dict[str, GaugeMetricFamily] = {
            "win": GaugeMetricFamily("rag_shadow_win_rate", "Share of reviewed shadow pairs whose candidate answer the reviewer preferred over production's (a tie counts 1/2), weighted by inverse inclusion probability.", labels=v),
            "win_lower": GaugeMetricFamily("rag_shadow_win_rate_lower", "Lower end of the 95% Wilson interval of rag_shadow_win_rate (Kish effective sample size).", labels=v),
            "win_upper": GaugeMetricFamily("rag_shadow_win_rate_upper", "Upper end of the 95% Wilson interval of rag_shadow_win_rate.", labels=v),
            "reviewed": GaugeMetricFamily("rag_shadow_pairs_reviewed", "Reviewed shadow pairs by verdict for the candidate (win, loss, tie; first review of each pair), over the window.", labels=["variant", "verdict"]),
            "sampled": GaugeMetricFamily("rag_shadow_pairs_sampled", "Shadow pairs sampled and stored whole (both answers), reviewed or not, over the window (30 days).", labels=v),
            "position": GaugeMetricFamily("rag_shadow_position_win_rate", "rag_shadow_win_rate over the pairs where the candidate was shown first or second (position: first, second); a gap means the verdict follows the side.", labels=vp),
            "swapped": GaugeMetricFamily("rag_shadow_swapped_pairs", "Shadow pairs reviewed twice, once in each order.", labels=v),
            "swap_agreement": GaugeMetricFamily("rag_shadow_swap_agreement_ratio", "Of the pairs reviewed in both orders, the share whose two verdicts agree.", labels=v),
        }
        for key, _, name, doc in _SIDE_GAUGES:
            out[key] = GaugeMetricFamily(name, doc, labels=vs)
        for key, name, doc in _REVIEWED_GAUGES:
            out[key] = GaugeMetricFamily(name, doc, labels=vs)
            out[key + "_lower"] = GaugeMetricFamily(name + "_lower", f"Lower end of the 95% Wilson interval of {name} (Kish effective sample size).", labels=vs)
            out[key + "_upper"] = GaugeMetricFamily(name + "_upper", f"Upper end of the 95% Wilson interval of {name}.", labels=vs)
        return out

    def describe(self):
        return list(self.families().values())

    def collect(self):
        f = self.families()
        try:
            report = self.report()
        except Exception as exc:  # noqa: BLE001 - the rest of the scrape must still answer
            log.warning("could not compute shadow metrics: %s", exc)
            report = ShadowReport([], None)
        kept = sorted(report.candidates, key=lambda c: (-c.pairs, c.candidate))[: self.top_candidates]
        for c in kept:
            name, w, p = [c.candidate], c.win, c.position
            f["sampled"].add_metric(name, c.pairs)
            for verdict, n in (("win", w.wins), ("loss", w.losses), ("tie", w.ties)):
                f["reviewed"].add_metric([c.candidate, verdict], n)
            if w.value is not None:
                f["win"].add_metric(name, w.value)
                f["win_lower"].add_metric(name, w.low)
                f["win_upper"].add_metric(name, w.high)
            for position, rate in (("first", p.shown_first), ("second", p.shown_second)):
                if rate.value is not None:
                    f["position"].add_metric([c.candidate, position], rate.value)
            f["swapped"].add_metric(name, p.swapped_pairs)
            if p.swap_agreement is not None:
                f["swap_agreement"].add_metric(name, p.swap_agreement)
            for side in SIDES:
                stats = c.sides[side]
                for key, attr, _, _ in _SIDE_GAUGES:
                    value = getattr(stats, attr)
                    if value is not None:
                        f[key].add_metric([c.candidate, side], value)
                for key, _, _ in _REVIEWED_GAUGES:
                    rate = getattr(stats, key)
                    if rate is not None:
                        f[key].add_metric([c.candidate, side], rate.value)
                        f[key + "_lower"].add_metric([c.candidate, side], rate.low)
                        f[key + "_upper"].add_metric([c.candidate, side], rate.high)
        yield from f.values()
