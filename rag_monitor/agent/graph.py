"""The agent's components and sinks, built from its planes and listed in start order.

Start order (each may use those before it; ``Lifecycle`` stops them in reverse):

    store -> forwarder (Phoenix) -> probes -> scorer, judge -> drift_feed, drift:<profile>
          -> sink:metrics, sink:regeneration, sink:freshness, sink:drift_feed, sink:forwarder
          -> receiver -> scheduler

So at stop the scheduler stops firing (and waits for running jobs) first, the receiver is closed,
each sink consumes what it has queued, the forwarder flushes to Phoenix what the forwarder sink
handed it, and the store closes last. To add a sink: a ``QueueSink`` in ``build_sinks`` (records
or spans) and a line in docs/architecture.md ("Add a signal").
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rag_monitor.agent.component import DEGRADED, FAILED, HEALTHY, Component, Health, Part
from rag_monitor.agent.sinks import FanOut, IngestBatch, QueueSink
from rag_monitor.store import StoreUnavailable

if TYPE_CHECKING:
    from rag_monitor.agent.observe import QueryObserver
    from rag_monitor.agent.service import Agent


def observe_batch(observer: QueryObserver):
    """The metrics sink's consumer: the query metrics of every record first stored, then late
    feedback and explicit regenerations (the order the request path used to count them in)."""

    def consume(batch: IngestBatch) -> None:
        for record in batch.records:
            observer.observe(record)
        for record, feedback in batch.late:
            observer.observe_feedback(record, feedback)
        for record in batch.regenerated:
            observer.count_regenerated_record(record)

    return consume


def _records(batch: IngestBatch) -> int:
    return len(batch.records)


def build_sinks(agent: Agent) -> FanOut:
    """The sinks the settings enable, each behind its own bounded queue."""
    m, observer = agent.metrics, agent.observer
    records = [
        QueueSink("metrics", observe_batch(observer), m),
        QueueSink("regeneration", lambda b: agent.regeneration.offer(b.records, observer.regeneration_labels), m, size=_records),
        QueueSink("freshness", lambda b: agent.freshness.observe(b.records, observer.labels_of), m, size=_records),
    ]
    if agent.profiles:  # no profile, no feed
        records.append(QueueSink("drift_feed", lambda b: agent.drift_feed.offer(b.records), m, size=_records))
    spans = []
    if agent.forwarder is not None:
        # The tail sampler decides whole traces and hands what it keeps to the forwarder's queue.
        spans.append(QueueSink("forwarder", lambda r: agent.tail_sampler.offer(r.output, r.written, r.spans), m,
                               max_items=agent.settings.forward_queue_spans))
    return FanOut(records, spans)


class LastOutcome:
    """The Phoenix forwarder's health from its outcomes (sent, failed, dropped), seen from outside."""

    def __init__(self):
        self._last = ""
        self._lock = threading.Lock()

    def saw(self, outcome: str) -> None:
        with self._lock:
            self._last = outcome

    def health(self) -> Health:
        if self._last == "failed":
            return Health(DEGRADED, "the last export to Phoenix failed")
        if self._last == "dropped":
            return Health(DEGRADED, "forwarding queue full: dropping")
        return HEALTHY


def store_component(store, jobs) -> Component:
    """Opened when built (every other part is built on it), closed last; failed while unreachable."""

    def health() -> Health:
        try:
            store.ping()
        except StoreUnavailable as exc:
            return Health(FAILED, f"store unavailable: {str(exc)[:200]}")
        return jobs.health("store_pruning", "store_checkpoint")

    return Part("store", stop=store.close, health=health, settings={"dialect": store.dialect})


def agent_components(agent: Agent) -> list[Component]:
    """Every long-lived part, in start order (see the module's docstring)."""
    s, jobs = agent.settings, agent.jobs
    parts: list[Component] = [store_component(agent.store, jobs)]
    if agent.forwarder is not None:
        def flush_and_close() -> None:
            agent.forwarder.flush(5)
            agent.forwarder.shutdown()

        parts.append(Part("forwarder", stop=flush_and_close, health=agent.forward_outcomes.health,
                          settings={"max_queue": s.forward_queue_spans, "interval_s": s.forward_interval_s}))
    if agent.probe_runner is not None:
        parts.append(Part("probes", stop=agent.probe_retriever.close, health=lambda: jobs.health("probes"),
                          settings={"interval_s": s.probes_interval_s, "probes": len(agent.probe_runner.probes)}))
    parts.append(Part("scorer", health=lambda: jobs.health("scoring", "scorer_threshold"),
                      settings={"scorer": agent.scoring.scorer.name, "interval_s": s.score_interval_s}))
    if agent.judging is not None:
        parts.append(Part("judge", health=lambda: jobs.health("judging"), settings={"scorer": agent.judging.scorer.name}))
    if agent.profiles:
        parts.append(Part("drift_feed", health=lambda: jobs.health("drift_feed"),
                          settings={"interval_s": s.drift_feed_interval_s}))
        for p in agent.profiles:
            parts.append(Part(f"drift:{p.name}", health=lambda name=p.name: jobs.health(f"drift:{name}"),
                              settings={"signal": p.signal, "interval_s": p.interval_s}))
    parts += agent.pipeline.sinks.sinks
    parts.append(agent.pipeline)
    parts.append(jobs.component())
    return parts
