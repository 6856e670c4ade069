"""The shadow runner: off the request path, bounded, timed out, linked, and never writing."""

from __future__ import annotations

import threading
import time

import pytest

import rag_monitor
from rag_monitor import semconv
from rag_monitor.sdk import ShadowConfig, ShadowWriteRefused, current_query, in_shadow

ROOT = semconv.RAG_QUERY_SPAN_NAME


@pytest.fixture
def make_monitor(exporter):
    made = []

    def make(**config):
        m = rag_monitor.init(service_name="bot", release="r1", span_exporter=exporter, batch=False,
                             shadow=ShadowConfig(**{"share": 1.0, **config}))
        made.append(m)
        return m

    yield make
    for m in made:
        m.shutdown()


def roots(exporter):
    return [s for s in exporter.get_finished_spans() if s.name == ROOT]


def wait_until(predicate, timeout_s=10.0):
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.005)


def test_a_candidate_answers_in_its_own_trace_linked_to_production(make_monitor, exporter):
    monitor = make_monitor()
    seen = {}

    def candidate(ctx):
        seen.update(text=ctx.text, writes=ctx.writes_allowed, shadow=in_shadow(), current=current_query() is ctx.query)
        with ctx.query.retrieve() as r:
            r.documents([{"id": "d1", "content": "current policy"}])
        ctx.query.answer("the fixed answer", citations=["d1"])

    with monitor.query("How do refunds work?", tenant="acme", intent="billing", session_id="s1") as q:
        future = q.shadow("fixed-retriever", candidate)
        q.answer("the production answer")
    future.result(timeout=10)
    monitor.force_flush()
    shadow = next(s for s in roots(exporter) if s.attributes[semconv.RAG_VARIANT] == "shadow")
    assert shadow.attributes[semconv.RAG_SHADOW_OF] == q.trace_id
    assert shadow.attributes[semconv.RAG_SHADOW_CANDIDATE] == "fixed-retriever"
    assert shadow.attributes[semconv.RAG_TENANT] == "acme"  # reviewed as a pair only within a tenant
    assert shadow.attributes[semconv.INPUT_VALUE] == "How do refunds work?"
    assert shadow.attributes[semconv.OUTPUT_VALUE] == "the fixed answer"
    assert semconv.SESSION_ID not in shadow.attributes  # never an inferred regeneration of the user's session
    assert seen == {"text": "How do refunds work?", "writes": False, "shadow": True, "current": True}
    assert not in_shadow()  # the flag never leaks out of the candidate's thread
    assert monitor.shadow_stats().completed == 1


def test_a_timed_out_candidate_leaves_production_prompt_and_is_counted(make_monitor, exporter):
    monitor = make_monitor(timeout_s=0.2)
    release = threading.Event()
    cancelled = []

    def slow(ctx):
        release.wait(10)  # far past its deadline
        cancelled.append(ctx.cancelled.is_set())
        ctx.query.answer("too late")  # its span is closed: ignored

    with monitor.query("q") as q:
        q.shadow("slow", slow)
        q.answer("production")
    # Production returned while the candidate was still blocked on the event (no clock needed).
    assert monitor.shadow_stats().running == 1 and not release.is_set()
    wait_until(lambda: monitor.shadow_stats().timed_out == 1)
    assert monitor.shadow_stats().running == 1  # it still holds its slot: nothing kills a thread
    release.set()
    wait_until(lambda: monitor.shadow_stats().running == 0)
    stats = monitor.shadow_stats()
    assert (stats.submitted, stats.timed_out, stats.completed, stats.failed) == (1, 1, 0, 0)
    assert cancelled == [True]
    shadow = next(s for s in roots(exporter) if s.attributes[semconv.RAG_VARIANT] == "shadow")
    assert "timed out" in shadow.status.description
    assert semconv.OUTPUT_VALUE not in shadow.attributes


