"""The agent's runtime: one scheduler for every job (leases, metrics), no I/O before start,
scrape statistics that read only new reviews."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.agent.jobs import Job, JobScheduler
from rag_monitor.agent.scrape import ReviewStatsCollector
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.record import FilterApplied, QueryRecord
from rag_monitor.review.stats import false_exclusion_stats
from rag_monitor.settings import load_settings
from rag_monitor.store import open_store
from tests.services import free_port, wait_until


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield s
    s.close()


def sample(registry, name, job):
    return registry.get_sample_value(name, {"job": job})


def test_a_job_records_its_last_success_and_duration_and_failures_do_not_stop_it():
    registry = CollectorRegistry()
    scheduler = JobScheduler(AgentMetrics(registry))
    runs = []
    scheduler.add(Job("tick", lambda: runs.append(time.time()), interval_s=0.05))
    scheduler.add(Job("broken", lambda: 1 / 0, interval_s=0.05))
    before = time.time()
    scheduler.start()
    try:
        wait_until(lambda: len(runs) >= 3 and (sample(registry, "rag_agent_job_failures_total", "broken") or 0) >= 3,
                   timeout=20, what="both jobs to run three times")
    finally:
        scheduler.shutdown()
    assert sample(registry, "rag_agent_job_last_success_timestamp_seconds", "tick") >= before
    assert sample(registry, "rag_agent_job_duration_seconds_count", "tick") >= 3
    assert sample(registry, "rag_agent_job_last_success_timestamp_seconds", "broken") is None  # never succeeded
    with pytest.raises(ValueError, match="twice"):
        scheduler.add(Job("tick", lambda: None, interval_s=1))


def test_a_leased_job_runs_on_one_replica_until_its_lease_lapses(store):
    registry = CollectorRegistry()
    ran = {"a": 0, "b": 0}
    replicas = {}
    for name in ran:
        replicas[name] = JobScheduler(AgentMetrics(registry if name == "a" else CollectorRegistry()),
                                      try_lock=store.locks.try_lock, holder=name)
        replicas[name].add(Job("prune", lambda name=name: ran.__setitem__(name, ran[name] + 1), 1.0, lease_s=0.5))
    assert replicas["a"].run("prune") and not replicas["b"].run("prune")
    assert replicas["a"].run("prune")  # the holder renews its lease
    time.sleep(0.6)
    assert replicas["b"].run("prune") and not replicas["a"].run("prune")  # taken over once it lapsed
    assert ran == {"a": 2, "b": 1}
    with pytest.raises(ValueError, match="no store"):
        JobScheduler(AgentMetrics(CollectorRegistry())).add(Job("x", lambda: None, 1.0, lease_s=5))


def test_a_slow_run_makes_the_next_ticks_no_ops_not_a_pile_up():
    scheduler = JobScheduler(AgentMetrics(CollectorRegistry()))
    running, overlaps = [0], [0]

    def slow():
        running[0] += 1
        overlaps[0] = max(overlaps[0], running[0])
        time.sleep(0.3)
        running[0] -= 1

    scheduler.add(Job("slow", slow, interval_s=0.02))
    scheduler.start()
    time.sleep(1.0)
    scheduler.shutdown()
    assert overlaps[0] == 1


def test_the_constructor_does_no_io_and_start_opens_in_order(tmp_path):
    from rag_monitor.agent.service import Agent

    data_dir = tmp_path / "data"
    agent = Agent(load_settings(overrides={
        "data_dir": str(data_dir), "otlp_port": free_port(), "http_port": free_port(),
        "detector_profiles": "", "hhem_model_path": "", "prune_interval_s": 0.2}, environ={}))
    assert not data_dir.exists() and agent.store is None and not agent.ready()
    agent.start()
    try:
        assert (data_dir / "rag-monitor.db").exists() and agent.ready()
        assert {"expiry", "store_pruning", "scoring", "scrape_cache", "store_checkpoint"} <= set(agent.jobs.jobs)
        wait_until(lambda: agent.registry.get_sample_value(
            "rag_agent_job_last_success_timestamp_seconds", {"job": "store_pruning"}), timeout=20, what="a pruning run")
    finally:
        agent.stop()
    assert not agent.ready()  # closed: stop flushed and closed the store
    agent.stop()  # idempotent


def reviewed(store, i: int, release: str, excluded: bool, at: float, prob: float = 0.5):
    record = QueryRecord(trace_id=f"{i:032x}", root_span_id=f"{i:016x}", start_ns=i, end_ns=i + 1, release=release,
                         filters=[FilterApplied("relevance", excluded_ids=["d1"] if excluded else [])])
    store.queue.enqueue(record, stratum="base", inclusion_prob=prob, now=at)
    item = store.review.claim("rev", lease_s=60, now=at)
    store.review.submit_review(item.id, "rev", {"relevant_documents": ["d1"]}, now=at)


def test_review_statistics_read_only_new_reviews_and_match_a_full_recount(store):
    start = 300 * 3600.0  # on the hour: the window's edge falls between hourly aggregates
    now = [start]
    stats = ReviewStatsCollector(store, window_s=10 * 3600, clock=lambda: now[0])
    for i in range(6):
        reviewed(store, i, release="r1" if i % 2 else "r2", excluded=i % 3 == 0, at=start - 3600 * (5 - i) + 10)
    assert stats.stats() == false_exclusion_stats(store.queue.reviewed())
    assert stats.rows_read == 6
    for i in range(6, 9):
        reviewed(store, i, release="r1", excluded=True, at=now[0] + i)
    now[0] += 60
    stats.refresh()
    assert stats.rows_read == 9  # the three new reviews, not the whole window again
    assert stats.stats() == false_exclusion_stats(store.queue.reviewed())
    # Hours older than the window fall off: the window now starts at start - 4 h + 60 s, inside the
    # hour of review 1, which still counts (to the hour); review 0's hour is gone.
    now[0] += 6 * 3600
    stats.refresh()
    assert stats.stats() == false_exclusion_stats(store.queue.reviewed(since=start - 4 * 3600))
    assert stats.stats() != false_exclusion_stats(store.queue.reviewed())
    assert stats.rows_read == 9
