"""The scoring loop on a real store: fenced leases (two scorers, a lease that lapses mid-batch)
and the verdicts of answers that must not be scored."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.agent.scoring import ScoringLoop
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.faithfulness import load_scorer
from rag_monitor.faithfulness.worker import FaithfulnessWorker
from rag_monitor.record import Document, QueryRecord
from rag_monitor.store import open_store

LEASE_S = 25.0


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = open_store(url)
    yield s
    s.close()


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


class HookedWorker(FaithfulnessWorker):
    """The real lexical scorer, with a hook that runs while a chunk is being scored."""

    def __init__(self, during=None):
        super().__init__(load_scorer(None, offline="lexical"))
        self.during = during
        self.pairs_scored = 0

    def score_pairs(self, pairs):
        if self.during is not None:
            hook, self.during = self.during, None
            hook()
        self.pairs_scored += len(pairs)
        return super().score_pairs(pairs)


def scoring_loop(store, holder: str, worker, clock) -> tuple[ScoringLoop, CollectorRegistry]:
    registry = CollectorRegistry()
    loop = ScoringLoop(store, worker, AgentMetrics(registry), lambda r: (r.release or "unknown", r.variant),
                       holder=holder, lease_s=LEASE_S, chunk=8, clock=clock)
    return loop, registry


def scored_total(registry: CollectorRegistry) -> float:
    return sum(s.value for f in registry.collect() for s in f.samples if s.name == "rag_faithfulness_scored_total")


def answer(i: int, **fields) -> QueryRecord:
    defaults = dict(query=f"question {i}", answer="Cancel under Settings, then Billing.",
                    delivered=[Document(f"d{i}", "To cancel, open Settings, then Billing.")])
    return QueryRecord(trace_id=f"{i + 1:032x}", root_span_id=f"{i + 1:016x}", start_ns=0, end_ns=1,
                       **{**defaults, **fields})


def test_a_scorer_whose_lease_lapsed_mid_batch_counts_nothing_twice(store):
    for i in range(20):
        store.queue.enqueue(answer(i), stratum="base", inclusion_prob=0.5)
    clock = Clock()
    second, second_registry = scoring_loop(store, "replica-b", HookedWorker(), clock)

    def stall_then_let_the_other_replica_in():
        clock.t += LEASE_S + 1  # the first replica's lease lapses while it scores its first chunk
        assert second.tick() == 20  # ... the second takes the lease over and scores everything

    first, first_registry = scoring_loop(store, "replica-a", HookedWorker(during=stall_then_let_the_other_replica_in), clock)
    assert first.tick() == 0  # its write is fenced off: nothing stored, nothing counted
    assert first.fenced == 1 and first.worker.pairs_scored == 8
    assert scored_total(first_registry) == 0 and scored_total(second_registry) == 20
    assert store.scores.backlog("lexical-v1") == 0
    assert first.tick() == 0  # the lease is the other replica's now
    clock.t += LEASE_S + 1
    assert first.tick() == 0  # lapsed again and retaken: nothing left to score, nothing counted again
    assert scored_total(first_registry) + scored_total(second_registry) == 20


def test_the_lease_is_renewed_before_every_chunk(store):
    for i in range(24):
        store.queue.enqueue(answer(i), stratum="base", inclusion_prob=0.5)
    clock = Clock()
    worker = HookedWorker()
    loop, registry = scoring_loop(store, "replica-a", worker, clock)
    original = worker.score_pairs

    def slow(pairs):  # every chunk takes 20 s: three chunks outlast one 25 s lease
        clock.t += 20.0
        return original(pairs)

    worker.score_pairs = slow
    assert loop.tick() == 24 and loop.fenced == 0
    other, _ = scoring_loop(store, "replica-b", HookedWorker(), clock)
    assert other.tick() == 0  # renewed before the last chunk: still ours


def test_hidden_and_context_less_answers_get_verdicts_of_their_own(store):
    records = [
        answer(0),
        answer(1, hidden=["answer"], answer="[hidden]"),
        answer(2, hidden=["documents"]),
        answer(3, delivered=[]),
        answer(4, delivered=[Document("d4", "")]),
        answer(5, delivered=[], refused=True, answer="I cannot answer that."),
    ]
    for r in records:
        store.queue.enqueue(r, stratum="base", inclusion_prob=0.25)
    worker = HookedWorker()
    loop, registry = scoring_loop(store, "replica-a", worker, Clock())
    assert loop.tick() == len(records)
    assert worker.pairs_scored == 2  # the supported answer and the refusal; nothing hidden or context-less
    labels = {r.trace_id: store.scores.for_trace(r.trace_id)["lexical-v1"].label for r in records}
    assert [labels[r.trace_id] for r in records] == [
        "supported", "not_scored", "not_scored", "no_context", "no_context", "refused"]

    def counted(verdict: str, name: str = "rag_faithfulness_scored_total") -> float:
        return registry.get_sample_value(name, {"release": "unknown", "variant": "production",
                                                "scorer": "lexical-v1", "verdict": verdict}) or 0.0

    assert (counted("not_scored"), counted("no_context"), counted("unsupported")) == (2, 2, 0)
    assert counted("no_context", "rag_faithfulness_weighted_total") == 8.0  # weight 4 each
