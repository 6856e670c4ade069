"""Real agents on one PostgreSQL store: release labels agreed through the store, traces whose
spans reached two replicas assembled whole, and one transaction per OTLP request."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event

from tests.services import wait_until
from tests.traces import body, child_spans, feedback_span, root_span, trace_id_of

pytestmark = pytest.mark.integration
KEEP = 10


@pytest.fixture
def sample_all(tmp_path) -> str:
    path = tmp_path / "sampling-all.yaml"
    path.write_text("base_rate: 1.0\n")
    return str(path)


def first_seen(agent, release: str) -> float | None:
    return agent.metric("rag_release_first_seen_timestamp_seconds", {"service": "svc", "release": release})


def test_the_newest_releases_keep_their_series_and_replicas_agree(start_agent, postgres_url):
    a = start_agent(store_url=postgres_url)
    b = start_agent(store_url=postgres_url)
    releases = [f"2026.12.{i:02d}" for i in range(16)]  # a release a day for 16 days
    for i, release in enumerate(releases):
        assert a.post(body([root_span(trace_id_of(i), release=release)]))[0] == 200
        # The newest release always has its own series and first-seen time.
        assert a.metric_sum("rag_queries_total", release=release) == 1, release
        assert first_seen(a, release) is not None
    # Exactly the ten most recently first-seen releases are exported; older ones fold into `other`.
    assert [r for r in releases if first_seen(a, r) is not None] == releases[-KEEP:]
    assert a.metric_sum("rag_queries_total", release="other") == 0  # each was counted while it was new

    # The other replica never saw most of these: the store tells it which releases are labelled.
    assert b.post(body([root_span(trace_id_of(100), release=releases[3])]))[0] == 200
    assert b.post(body([root_span(trace_id_of(101), release=releases[-1])]))[0] == 200
    assert b.metric_sum("rag_queries_total", release="other") == 1
    assert b.metric_sum("rag_queries_total", release=releases[-1]) == 1
    assert [r for r in releases if first_seen(b, r) is not None] == releases[-KEEP:]
    assert first_seen(b, releases[-1]) == first_seen(a, releases[-1])
    # A release first seen on the other replica reaches this one's labels on its next refresh.
    assert b.post(body([root_span(trace_id_of(102), release="2027.01.01")]))[0] == 200
    wait_until(lambda: first_seen(a, "2027.01.01") is not None, timeout=20, what="the new release on replica a")
    assert first_seen(a, releases[-KEEP]) is None


def test_spans_acknowledged_by_one_replica_join_their_root_on_another(start_agent, postgres_url, sample_all):
    a = start_agent(store_url=postgres_url, sampling_config=sample_all)
    b = start_agent(store_url=postgres_url, sampling_config=sample_all)
    trace_id = trace_id_of(7)
    assert a.post(body(child_spans(trace_id)))[0] == 200
    assert b.post(body([root_span(trace_id)]))[0] == 200
    record = b.store.recent.get(trace_id)
    assert {s.name for s in record.stages} >= {"filter", "retrieve"}
    assert [d.id for d in record.retrieved] == ["doc-1", "doc-2"]
    assert record.filters[0].excluded_ids == ["doc-9"]
    assert b.store.queue.item_for_trace(trace_id).query_record.retrieved == record.retrieved
    assert b.store.ingest.pending_span_rows() == 0
    # Replica a still held the early spans in memory: at its root timeout it does not count a partial trace.
    wait_until(lambda: a.agent.pipeline.assembler.pending_traces == 0, timeout=30, what="replica a's root timeout")
    assert a.metric_sum("rag_queries_total") == 0 and b.metric_sum("rag_queries_total") == 1
    assert a.metric_sum("rag_agent_traces_partial_total") == 0  # nor as a partial trace
    assert b.store.recent.get(trace_id).retrieved == record.retrieved


class GroupTransactions:
    """Counts the store transactions each group commit of ``agent`` opens (the engine's ``begin``
    hook, on the thread running ``IngestPipeline._commit_group``; the jobs' own are not counted)."""

    def __init__(self, agent):
        self.per_group: list[int] = []
        local = threading.local()
        pipeline = agent.agent.pipeline
        commit_group = pipeline._commit_group

        def counted(group):
            local.count = 0
            try:
                return commit_group(group)
            finally:
                self.per_group.append(local.count)
                del local.count

        def begun(_conn):
            if hasattr(local, "count"):
                local.count += 1

        event.listen(agent.store._db.engine, "begin", begun)
        pipeline._commit_group = counted


def test_a_root_joins_its_stored_spans_in_the_one_transaction_of_its_request(start_agent, postgres_url, sample_all):
    a = start_agent(store_url=postgres_url, sampling_config=sample_all)
    b = start_agent(store_url=postgres_url, sampling_config=sample_all)
    for i, replica in enumerate((a, b)):  # the release is known to both (its first sighting reads the store once more)
        assert replica.post(body([root_span(trace_id_of(20 + i))]))[0] == 200
    transactions = GroupTransactions(a), GroupTransactions(b)
    trace_id = trace_id_of(8)
    assert a.post(body(child_spans(trace_id)))[0] == 200
    assert b.post(body([root_span(trace_id)]))[0] == 200
    # The stored spans were taken, the trace assembled whole and written in one transaction: no
    # read before it.
    assert [t.per_group for t in transactions] == [[1], [1]]
    assert b.store.ingest.pending_span_rows() == 0
    assert [d.id for d in b.store.recent.get(trace_id).retrieved] == ["doc-1", "doc-2"]
    assert b.metric_sum("rag_queries_total") == 2  # the warm-up query and this one


FAIL_FIRST_ENQUEUE = """
CREATE SEQUENCE enqueue_attempts;
CREATE FUNCTION fail_first_enqueue() RETURNS trigger AS $$
BEGIN
  IF nextval('enqueue_attempts') = 1 THEN
    RAISE EXCEPTION 'the store went away midway' USING ERRCODE = 'admin_shutdown';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER fail_first_enqueue BEFORE INSERT ON review_items FOR EACH ROW EXECUTE FUNCTION fail_first_enqueue();
"""


def test_a_store_failure_midway_and_the_exporters_retries_store_feedback_once(start_agent, postgres_url, sample_all):
    import psycopg

    agent = start_agent(store_url=postgres_url, sampling_config=sample_all)
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FAIL_FIRST_ENQUEUE)
    trace_id = trace_id_of(11)
    request = body([*child_spans(trace_id), feedback_span(trace_id), root_span(trace_id)])
    assert agent.post(request)[0] == 503  # the review item's insert failed after the feedback's
    assert agent.store.feedback.for_trace(trace_id) == [] and agent.store.recent.get(trace_id) is None
    assert agent.post(request)[0] == 200  # the exporter's retry
    assert agent.post(request)[0] == 200  # ... and again, its acknowledgement lost
    late = body([feedback_span(trace_id, kind="thumbs_up", n=10)])
    assert agent.post(late)[0] == 200 and agent.post(late)[0] == 200
    assert sorted(e.kind for e in agent.store.feedback.for_trace(trace_id)) == ["thumbs_down", "thumbs_up"]
    labels = {"release": "r1", "variant": "production"}
    for kind in ("thumbs_down", "thumbs_up"):
        assert agent.metric("rag_feedback_total", {**labels, "kind": kind}) == 1, kind
    assert agent.metric_sum("rag_queries_total") == 1
    item = agent.store.queue.item_for_trace(trace_id)
    assert item.query_record.feedback[0].kind == "thumbs_down" and agent.store.queue.depth()["queued"] == 1


def test_late_feedback_sent_twice_in_one_request_counts_once(start_agent):
    """An exporter batch that carries the same feedback span twice (a resend merged into the next
    batch): the event is stored once and counted once."""
    agent = start_agent()
    trace_id = trace_id_of(12)
    assert agent.post(body([*child_spans(trace_id), root_span(trace_id)]))[0] == 200
    late = feedback_span(trace_id, kind="thumbs_up", n=10)
    assert agent.post(body([late, late]))[0] == 200
    assert [e.kind for e in agent.store.feedback.for_trace(trace_id)] == ["thumbs_up"]
    assert agent.metric_sum("rag_feedback_total", kind="thumbs_up") == 1
