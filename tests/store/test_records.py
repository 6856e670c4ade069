from __future__ import annotations

import pytest

import json

from rag_monitor.record import Document, Feedback, FilterApplied, StageTiming
from rag_monitor.store.models import record_json
from rag_monitor.store import FeedbackEvent, Score
from tests.store.conftest import make_record


def test_recent_records_put_get_and_prune(store):
    assert store.recent.put([make_record(i) for i in range(1, 4)], now=1000.0) == 3
    assert store.recent.put([make_record(i) for i in range(4, 6)], now=3000.0) == 2
    assert store.recent.put([]) == 0
    assert store.recent.get(make_record(2).trace_id) == make_record(2)
    assert store.recent.get("0" * 32) is None
    # Insert-once: the trace stored again (an exporter's retry) is not new and changes nothing.
    assert store.recent.put([make_record(1, "late")], now=1010.0) == 0
    assert store.recent.get(make_record(1).trace_id).tenant is None
    # Default ttl one hour, in 10-minute slots: the slot of the rows written at 1000 s is dropped
    # whole once it ended an hour ago; the rows written at 3000 s stay.
    assert store.recent.prune(now=4700.0) == 3
    assert store.recent.count() == 2
    assert store.recent.get(make_record(2).trace_id) is None


def test_a_trace_is_stored_first_once_whichever_replica_stores_it(store_url):
    from rag_monitor.store import open_store

    replicas = [open_store(store_url), open_store(store_url, migrate=False)]
    try:
        record = make_record(5000)  # started at 5,000 s
        # The slot comes from the trace's start, so replicas minutes apart write the same key.
        assert replicas[0].recent.put([record], now=5001.0) == 1
        assert replicas[1].recent.put([record], now=5400.0) == 0
        assert replicas[1].recent.count() == 1
    finally:
        for s in replicas:
            s.close()


def test_recent_records_accept_dicts_and_reject_garbage(store):
    store.recent.put([make_record(7).to_dict()], now=1.0)
    assert store.recent.get(make_record(7).trace_id).query == "question 7"
    with pytest.raises(TypeError):
        store.recent.put([{"no": "trace id"}])


def test_feedback_events(store):
    trace = make_record(1).trace_id
    events = [
        FeedbackEvent.from_feedback(trace, Feedback("thumbs_down", 2_000_000_000, reason="wrong")),
        FeedbackEvent(trace, "dwell", 3.0, value=12.5),
        FeedbackEvent(make_record(2).trace_id, "copy", 4.0, value="answer"),
    ]
    assert store.feedback.add(events) == 3
    assert store.feedback.for_trace(trace) == events[:2]
    assert store.feedback.since(3.5) == events[2:]
    with pytest.raises(TypeError, match="FeedbackEvent"):
        store.feedback.add([("trace", "thumbs_up")])


def test_scores_upsert_is_idempotent_and_backlog_shrinks(store):
    for i in range(1, 5):
        store.queue.enqueue(make_record(i), stratum="base", inclusion_prob=0.1)
    assert store.scores.backlog("hhem") == 4 == store.scores.backlog()
    batch = [item.trace_id for item in store.scores.unscored_items("hhem", limit=3)]
    assert batch == [make_record(i).trace_id for i in (1, 2, 3)]

    results = [Score(batch[0], "hhem", 0.91, "2.1"), Score(batch[1], "hhem", None, "2.1", label="no_claims")]
    store.scores.upsert(results, now=10.0)
    # The worker crashed before acking and scores the same traces again: no double rows.
    store.scores.upsert([Score(batch[0], "hhem", 0.42, "2.2"), results[1]], now=20.0)
    assert store.scores.backlog("hhem") == 2
    assert store.scores.backlog("lexical") == 4
    assert [i.trace_id for i in store.scores.unscored_items("hhem", limit=10)] == [make_record(i).trace_id for i in (3, 4)]
    assert store.scores.for_trace(batch[0]) == {"hhem": Score(batch[0], "hhem", 0.42, "2.2", None, 20.0)}
    assert [(s.trace_id, s.score) for s in store.scores.by_scorer("hhem")] == [(batch[0], 0.42), (batch[1], None)]
    store.scores.upsert([Score(batch[2], "lexical", 0.5, "1")], now=30.0)
    assert store.scores.backlog() == 1  # only trace 4 has no score from any scorer


