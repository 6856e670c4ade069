"""The unsupported-answer rate three ways, per release, variant and scorer, never mixed.

- ``rag_unsupported_rate_ppi{bound}``: prediction-powered (PPI++, ``estimators.ppi_rate``): the
  scorer's probability of an unsupported answer averaged over the scored sample (the store's
  running sums, ``agent/scoring.py``), corrected by the reviewers' labels minus ``lam`` times that
  probability on the reviewed subsample. Valid whatever the scorer's calibration or threshold;
  its interval is never wider than the humans' alone. What ``RagFaithfulnessLow`` pages on.
- ``rag_unsupported_rate_human{bound}``: the reviewers' labels alone (weighted share, Wilson at the
  Kish size), with the sums its interval needs (``rag_unsupported_rate_human_weights{sum}``).
- the scorer's own flag rate is the recording rule ``rag:unsupported_rate_scorer`` from the
  counters: biased by the scorer's errors, a fast release-against-release signal, not a level.

The reviewed items counted are those the scorer scored (supported or unsupported: a refusal, a
hidden or context-less answer is out of all three) with a ``faithful`` yes/no label, over the
reviews of the last ``window_s``; ``y`` = 1 for ``faithful: no``. Shadow pairs are left out.
Every replica reads the same store, so replicas agree (rules take ``max``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from rag_monitor.estimators import PPIRate, ScoredSums, WeightedRate, ppi_rate, weighted_rate
from rag_monitor.review.reviewed_cache import ReviewedCache

log = logging.getLogger(__name__)

SCORED_VERDICTS = ("supported", "unsupported")


@dataclass(frozen=True)
class UnsupportedRate:
    release: str
    variant: str
    scorer: str
    ppi: PPIRate | None
    human: WeightedRate | None
    scored: ScoredSums


def unsupported_rates(reviewed: Iterable[tuple], scores: dict[str, dict], sums: dict[tuple[str, str], ScoredSums],
                      scorer: str, release_label: Callable[[str | None], str] = lambda r: r or "unknown") -> list[UnsupportedRate]:
    """From ``(ReviewItem, Review)`` pairs, their scores (trace -> scorer -> Score) and the scored
    sample's sums per (release, variant) as stored; releases folded by ``release_label``."""
    folded: dict[tuple[str, str], ScoredSums] = defaultdict(ScoredSums)
    for (release, variant), s in sums.items():
        folded[(release_label(release), variant)] += s
    labeled: dict[tuple[str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
    for item, review in reviewed:
        if item.pair_trace_id:
            continue
        label = review.labels.get("faithful")
        score = scores.get(item.trace_id, {}).get(scorer)
        if label not in ("yes", "no") or score is None or score.score is None or score.label not in SCORED_VERDICTS:
            continue
        record = item.query_record
        key = (release_label(record.release), record.variant or "production")
        labeled[key].append((float(label == "no"), 1.0 - score.score, item.weight, item.score_weight))
    out = []
    for key in sorted(set(folded) | set(labeled)):
        rows = labeled.get(key, [])
        y, f, w, w_s = ([r[i] for r in rows] for i in range(4))
        scored = folded.get(key, ScoredSums())
        out.append(UnsupportedRate(*key, scorer, ppi_rate(y, f, w, scored, None, w_s) if rows else None,
                                   weighted_rate(w, y), scored))
    return out


class UnsupportedRateCollector(Collector):
    """Scrape-time gauges of ``unsupported_rates`` for each scorer, cached ``cache_s``; the reviewed
    items from the agent's ``ReviewedCache`` (shared with the other review collectors)."""

    def __init__(self, store, scorers: Callable[[], list[str]], release_label: Callable[[str | None], str],
                 window_s: float = 30 * 86400, cache_s: float = 10.0, clock=time.time,
                 reviewed: ReviewedCache | None = None):
        self.store = store
        self.reviewed = reviewed if reviewed is not None else ReviewedCache(
            store.queue, window_s=window_s, min_interval_s=cache_s, clock=clock)
        self.scorers = scorers
        self.release_label = release_label
        self.window_s = window_s
        self.cache_s = cache_s
        self.clock = clock
        self._cached: tuple[float, list[UnsupportedRate]] = (-float("inf"), [])
        self._lock = threading.Lock()

    def invalidate(self) -> None:
        self._cached = (-float("inf"), [])
        self.reviewed.invalidate()

    def rates(self) -> list[UnsupportedRate]:
        with self._lock:
            at, cached = self._cached
            now = self.clock()
            if now - at < self.cache_s:
                return cached
            reviewed = self.reviewed.pairs(since=now - self.window_s)
            scores = self.store.scores.for_traces(item.trace_id for item, _ in reviewed)
            label = self.release_label
            rates = [r for scorer in self.scorers()
                     for r in unsupported_rates(reviewed, scores, self.store.scores.sums(scorer), scorer, label)]
            self._cached = (now, rates)
            return rates

    @staticmethod
    def families() -> dict[str, GaugeMetricFamily]:
        k = ["release", "variant", "scorer"]
        return {
            "ppi": GaugeMetricFamily("rag_unsupported_rate_ppi", "Prediction-powered unsupported-answer rate (PPI++: the scorer's probabilities on the scored sample corrected by human labels) with its 95% interval (bound: estimate, lower, upper), per release over its reviews. What RagFaithfulnessLow pages on.", labels=[*k, "bound"]),
            "lambda": GaugeMetricFamily("rag_unsupported_rate_ppi_lambda", "PPI++ power-tuning weight of the scorer in rag_unsupported_rate_ppi (0: the human-only interval stands: too few labels of a class, or it is narrower).", labels=k),
            "labels": GaugeMetricFamily("rag_unsupported_rate_ppi_labels", "Human labels rag_unsupported_rate_ppi rests on.", labels=k),
            "scored": GaugeMetricFamily("rag_unsupported_rate_ppi_scored", "Scored answers (supported or unsupported) in the scored sample behind rag_unsupported_rate_ppi.", labels=k),
            "human": GaugeMetricFamily("rag_unsupported_rate_human", "Unsupported-answer rate from human labels alone (weighted share) with its 95% Wilson interval at the Kish effective size (bound: estimate, lower, upper).", labels=[*k, "bound"]),
            "sums": GaugeMetricFamily("rag_unsupported_rate_human_weights", "Sums behind rag_unsupported_rate_human (sum: w weights, wy weights of unsupported answers, w2 squared weights; Kish size (sum w)^2 / sum w^2).", labels=[*k, "sum"]),
        }

    def collect(self):
        fam = self.families()
        try:
            rates = self.rates()
        except Exception:  # noqa: BLE001 - a store outage must not break the scrape
            log.warning("could not compute the unsupported-answer rates", exc_info=True)
            rates = []
        for r in rates:
            key = [r.release, r.variant, r.scorer]
            fam["scored"].add_metric(key, r.scored.items)
            if r.ppi is not None:
                for bound, v in (("estimate", r.ppi.value), ("lower", r.ppi.low), ("upper", r.ppi.high)):
                    fam["ppi"].add_metric([*key, bound], v)
                fam["lambda"].add_metric(key, r.ppi.lam)
                fam["labels"].add_metric(key, r.ppi.labels)
            if r.human is not None:
                for bound, v in (("estimate", r.human.value), ("lower", r.human.low), ("upper", r.human.high)):
                    fam["human"].add_metric([*key, bound], v)
                for name, v in (("w", r.human.sum_w), ("wy", r.human.value * r.human.sum_w), ("w2", r.human.sum_w2)):
                    fam["sums"].add_metric([*key, name], v)
        yield from fam.values()
