"""Implicit signals against blind review, over seeds: the exported metrics recover the signals the
simulator relates to the verdicts and leave the others "direction not established".

``rag_monitor/simulate/signals.py`` draws each signal from a query's hidden state with known
probabilities, so the difference in verdict rates (or dwell AUC) it targets is exact. Each seed is
one population and its review sample (base, thumbs-down and refusal strata at unequal rates); the
numbers are read from what ``ReviewMetricsCollector`` exports (``rag_signal_association``,
``rag_signal_direction``), the scrape an operator's dashboard reads. Fixed seeds: deterministic.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rag_monitor.review.collector import ReviewMetricsCollector
from rag_monitor.simulate.signals import World, reviewed_sample, truth

SEEDS = range(20)
QUERIES = 10_000
WORLD = World({"r1": 0.2, "r2": 0.3}, rates=(0.2, 0.6, 0.6))


class SampleStore:
    """What the collector reads of a store, over one simulated review sample."""

    def __init__(self, reviewed, feedback):
        self._reviewed, self._feedback = reviewed, feedback
        self.queue = self.review = self.feedback = self  # each repository the collector reads

    def reviewed(self, since=None):
        return self._reviewed

    def all_reviews(self, item_ids=None):
        return {}

    def reviewer_progress(self):
        return {}

    def for_traces(self, trace_ids):
        return {t: self._feedback[t] for t in trace_ids if t in self._feedback}


def scrape(seed: int) -> tuple[dict, dict]:
    """(signal, verdict, release) -> (estimate, lower, upper); (signal, verdict) -> direction."""
    registry = CollectorRegistry()
    registry.register(ReviewMetricsCollector(SampleStore(*reviewed_sample(WORLD, seed, QUERIES))))
    bounds: dict = defaultdict(dict)
    directions = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == "rag_signal_association":
                bounds[(s.labels["signal"], s.labels["verdict"], s.labels["release"])][s.labels["bound"]] = s.value
            elif s.name == "rag_signal_direction":
                directions[(s.labels["signal"], s.labels["verdict"])] = int(s.value)
    return dict(bounds), directions


@pytest.fixture(scope="module")
def scrapes() -> list[tuple[dict, dict]]:
    return [scrape(seed) for seed in SEEDS]


def _null(signal: str) -> float:
    return 0.5 if signal == "dwell" else 0.0


def test_the_intervals_cover_the_true_association_per_release_and_overall(scrapes):
    covered = defaultdict(list)
    for bounds, _ in scrapes:
        for (signal, verdict, release), b in bounds.items():
            covered[release].append(b["lower"] <= truth(WORLD, signal, verdict, release) <= b["upper"])
    assert set(covered) == {"r1", "r2", "all"}
    for release, hits in covered.items():
        assert len(hits) >= 20 * 30, release  # every signal of the model, each verdict, every seed
        assert sum(hits) / len(hits) >= 0.9, (release, sum(hits) / len(hits))


def test_related_signals_earn_their_direction_and_unrelated_ones_do_not(scrapes):
    established = defaultdict(list)
    for _, directions in scrapes:
        for (signal, verdict), d in directions.items():
            established[(signal, verdict)].append(d)
    # The three SDK kinds and thumbs_down:other are listed too (the simulator sends no "other" reason).
    assert {"citation_click", "share", "edit", "thumbs_down:wrong", "thumbs_down:too long", "dwell"} <= {s for s, _ in established}
    related, unrelated = 0, []
    for (signal, verdict), ds in established.items():
        if signal == "thumbs_down:other":
            continue
        effect = truth(WORLD, signal, verdict) - _null(signal)
        sign = 1 if effect > 0 else -1
        if abs(effect) < 1e-12:  # independent of the state by construction
            unrelated += ds
        elif abs(effect) >= (0.07 if signal == "dwell" else 0.15):
            related += 1
            assert -sign not in ds, (signal, verdict, effect, ds)  # never the wrong way round
            assert ds.count(sign) >= 0.85 * len(ds), (signal, verdict, effect, ds)
    assert related >= 12
    # Copy, citation click, a "too long" thumbs-down, ...: not established in at least 90% of seeds.
    assert len(unrelated) >= 20 * 12
    assert unrelated.count(0) >= 0.9 * len(unrelated), unrelated.count(0) / len(unrelated)
