"""The ingest writer on a real store: later complaints update items in place under the single-draw
design, and shadow pairs are stored whole whichever half arrives first."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.agent.persist import IngestWriter
from rag_monitor.agent.releases import ReleaseLabels
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors.assembly import AssemblyOutput, LateFeedback
from rag_monitor.collectors.config import IngestLimits
from rag_monitor.record import Feedback, QueryRecord
from rag_monitor.review.sampler import Sampler, SamplingConfig
from rag_monitor.store import open_store
from tests.unit.test_sampler import trace_ids

BASE = 0.1


@pytest.fixture
def writer(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", recent_ttl_s=60)
    sampler = Sampler(SamplingConfig(base_rate=BASE, thumbs_down_rate=1.0, shadow_pair_rate=0.3))
    yield IngestWriter(store, sampler, ReleaseLabels(AgentMetrics(CollectorRegistry()), 10), IngestLimits())
    store.close()


def ids_where(sampler: Sampler, test, n: int) -> list[str]:
    return [t for t in trace_ids(5000, seed=7) if test(sampler.uniform(t))][:n]


def record(trace_id: str, **fields) -> QueryRecord:
    return QueryRecord(trace_id=trace_id, root_span_id="1" * 16, start_ns=0, end_ns=1, answer=f"a {trace_id[:4]}", **fields)


def assembled(*records: QueryRecord) -> AssemblyOutput:
    return AssemblyOutput(records=list(records), spans_by_trace={r.trace_id: [] for r in records})


def complaint(trace_id: str, span_id: str) -> AssemblyOutput:
    return AssemblyOutput(late_feedback=[LateFeedback(trace_id, Feedback("thumbs_down", 10**9, span_id=span_id), True)])


def test_a_later_complaint_raises_the_probability_of_the_same_item(writer):
    store = writer.store
    sampled, expired = ids_where(writer.sampler, lambda u: u < BASE, 2)
    (unsampled,) = ids_where(writer.sampler, lambda u: u >= BASE, 1)
    for trace_id in (sampled, unsampled, expired):
        writer.write(assembled(record(trace_id)), now=1000.0)
    assert store.queue.item_for_trace(sampled).weight == pytest.approx(1 / BASE)
    assert store.queue.item_for_trace(unsampled) is None
    store.recent.prune(now=2000.0)  # the cache lets every record go ...
    store.recent.put([record(sampled), record(unsampled)], now=2100.0)  # ... these two are cached again

    for trace_id in (sampled, unsampled, sampled):  # the exporter resends the first complaint
        writer.write(complaint(trace_id, span_id=trace_id[:16]), now=2101.0)
    written = writer.write(complaint(expired, span_id="e" * 16), now=2101.0)

    item = store.queue.item_for_trace(sampled)
    assert (item.stratum, item.weight, item.counted_weight) == ("thumbs_down", 1.0, pytest.approx(1 / BASE))
    pulled = store.queue.item_for_trace(unsampled)
    assert (pulled.stratum, pulled.weight, pulled.counted_weight) == ("thumbs_down", 1.0, 0.0)
    # A complaint after the cache let go changes nothing (for sampled and unsampled queries alike).
    assert store.queue.item_for_trace(expired).weight == pytest.approx(1 / BASE) and written.pull_expired == 1
    assert len(store.feedback.for_trace(sampled)) == 1
    assert store.queue.depth()["queued"] == 3


def test_a_sampled_shadow_pair_keeps_its_production_half(writer):
    store = writer.store
    early, late = ids_where(writer.sampler, lambda u: u < 0.3, 2)
    shadow_ids = trace_ids(2, seed=99)
    writer.write(assembled(record(early)), now=1000.0)  # production first, then its shadow
    writer.write(assembled(record(shadow_ids[0], variant="shadow", shadow_of=early)), now=1001.0)
    writer.write(assembled(record(shadow_ids[1], variant="shadow", shadow_of=late)), now=1001.0)  # shadow first
    writer.write(assembled(record(late)), now=1002.0)
    store.recent.prune(now=10_000.0)
    for production, shadow in zip((early, late), shadow_ids):
        item = store.queue.item_for_trace(shadow)
        assert (item.stratum, item.pair_trace_id) == ("shadow_pair", production)
        assert item.paired_record.answer == record(production).answer
