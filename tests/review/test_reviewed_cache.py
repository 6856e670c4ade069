"""The review collectors share one ``ReviewedCache``: the store is read once per refresh interval
however many scrapes arrive, a refresh reads only what changed, and what the scrape exports after
incremental refreshes (new reviews, a second review, a late complaint that raises a reviewed
item's probability) is what a cold read of the same store exports."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rag_monitor.agent.scrape import ReviewStatsCollector
from rag_monitor.record import Document, FilterApplied, QueryRecord
from rag_monitor.review.collector import ReviewMetricsCollector
from rag_monitor.estimators import ScoredSums
from rag_monitor.review.reviewed_cache import OVERLAP_S, ReviewedCache
from rag_monitor.review.unsupported import UnsupportedRateCollector
from rag_monitor.store import open_store
from rag_monitor.store.ingest import IngestBatch, QueueWrite
from rag_monitor.store.models import FeedbackEvent, Score

SCORER = "lexical-v1"
INTERVAL_S = 10.0


class CountingQueue:
    """The real store's review queue, counting the reads of reviewed items."""

    def __init__(self, queue):
        self._queue = queue
        self.calls: list[tuple[str, object]] = []

    def reviewed(self, since=None, **kw):
        self.calls.append(("reviewed", since))
        return self._queue.reviewed(since, **kw)

    def reviewed_changed(self, feedback_id):
        self.calls.append(("reviewed_changed", feedback_id))
        return self._queue.reviewed_changed(feedback_id)

    def __getattr__(self, name):
        return getattr(self._queue, name)


def record(i: int, release: str, *, excluded: bool = False) -> QueryRecord:
    return QueryRecord(trace_id=f"{i + 1:032x}", root_span_id=f"{i + 1:016x}", start_ns=0, end_ns=1, release=release,
                       answer=f"answer {i}", delivered=[Document(f"d{i}", "text")],
                       filters=[FilterApplied("relevance", excluded_ids=[f"g{i}"] if excluded else [])])


def review(store, i: int, release: str, at: float, *, prob: float = 0.25, reviewers=("alice",), needed: int = 1) -> None:
    """Queue, score and review query ``i`` by each of ``reviewers`` (``needed``: 2 for a double review)."""
    store.queue.enqueue(record(i, release, excluded=i % 3 == 0), stratum="base", inclusion_prob=prob, score_prob=prob,
                  counted_weight=1 / prob, now=at)
    score = 0.2 if i % 4 == 0 else 0.9
    store.scores.upsert([Score(f"{i + 1:032x}", SCORER, score, "1", "unsupported" if score < 0.5 else "supported")],
                        now=at, sums=(SCORER, {(release, "production"): ScoredSums.of([1 - score], [1 / prob])}))
    for n, reviewer in enumerate(reviewers):
        second_review(store, reviewer, i, at + n, needed)


def second_review(store, reviewer: str, i: int, at: float, needed: int = 2) -> None:
    item = store.review.claim(reviewer, 60, now=at)
    assert item.trace_id == f"{i + 1:032x}"
    store.review.submit_review(item.id, reviewer, {
        "faithful": "no" if i % 5 == 0 else "yes", "correct": "yes" if i % 2 else "no",
        "relevant_documents": [f"g{i}"] if i % 2 else [f"g{i}", f"d{i}"], "gold_documents": [f"d{i}"] if i % 2 else [f"g{i}"],
    }, reviews_needed=needed, now=at)


def collectors(store, clock, cache: ReviewedCache) -> CollectorRegistry:
    """The agent's three review collectors on one cache, as ``service._build_review`` wires them."""
    registry = CollectorRegistry()
    label = lambda r: r or "unknown"  # noqa: E731
    registry.register(ReviewStatsCollector(store, clock=clock, release_label=label, reviewed=cache))
    registry.register(ReviewMetricsCollector(store, release_label=label, clock=clock, cache_s=INTERVAL_S, reviewed=cache))
    registry.register(UnsupportedRateCollector(store, lambda: [SCORER], label, clock=clock, cache_s=INTERVAL_S,
                                               reviewed=cache))
    return registry


