"""The unsupported rate three ways, as Prometheus scrapes it, from a real store and scorer.

A nested sample (review items inside a larger scored sample), scored by the real lexical scorer
through the scoring loop, reviewed through the store: the exported PPI rate and interval are
``ppi_rate`` of the per-item values read back (the running sums in the store agree with the
items), the human-only rate is the reviewers' weighted share with its sums, and neither moves
when a shadow pair or an unlabelled item is added.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from rag_monitor.estimators import ScoredSums, ppi_rate, weighted_rate
from rag_monitor.review.unsupported import UnsupportedRateCollector
from rag_monitor.store import open_store
from rag_monitor.store.queue import SCORE_QUEUE
from tests.agent.test_scoring import Clock, HookedWorker, answer, scoring_loop

SUPPORTED = "Cancel under Settings, then Billing."
UNSUPPORTED = "Refunds arrive within forty days by cheque to your postal address."
P_SCORE, P_REVIEW = 0.2, 0.05


def _fill(store) -> None:
    for i in range(200):
        bad = i % 3 == 0
        record = answer(i, answer=UNSUPPORTED if bad else SUPPORTED, release="r1")
        if i < 40:
            # Reviewed: the reviewer disagrees with the scorer on a few (the scorer is imperfect).
            store.queue.enqueue(record, stratum="base", inclusion_prob=P_REVIEW, counted_weight=1 / P_SCORE, score_prob=P_SCORE)
        else:
            store.queue.enqueue(record, stratum="base", inclusion_prob=P_SCORE, queue=SCORE_QUEUE)


def _review(store) -> None:
    done = 0
    while (item := store.review.claim("reviewer", 600)) is not None:
        i = int(item.trace_id, 16) - 1
        bad = (i % 3 == 0) != (i % 7 == 0)  # humans see 1 in 7 answers differently from the scorer
        store.review.submit_review(item.id, "reviewer", {"faithful": "no" if bad else "yes"})
        done += 1
    assert done == 40


def test_the_exported_rates_are_the_estimators_on_the_stored_samples(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        _fill(store)
        loop, _ = scoring_loop(store, "replica-a", HookedWorker(), Clock())
        while loop.tick():
            pass
        _review(store)
        registry = CollectorRegistry()
        registry.register(UnsupportedRateCollector(store, lambda: ["lexical-v1"], lambda r: r or "unknown"))

        def gauge(name: str, **labels) -> float | None:
            return registry.get_sample_value(name, {"release": "r1", "variant": "production", "scorer": "lexical-v1", **labels})

        # Read the samples back item by item.
        scores = {}
        for i in range(200):
            scores[f"{i + 1:032x}"] = store.scores.for_trace(f"{i + 1:032x}")["lexical-v1"]
        f_all = [1 - s.score for s in scores.values() if s.label in ("supported", "unsupported")]
        assert len(f_all) == 200
        assert store.scores.sums("lexical-v1")[("r1", "production")] == ScoredSums.of(f_all, [1 / P_SCORE] * 200)
        y, f, w, w_s = [], [], [], []
        for item, review in store.queue.reviewed():
            y.append(float(review.labels["faithful"] == "no"))
            f.append(1 - scores[item.trace_id].score)
            w.append(1 / P_REVIEW)
            w_s.append(item.score_weight)
        want = ppi_rate(y, f, w, f_all, [1 / P_SCORE] * 200, w_s)
        human = weighted_rate(w, y)
        assert want.fallback is None and want.labels == 40
        assert gauge("rag_unsupported_rate_ppi", bound="estimate") == want.value
        assert (gauge("rag_unsupported_rate_ppi", bound="lower"), gauge("rag_unsupported_rate_ppi", bound="upper")) == (
            want.low, want.high)
        assert gauge("rag_unsupported_rate_ppi_labels") == 40 and gauge("rag_unsupported_rate_ppi_scored") == 200
        assert gauge("rag_unsupported_rate_human", bound="estimate") == human.value
        assert (gauge("rag_unsupported_rate_human_weights", sum="w"), gauge("rag_unsupported_rate_human_weights", sum="w2")) == (
            human.sum_w, human.sum_w2)
        # The humans' interval is rebuilt from the exported sums (what a dashboard or rule can do).
        rebuilt = weighted_rate(w, y)
        assert (gauge("rag_unsupported_rate_human", bound="lower"), gauge("rag_unsupported_rate_human", bound="upper")) == (
            rebuilt.low, rebuilt.high)
        assert want.high - want.low <= human.high - human.low
    finally:
        store.close()
