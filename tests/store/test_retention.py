"""History retention: the pruning job deletes past-retention rows in bounded batches, keeps
reviewed items (the golden set) unless told otherwise, and the queue depth follows."""

from __future__ import annotations

from rag_monitor.store import FeedbackEvent, Score, open_store
from rag_monitor.store.retention import DAY_S
from tests.store.conftest import make_record

NOW = 200 * DAY_S


def test_history_past_retention_goes_in_batches_and_reviews_stay(store_url):
    store = open_store(store_url, prune_batch_rows=2)  # 90 days of history, reviews forever
    try:
        old, recent = NOW - 100 * DAY_S, NOW - DAY_S
        for i in range(1, 6):  # five old unreviewed items, one old reviewed, one recent
            store.queue.enqueue(make_record(i), stratum="base", inclusion_prob=0.5, now=old)
        store.queue.enqueue(make_record(6), stratum="base", inclusion_prob=0.5, now=recent)
        item = store.review.claim("ann", lease_s=60, now=old)
        store.review.submit_review(item.id, "ann", {"faithful": True}, now=old)
        store.scores.upsert([Score(make_record(i).trace_id, "s", 0.5, "1") for i in range(1, 6)], now=old)
        store.scores.upsert([Score(make_record(6).trace_id, "s", 0.5, "1")], now=recent)
        store.feedback.add([FeedbackEvent(make_record(i).trace_id, "copy", t) for i, t in ((1, old), (2, recent))])
        for t in (old, old + 1, recent):
            store.drift_runs.claim("p", t, "h", now=t)
            store.drift_runs.finish("p", t, "h", now=t)
        assert store.queue.depth(now=NOW) == {"queued": 5, "claimed": 0, "reviewed": 1}

        deleted = store.retention.prune(now=NOW)
        assert deleted == {"review_items": 4, "scores": 5, "feedback": 1, "drift_runs": 2}
        assert store.queue.depth(now=NOW) == {"queued": 1, "claimed": 0, "reviewed": 1}
        assert store.queue.get_item(item.id).state == "reviewed" and len(store.review.all_reviews()[item.id]) == 1
        assert [s.trace_id for s in store.scores.by_scorer("s")] == [make_record(6).trace_id]
        assert store.retention.prune(now=NOW) == {"review_items": 0, "scores": 0, "feedback": 0, "drift_runs": 0}
    finally:
        store.close()

    with open_store(store_url, review_retention_s=30 * DAY_S) as store:  # a team that keeps reviews 30 days
        assert store.retention.prune(now=NOW)["reviews"] == 1
        assert store.queue.depth(now=NOW) == {"queued": 1, "claimed": 0, "reviewed": 0}
        assert store.review.all_reviews() == {}


def test_scored_only_items_are_no_review_work_and_go_with_the_history(store_url):
    """The nested score sample's rest (queue ``score``) stays queued for good: never counted as
    waiting review work, claimable or assignable, and deleted after the history retention."""
    from rag_monitor.store.queue import SCORE_QUEUE

    with open_store(store_url, prune_batch_rows=2) as store:
        old, recent = NOW - 100 * DAY_S, NOW - DAY_S
        for i, t in ((1, old), (2, old), (3, old), (4, recent)):
            store.queue.enqueue(make_record(i), stratum="base", inclusion_prob=0.35, score_prob=0.35, queue=SCORE_QUEUE, now=t)
        store.queue.enqueue(make_record(5), stratum="base", inclusion_prob=0.2, score_prob=0.35, now=recent)
        assert store.queue.depth(now=NOW) == {"queued": 1, "claimed": 0, "reviewed": 0}
        assert store.review.claimable_count("ann", now=NOW) == 1
        assert [i.trace_id for i in store.review.unassigned_waiting()] == [make_record(5).trace_id]
        assert store.scores.backlog("s") == 5  # scoring is the scored-only items' work
        assert store.retention.prune(now=NOW)["review_items"] == 3
        assert store.scores.backlog("s") == 2
        assert store.queue.depth(queue=SCORE_QUEUE, now=NOW)["queued"] == 1
