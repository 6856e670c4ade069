"""One OTLP request, one transaction; keyed feedback; items upgraded in place; fenced leases;
the release order replicas agree on. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from rag_monitor.record import Feedback
from rag_monitor.store import FeedbackEvent, IngestBatch, QueueWrite, Score
from tests.store.conftest import make_record


def feedback_event(i: int, span: str = "f" * 16) -> FeedbackEvent:
    return FeedbackEvent.from_feedback(f"{i:032x}", Feedback("thumbs_down", 5_000_000_000, "wrong", span_id=span))


def test_a_failure_midway_writes_nothing_and_the_retry_writes_feedback_once(store):
    records = [make_record(1), make_record(2)]
    good = IngestBatch(records=records, feedback=[feedback_event(1)],
                       items=[QueueWrite(records[0], "base", 0.5)], pending=[("c" * 32, b"spans")])
    bad = IngestBatch(records=records, feedback=[feedback_event(1)],
                      items=[QueueWrite(records[0], "base", 0.5), QueueWrite(records[1], "base", 0.0)],
                      pending=[("c" * 32, b"spans")])
    with pytest.raises(ValueError, match="inclusion_prob"):
        store.ingest.persist(bad)  # fails after the recent records, feedback and first item were written
    assert store.recent.get(records[0].trace_id) is None
    assert store.feedback.for_trace(records[0].trace_id) == []
    assert store.queue.item_for_trace(records[0].trace_id) is None
    assert store.ingest.pending_spans(["c" * 32]) == {}

    first = store.ingest.persist(good)
    again = store.ingest.persist(good)  # the exporter's retry after a lost acknowledgement
    assert (len(first.feedback_added), len(again.feedback_added)) == (1, 0)
    assert len(first.queued) == 1 and not again.queued
    assert len(store.feedback.for_trace(records[0].trace_id)) == 1
    assert store.recent.get(records[1].trace_id).answer == "answer 2"


def test_feedback_without_a_span_id_is_keyed_by_its_content(store):
    event = FeedbackEvent.from_feedback("a" * 32, Feedback("thumbs_up", 7, None, 1.0))
    other = FeedbackEvent.from_feedback("a" * 32, Feedback("thumbs_up", 8, None, 1.0))
    assert store.feedback.add([event, event, other]) == 2
    assert [e.time for e in store.feedback.for_trace("a" * 32)] == [7e-9, 8e-9]


def test_a_later_complaint_updates_the_queued_item_in_place(store):
    record = make_record(3)
    assert store.queue.enqueue(record, stratum="base", inclusion_prob=0.01)
    record.feedback.append(Feedback("thumbs_down", 9))
    assert not store.queue.enqueue(record, stratum="thumbs_down", inclusion_prob=1.0, counted_weight=0.0)
    item = store.queue.item_for_trace(record.trace_id)
    assert (item.stratum, item.inclusion_prob, item.weight) == ("thumbs_down", 1.0, 1.0)
    assert item.counted_weight == pytest.approx(100.0)  # what the counters already added stays
    assert item.query_record.feedback[0].kind == "thumbs_down"
    # A lower probability never lowers it back.
    assert not store.queue.enqueue(record, stratum="base", inclusion_prob=0.01)
    assert store.queue.item_for_trace(record.trace_id).weight == 1.0
    assert store.queue.depth()["queued"] == 1
    # An item a complaint pulled in counts 0 in the weighted counters.
    assert store.queue.enqueue(make_record(4), stratum="thumbs_down", inclusion_prob=1.0, counted_weight=0.0)
    assert store.queue.item_for_trace(make_record(4).trace_id).counted_weight == 0.0


def test_a_shadow_pair_is_stored_whole_whichever_half_comes_first(store):
    production, shadow = make_record(5), make_record(6, shadow_of=f"{5:032x}", variant="shadow")
    later_production, later_shadow = make_record(7), make_record(8, shadow_of=f"{7:032x}", variant="shadow")
    store.ingest.persist(IngestBatch(items=[QueueWrite(shadow, "shadow_pair", 0.05, pair_trace_id=production.trace_id,
                                                       pair_record=production)]))
    store.ingest.persist(IngestBatch(items=[QueueWrite(later_shadow, "shadow_pair", 0.05,
                                                       pair_trace_id=later_production.trace_id)]))
    assert store.queue.item_for_trace(later_shadow.trace_id).paired_record is None
    store.ingest.persist(IngestBatch(records=[later_production], pair_halves=[later_production]))
    store.recent.prune(now=10**12)  # the recent-records cache expires: the pairs stay whole
    for half, other in ((production, shadow), (later_production, later_shadow)):
        item = store.queue.item_for_trace(other.trace_id)
        assert item.paired_record.answer == half.answer and item.query_record.answer == other.answer


def test_expired_traces_are_kept_only_by_the_replica_that_claims_their_spans(store):
    a, b = "a" * 32, "b" * 32
    store.ingest.persist(IngestBatch(pending=[(a, b"one"), (a, b"two"), (b, b"three")]))
    assert store.ingest.pending_spans([a, b, "c" * 32]) == {a: [b"one", b"two"], b: [b"three"]}
    # Replica 1 received b's root: it assembles b and claims its spans.
    store.ingest.persist(IngestBatch(records=[make_record(0xB)], completed=[b]))
    # Replica 2 still held b's early spans in memory: at its root timeout, b is not its to count.
    record_a, record_b = make_record(0xA), make_record(0xBB)
    outcome = store.ingest.persist(IngestBatch(records=[record_a, record_b], completed=[a, record_b.trace_id],
                                               claim_required={a, record_b.trace_id}))
    assert outcome.skipped == {record_b.trace_id}
    assert store.recent.get(record_a.trace_id) is not None and store.recent.get(record_b.trace_id) is None
    assert store.ingest.pending_span_rows() == 0


def test_orphaned_pending_spans_are_pruned_by_age(store):
    store.ingest.persist(IngestBatch(pending=[("d" * 32, b"x")]), now=100.0)
    store.ingest.persist(IngestBatch(pending=[("e" * 32, b"y")]), now=200.0)
    assert store.ingest.prune_pending(150.0) == 1
    assert list(store.ingest.pending_spans(["d" * 32, "e" * 32])) == ["e" * 32]


def test_fencing_tokens_grow_with_every_acquisition_and_stale_writes_are_refused(store):
    assert store.locks.acquire("scoring:x", "a", 25, now=0.0) == 1
    assert store.locks.acquire("scoring:x", "a", 25, now=10.0) == 1  # renewal keeps the token
    assert store.locks.acquire("scoring:x", "b", 25, now=20.0) is None
    assert store.locks.acquire("scoring:x", "b", 25, now=40.0) == 2  # a's lease lapsed
    score = Score("f" * 32, "x", 0.9, "1")
    assert store.scores.upsert([score], fence=("scoring:x", "a", 1)) == -1
    assert store.scores.for_trace("f" * 32) == {}
    assert store.scores.upsert([score], fence=("scoring:x", "b", 2)) == 1
    assert store.locks.unlock("scoring:x", "b")
    assert store.locks.acquire("scoring:x", "a", 25, now=41.0) == 3  # unlocking keeps the sequence


def test_each_service_keeps_its_most_recently_first_seen_releases(store):
    for i in range(15):
        store.releases.note("svc", f"r{i:02d}", float(100 + i))
    store.releases.note("other-svc", "r00", 500.0)
    store.releases.note("svc", "r14", 50.0)  # a replica saw r14 earlier: the earliest sighting wins
    latest = store.releases.latest(10)
    assert [(r.service, r.release) for r in latest] == [("other-svc", "r00")] + [
        ("svc", f"r{i:02d}") for i in range(13, 3, -1)]


def test_one_batch_queues_many_items_at_once_and_upgrades_a_trace_it_queued_twice(store):
    records = [make_record(i) for i in range(20, 25)]
    complained = make_record(20)
    complained.feedback.append(Feedback("thumbs_down", 9))
    items = [QueueWrite(r, "base", 0.01) for r in records] + [QueueWrite(complained, "thumbs_down", 1.0, counted_weight=0.0)]
    out = store.ingest.persist(IngestBatch(records=records, items=items))
    assert [w.record.trace_id for w in out.queued] == [r.trace_id for r in records]
    assert [w.stratum for w in out.upgraded] == ["thumbs_down"]
    item = store.queue.item_for_trace(records[0].trace_id)
    assert (item.stratum, item.inclusion_prob, item.counted_weight) == ("thumbs_down", 1.0, pytest.approx(100.0))
    again = store.ingest.persist(IngestBatch(items=items))  # a retry: nothing new, nothing lowered
    assert not again.queued and not again.upgraded
    assert store.queue.depth()["queued"] == 5


def test_awkward_values_survive_the_group_write_unchanged(store):
    """PostgreSQL takes a group's rows as binary column arrays: quotes, backslashes, braces,
    commas, NULL-like words, non-ASCII and long text come back byte for byte, and an integral
    probability (1, not 1.0) in a float column does not change the column's type."""
    awkward = 'say "hi" \\ {a,b} NULL \'x\' — naïve 日本 \t\n' * 200
    records = [make_record(30), make_record(31)]
    (records[0].query, records[0].answer), (records[1].query, records[1].answer) = (awkward, "NULL"), ("{}", "\\")
    items = [QueueWrite(records[0], "base", 1), QueueWrite(records[1], "base", 0.5, score_prob=1)]
    store.ingest.persist(IngestBatch(records=records, items=items, pending=[("c" * 32, bytes(range(256)) * 3)]))
    assert store.recent.get(records[0].trace_id).query == awkward
    assert (store.recent.get(records[1].trace_id).query, store.recent.get(records[1].trace_id).answer) == ("{}", "\\")
    assert store.queue.item_for_trace(records[0].trace_id).record["query"] == awkward
    assert store.queue.item_for_trace(records[1].trace_id).inclusion_prob == 0.5
    assert store.ingest.pending_spans(["c" * 32]) == {"c" * 32: [bytes(range(256)) * 3]}


def test_an_unnest_insert_takes_integers_among_floats(postgres_url):
    """Binary arrays need one element type: ``UnnestInsert`` makes a float column's values floats
    and an integer column's integers (psycopg refuses a list of mixed types)."""
    import sqlalchemy as sa

    from rag_monitor.store.engine import Database, UnnestInsert

    db = Database(postgres_url)
    table = sa.Table("mixed", sa.MetaData(), sa.Column("p", sa.Double), sa.Column("n", sa.BigInteger))
    try:
        with db.write() as conn:
            table.create(conn)
            UnnestInsert(table, ["p", "n"]).execute(conn, [{"p": 1, "n": 2.0}, {"p": 0.5, "n": 3}, {"p": None, "n": None}])
        with db.read() as conn:
            assert conn.execute(sa.select(table.c.p, table.c.n)).all() == [(1.0, 2), (0.5, 3), (None, None)]
    finally:
        db.dispose()
