"""The tail sampler's decisions on whole traces: policies first, then the spans/s budget; late
complaints and shadow pairs forward sampled-out traces held or rebuilt; nothing uncounted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from rag_monitor import semconv as sc
from rag_monitor.agent.rebuild import REBUILT
from rag_monitor.agent.tail_sampling import ForwardPolicy, TailSampler
from rag_monitor.collectors.otlp import STATUS_ERROR
from rag_monitor.record import Feedback, QueryRecord, StageTiming
from rag_monitor.settings import AgentSettings
from rag_monitor.store.queue import DEFAULT_QUEUE, SCORE_QUEUE
from tests.traces import child_spans, feedback_span, root_span, trace_id_of


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def record_of(trace_id: str, **fields) -> QueryRecord:
    root = root_span(trace_id)
    return QueryRecord(trace_id=trace_id, root_span_id=root.span_id, start_ns=root.start_ns, end_ns=root.end_ns,
                       service="svc", query="q", answer="a", release="r1",
                       stages=[StageTiming("retrieve", child_spans(trace_id)[1].span_id, root.start_ns, root.end_ns)],
                       **fields)


def trace(trace_id: str, error: bool = False) -> list:
    spans = [root_span(trace_id), *child_spans(trace_id)]
    if error:
        spans[1].status_code = STATUS_ERROR
    return spans


def output(traces: dict, records=(), late_feedback=()):
    return SimpleNamespace(spans_by_trace=traces, records=list(records), late_spans=[],
                           late_feedback=list(late_feedback))


def written(queued=(), late=()):
    return SimpleNamespace(outcome=SimpleNamespace(queued=list(queued)), late=list(late))


def item(record, queue=DEFAULT_QUEUE, pair=None):
    return SimpleNamespace(record=record, queue=queue, pair_trace_id=pair, pair_record=None)


class Harness:
    def __init__(self, recent=None, **policy):
        self.sent: list = []
        self.traces: Counter = Counter()
        self.spans: Counter = Counter()
        self.clock = Clock()
        self.sampler = TailSampler(self.sent.extend, ForwardPolicy(**policy),
                                   on_trace=lambda reason: self.traces.update([reason]),
                                   on_spans=lambda outcome, n: self.spans.update({outcome: n}),
                                   recent=recent, clock=self.clock)

    def forwarded(self) -> set[str]:
        return {s.trace_id for s in self.sent}


def test_policies_forward_their_traces_and_the_budget_limits_the_rest():
    h = Harness(budget_spans_s=3, burst_s=1, hold_spans=0)  # one 3-span trace a second fits
    ids = [trace_id_of(i) for i in range(8)]
    review, scored, complaint, error, shadow, budget, out1, out2 = ids
    records = [record_of(review), record_of(scored), record_of(complaint, feedback=[Feedback(sc.FEEDBACK_THUMBS_DOWN, 1)]),
               record_of(shadow, shadow_of=trace_id_of(99))]
    traces = {t: trace(t, error=t == error) for t in ids}
    h.sampler.offer(output(traces, records), written([item(records[0]), item(records[1], SCORE_QUEUE)]))
    # The always-forwarded traces drew the bucket into debt: no room for the rest this second.
    assert h.forwarded() == {review, scored, complaint, error, shadow}
    # The shadow's production half (never seen here, not in the recent records) is counted as missing.
    assert h.traces == {"review": 1, "scored": 1, "complaint": 1, "error": 1, "shadow": 1, "sampled_out": 3,
                        "late_unavailable": 1}
    assert h.spans["sampled_out"] == 9
    h.clock.now += 20  # the bucket refilled (to its 1 s burst)
    h.sampler.offer(output({budget: trace(budget), out1: trace(out1)}), written())
    assert budget in h.forwarded() and out1 not in h.forwarded()
    assert h.traces["budget"] == 1 and h.traces["sampled_out"] == 4


def test_no_budget_forwards_everything_and_the_slowest_above_p99_always():
    h = Harness(budget_spans_s=0)
    traces = {trace_id_of(i): trace(trace_id_of(i)) for i in range(5)}
    h.sampler.offer(output(traces), written())
    assert h.forwarded() == set(traces) and h.traces == {"budget": 5}

    h = Harness(budget_spans_s=1, burst_s=1, hold_spans=0, slow_s=2.0)
    slow = trace_id_of(1)
    spans = trace(slow)
    spans[0].end_ns = spans[0].start_ns + 3_000_000_000
    h.sampler.offer(output({slow: spans}), written())
    assert h.traces == {"slow": 1}


def test_late_complaints_forward_the_held_trace_whole_or_the_record_rebuilt():
    records = {}
    h = Harness(recent=records.get, budget_spans_s=1, burst_s=1, hold_spans=3)  # one trace held at a time
    first, second = trace_id_of(1), trace_id_of(2)
    for t in (first, second):
        records[t] = record_of(t)
        h.sampler.offer(output({t: trace(t)}, [records[t]]), written())
    assert not h.sent and h.traces == {"sampled_out": 1}  # the first left the hold when the second came
    assert h.sampler.held_spans() == 3

    # A thumbs-down for the held trace forwards its spans, the feedback span after them.
    late = feedback_span(second)
    h.sampler.offer(output({}, late_feedback=[SimpleNamespace(trace_id=second)]),
                    written(late=[(records[second], Feedback(sc.FEEDBACK_THUMBS_DOWN, 1))]), [late])
    assert [s.span_id for s in h.sent] == [s.span_id for s in trace(second)] + [late.span_id]
    assert h.traces["late_held"] == 1 and h.sampler.held_spans() == 0

    # The first is gone from the hold: a complaint that pulled it into review rebuilds it from its record.
    h.sent.clear()
    h.sampler.offer(output({}), written(queued=[item(records[first])]))
    assert h.forwarded() == {first} and h.traces["late_rebuilt"] == 1
    root = next(s for s in h.sent if s.parent_span_id is None)
    assert root.span_id == records[first].root_span_id and root.attributes[REBUILT] is True

    # A complaint for a query no longer in the recent records is counted, not forwarded.
    h.sent.clear()
    h.sampler.offer(output({}), written(queued=[SimpleNamespace(record=record_of(trace_id_of(3)), queue=DEFAULT_QUEUE,
                                                                pair_trace_id=trace_id_of(4), pair_record=None)]))
    assert h.traces["late_unavailable"] == 1 and h.forwarded() == {trace_id_of(3)}  # rebuilt from the item's record


def test_a_shadow_promotes_its_production_half_and_holds_expire_counted():
    h = Harness(budget_spans_s=1, burst_s=1, hold_s=30)
    production, shadow, other = trace_id_of(1), trace_id_of(2), trace_id_of(3)
    h.sampler.offer(output({production: trace(production), other: trace(other)}), written())
    assert not h.sent
    h.sampler.offer(output({shadow: trace(shadow)}, [record_of(shadow, shadow_of=production)]), written())
    assert h.forwarded() == {production, shadow}
    assert h.traces == {"late_held": 1, "shadow": 1}
    # Late spans follow their trace's decision: forwarded for the pair, held for the other.
    late_forwarded, late_held = child_spans(production)[0], child_spans(other)[0]
    late_forwarded.span_id, late_held.span_id = "f" * 16, "e" * 16
    h.sampler.offer(output({}), written(), [late_forwarded, late_held])
    assert late_forwarded in h.sent and late_held not in h.sent
    h.clock.now += 31
    h.sampler.offer(output({}), written())  # the expire job's call
    assert h.traces["sampled_out"] == 1 and h.spans["sampled_out"] == 4 and h.sampler.held_spans() == 0


def test_the_default_budget_is_the_one_the_phoenix_benchmark_recommends():
    # Measured on PostgreSQL, the store a team runs Phoenix on at production rates.
    results = json.loads((Path(__file__).parents[2] / "benchmarks/results/phoenix_capacity_postgresql.json").read_text())
    assert AgentSettings().forward_budget_spans_s == results["recommended_budget_spans_s"]