def test_scores_reject_non_finite_and_bad_limits(store):
    with pytest.raises(ValueError, match="finite"):
        Score("a" * 32, "hhem", float("nan"), "1")
    with pytest.raises(ValueError, match="limit"):
        store.scores.unscored_items("hhem", limit=0)


def test_release_first_seen_is_the_earliest_sighting(store):
    assert store.releases.note("rag-api", "v2", 200.0) == 200.0
    assert store.releases.note("rag-api", "v2", 300.0) == 200.0
    assert store.releases.note("rag-api", "v2", 150.0) == 150.0  # a replica saw it earlier
    store.releases.note("rag-api", "v1", 100.0)
    store.releases.note("other", "v2", 250.0)
    assert [(r.service, r.release, r.first_seen) for r in store.releases.all()] == [
        ("rag-api", "v1", 100.0), ("rag-api", "v2", 150.0), ("other", "v2", 250.0)]


def test_record_json_matches_to_dict():
    record = make_record(
        9, "acme", stages=[StageTiming("retrieve", "a" * 16, 1, 2)],
        filters=[FilterApplied("relevance", "locale = 'de'", 10, 0, ["d1"])],
        delivered=[Document("d2", "text", 0.5, {"lang": "de"})], feedback=[Feedback("copy", 5)],
        query_embedding=[0.1, -0.25], document_embeddings=[[1.0, 2.0]],
    )
    trace_id, text = record_json(record)
    assert trace_id == record.trace_id
    assert json.loads(text) == record.to_dict()
    # a non-finite float is stored as null (unknown), never as invalid JSON
    _, text = record_json(make_record(1, confidence=float("nan")))
    assert json.loads(text)["confidence"] is None


def test_checkpoint_copies_the_log_off_the_request_path(store, tmp_path):
    """The ``store_checkpoint`` job's call: SQLite copies its write-ahead log into the database
    (commits no longer do it below the backstop), PostgreSQL has nothing to do."""
    import os

    from rag_monitor.store.engine import WAL_AUTOCHECKPOINT_PAGES

    store.recent.put([make_record(i) for i in range(1, 200)], now=1.0)
    in_log, copied = store.checkpoint()
    if store.dialect != "sqlite":
        assert (in_log, copied) == (0, 0)
        return
    assert in_log > 0 and copied == in_log  # no reader held an older snapshot: all of it copied
    with store._db.read() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == WAL_AUTOCHECKPOINT_PAGES
    db_file = store.url.split("///", 1)[1]
    assert os.path.getsize(db_file) > 200 * 100  # the records are in the database file itself now
    assert store.recent.get(make_record(7).trace_id) == make_record(7)


def test_recent_records_keep_each_document_once_per_slot(store):
    import sqlalchemy as sa

    from rag_monitor.record import Document as Doc
    from rag_monitor.store.schema import recent_documents

    text = "To cancel, open Settings, then Billing, then Cancel plan. " * 4
    records = [make_record(i, retrieved=[Doc("doc-1", text, 0.5), Doc("doc-2", "short", 0.1)],
                           delivered=[Doc("doc-1", text, 0.5)]) for i in range(1, 4)]
    assert store.recent.put(records, now=2.0) == 3
    assert [store.recent.get(r.trace_id) for r in records] == records  # whole again, contents included
    with store._db.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(recent_documents)).scalar_one() == 1
    assert store.recent.prune(now=10_000.0) == 3
    with store._db.read() as conn:  # the slot's documents go with its records
        assert conn.execute(sa.select(sa.func.count()).select_from(recent_documents)).scalar_one() == 0


def test_a_trace_older_than_half_the_ttl_is_counted_once_across_slots(store_url):
    """Its slot is clamped to ``now - ttl/2`` and moves with ``now``: a retry two slots later, on
    another replica, finds the trace stored and is not new; another old trace still is."""
    from rag_monitor.store import open_store

    replicas = [open_store(store_url), open_store(store_url, migrate=False)]
    try:
        recent = replicas[0].recent
        now = 1_700_000_000.0
        old = make_record(5000)  # started in 1970
        assert recent.slot_of(old.start_ns, now) != recent.slot_of(old.start_ns, now + 2 * recent.slot_s)
        assert replicas[0].recent.put([old], now=now) == 1
        assert replicas[1].recent.put([old, make_record(5001)], now=now + 2 * recent.slot_s) == 1
        assert replicas[1].recent.count() == 2
        assert replicas[1].recent.get(old.trace_id).trace_id == old.trace_id
    finally:
        for s in replicas:
            s.close()