def test_the_concurrency_limit_drops_and_counts_rather_than_queueing(make_monitor):
    monitor = make_monitor(max_concurrency=2, max_pending=1, timeout_s=30)
    gate = threading.Event()
    running = []

    def blocked(ctx):
        running.append(1)
        gate.wait(10)

    futures = []
    for i in range(6):
        with monitor.query(f"q{i}") as q:
            futures.append(q.shadow("blocked", blocked))
    wait_until(lambda: len(running) == 2)
    stats = monitor.shadow_stats()
    assert (stats.submitted, stats.dropped, stats.running) == (3, 3, 3)  # two running, one waiting
    assert sum(f is None for f in futures) == 3
    gate.set()
    for f in futures:
        if f is not None:
            f.result(timeout=10)
    assert len(running) == 3 and monitor.shadow_stats().completed == 3


def test_only_the_sampled_share_runs(make_monitor):
    monitor = make_monitor(share=0.0)
    with monitor.query("q") as q:
        assert q.shadow("never", lambda ctx: None) is None
    assert monitor.shadow_stats().submitted == 0
    with pytest.raises(ValueError, match="candidate name"):
        q.shadow("", lambda ctx: None)
    with pytest.raises(ValueError, match="share"):
        ShadowConfig(share=1.5)


def test_writes_are_refused_for_shadow_handles(make_monitor, exporter):
    monitor = make_monitor()
    outcome = {}

    def candidate(ctx):
        for name, write in (("feedback", lambda: monitor.feedback(ctx.query, "thumbs_up")),
                            ("query", lambda: monitor.query("nested").trace_id)):
            try:
                outcome[name] = write()
            except ShadowWriteRefused as exc:
                outcome[name] = type(exc).__name__

    with monitor.query("q") as q:
        q.shadow("writer", candidate).result(timeout=10)
    assert outcome == {"feedback": "ShadowWriteRefused", "query": "0" * 32}  # a no-op query: never recorded
    shadow_id = next(s for s in roots(exporter) if s.attributes[semconv.RAG_VARIANT] == "shadow").context.trace_id
    with pytest.raises(ShadowWriteRefused):
        monitor.feedback(f"{shadow_id:032x}", "thumbs_down")  # by id, from the production side too
    monitor.feedback(q.trace_id, "thumbs_down")  # production's own feedback is fine
    assert not any(s.name == semconv.RAG_FEEDBACK_SPAN_NAME and s.context.trace_id == shadow_id
                   for s in exporter.get_finished_spans())


def test_a_failing_candidate_is_counted_and_never_reaches_production(make_monitor, exporter):
    monitor = make_monitor()

    def broken(ctx):
        raise RuntimeError("candidate bug")

    with monitor.query("q") as q:
        q.shadow("broken", broken).result(timeout=10)
        q.answer("fine")
    assert monitor.shadow_stats().failed == 1
    shadow = next(s for s in roots(exporter) if s.attributes[semconv.RAG_VARIANT] == "shadow")
    assert "candidate bug" in shadow.status.description


def test_a_disabled_monitor_shadows_nothing():
    monitor = rag_monitor.init(service_name="bot", enabled=False)
    with monitor.query("q") as q:
        assert q.shadow("x", lambda ctx: None) is None


def test_shutdown_drops_the_waiting_candidates_and_counts_them(make_monitor):
    monitor = make_monitor(max_concurrency=1, max_pending=2, timeout_s=30)
    gate = threading.Event()
    for i in range(3):
        with monitor.query(f"q{i}") as q:
            q.shadow("blocked", lambda ctx: gate.wait(10))
    wait_until(lambda: monitor.shadow_stats().running == 3)
    monitor.shadow_runner.shutdown(timeout_s=0.1)  # one is running, two are waiting
    stats = monitor.shadow_stats()
    assert (stats.submitted, stats.dropped, stats.running) == (3, 2, 1)
    with monitor.query("after") as q:
        assert q.shadow("late", lambda ctx: None) is None  # nothing is admitted after shutdown
    assert monitor.shadow_stats().dropped == 3
    gate.set()
    wait_until(lambda: monitor.shadow_stats().running == 0)
    assert monitor.shadow_stats().completed == 1