def scrape(registry) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples
            if not s.name.startswith("rag_review_reviewer")}  # per-reviewer progress: read apart, not from the cache


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield s
    s.close()


def test_the_collectors_read_the_store_once_per_interval_however_many_scrapes(store):
    start = time.time()
    now = [start]
    for i in range(12):
        review(store, i, "r1" if i % 2 else "r2", start - 600 + i)
    counting = CountingQueue(store.queue)
    cache = ReviewedCache(counting, min_interval_s=INTERVAL_S, clock=lambda: now[0])
    registry = collectors(store, lambda: now[0], cache)
    first = scrape(registry)
    assert first[("rag_review_judged_items", (("measure", "correct"), ("release", "r1"), ("variant", "production")))] == 6
    # One cold read for three collectors: where the feedback stands, then the window's reviews.
    assert [c for c, _ in counting.calls] == ["reviewed_changed", "reviewed"]
    for _ in range(20):  # scrapes within the interval: no store read at all
        now[0] += INTERVAL_S / 25
        assert scrape(registry) == first
    assert len(counting.calls) == 2
    counting.calls.clear()
    now[0] += INTERVAL_S
    for _ in range(20):
        scrape(registry)
    # The next interval: one incremental refresh (the items of feedback above the mark, the
    # reviews since the newest one less the overlap), not a read of the window per collector.
    assert counting.calls == [("reviewed_changed", 0), ("reviewed", start - 600 + 11 - OVERLAP_S)]
    assert cache.store_reads == 2 and cache.rows_read == 12


def test_incremental_refreshes_export_what_a_cold_read_exports(store):
    now = [time.time()]
    for i in range(30):
        review(store, i, ("r1", "r2", "")[i % 3], now[0] - 3600 + 60 * i, reviewers=("alice", "bob") if i % 4 == 1 else ("alice",),
               needed=2 if i % 4 == 1 else 1)
    review(store, 30, "r2", now[0] - 10, needed=2)  # a double review still waiting for its second reviewer
    warm_cache = ReviewedCache(store.queue, min_interval_s=INTERVAL_S, resync_s=float("inf"), clock=lambda: now[0])
    warm = collectors(store, lambda: now[0], warm_cache)
    before = scrape(warm)

    def cold() -> dict:
        return scrape(collectors(store, lambda: now[0], ReviewedCache(store.queue, min_interval_s=INTERVAL_S, clock=lambda: now[0])))

    assert before == cold()
    # The second review of item 30 (its first one still counts), then new reviews.
    second_review(store, "bob", 30, now[0])
    for i in range(31, 37):
        review(store, i, ("r1", "r2")[i % 2], now[0] + i - 30)
    now[0] += INTERVAL_S + 7
    after_new = scrape(warm)
    assert after_new != before and after_new == cold()
    # A late thumbs-down raises a reviewed item's probability (the ingest transaction that stores
    # the feedback upgrades the item): its weight, and every weighted rate over it, change.
    upgraded = record(3, "r1", excluded=True)
    assert store.queue.item_for_trace(upgraded.trace_id).weight == 4.0
    store.ingest.persist(IngestBatch(
        feedback=[FeedbackEvent(upgraded.trace_id, "thumbs_down", now[0], "wrong", None, "late-1")],
        items=[QueueWrite(upgraded, "thumbs_down", 0.8, counted_weight=0.0, score_prob=0.8)]), now=now[0])
    assert store.queue.item_for_trace(upgraded.trace_id).weight == 1.25
    now[0] += INTERVAL_S
    after_upgrade = scrape(warm)
    assert after_upgrade != after_new and after_upgrade == cold()
    # Incremental all along: one cold read, the rest read only what changed.
    assert warm_cache.store_reads == 3 and warm_cache.rows_read == 37
    # The window moves on: reviews older than it leave the rates as they leave a cold read's.
    now[0] += 30 * 86400 + 30 * 60
    assert scrape(warm) == cold()
    assert warm_cache.store_reads == 4 and len(warm_cache.pairs()) < 37
