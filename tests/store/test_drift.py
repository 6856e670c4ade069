from __future__ import annotations

import threading

import numpy as np
import pytest
import sqlalchemy as sa

from rag_monitor.store import ReservoirItem, ReservoirMismatch, Store


def vectors(n: int, dim: int = 8, start: int = 0, model: str = "minilm-v1") -> list[ReservoirItem]:
    # Vector i carries its own index so tests can see which items were kept.
    return [ReservoirItem(f"{i:032x}", np.full(dim, i, dtype=np.float32), model=model) for i in range(start, start + n)]


def test_reference_reservoir_stays_bounded_and_counts_every_offer(store):
    assert store.reservoirs.add("query_embedding", "reference", vectors(30), capacity=50) == 30
    assert store.reservoirs.add("query_embedding", "reference", vectors(70, start=30), capacity=50) <= 70
    array, trace_ids = store.reservoirs.get("query_embedding", "reference")
    info = store.reservoirs.info("query_embedding", "reference")
    assert array.shape == (50, 8) and array.dtype == np.float32 and len(trace_ids) == 50
    assert (info.seen, info.size, info.dim, info.model, info.kind) == (100, 50, 8, "minilm-v1", "vector")
    # Each row is one offered vector, kept intact, with its own trace id.
    assert all(int(trace_id, 16) == row[0] for row, trace_id in zip(array, trace_ids))
    assert len(set(trace_ids)) == 50


def test_a_windows_size_is_counted_once_per_change_and_follows_other_replicas(store_url, store):
    counts: list[str] = []
    sa.event.listen(store._db.engine, "before_cursor_execute",
                    lambda conn, cursor, statement, *rest: counts.append(statement) if "count(" in statement else None)
    other = Store(store_url)  # another replica on the same database
    try:
        store.reservoirs.add("query_embedding", "reference", vectors(30), capacity=50)
        for _ in range(3):  # unchanged: one count, not one per tick
            assert store.reservoirs.info("query_embedding", "reference").size == 30
        assert len(counts) == 1
        other.reservoirs.add("query_embedding", "reference", vectors(10, start=30), capacity=50)
        assert store.reservoirs.info("query_embedding", "reference").size == 40
        other.reservoirs.add("query_embedding", "current", vectors(5), capacity=3)
        assert store.reservoirs.info("query_embedding", "current").size == 3
        other.reservoirs.reset_reference("query_embedding", "minilm-v1")
        assert store.reservoirs.info("query_embedding", "reference").size == 0
        assert len(counts) == 4
    finally:
        other.close()


def test_algorithm_r_keeps_a_uniform_sample(store):
    # 1,000 offers in batches into a 100-slot reservoir: every item has probability 1/10.
    for start in range(0, 1000, 125):
        store.reservoirs.add("intent", "reference", [
            ReservoirItem(f"{i:032x}", value=str(i)) for i in range(start, start + 125)], capacity=100)
    values, _ = store.reservoirs.get("intent", "reference")
    kept = np.array([int(v) for v in values])
    assert len(kept) == 100 and store.reservoirs.info("intent", "reference").seen == 1000
    # Uniform: kept items spread over the whole stream (mean 500, sd of the mean ~28.9);
    # a reservoir that kept only the first or last items would sit near 50 or 950.
    assert 380 < kept.mean() < 620
    assert (kept < 500).sum() > 25 and (kept >= 500).sum() > 25


def test_current_window_keeps_the_newest_n_and_drops_old_items(store):
    store.reservoirs.add("query_embedding", "current", vectors(30), capacity=20, now=100.0)
    store.reservoirs.add("query_embedding", "current", vectors(5, start=30), capacity=20, now=200.0)
    array, trace_ids = store.reservoirs.get("query_embedding", "current")
    assert array[:, 0].tolist() == list(range(15, 35))  # newest 20, oldest first
    store.reservoirs.add("query_embedding", "current", vectors(2, start=35), capacity=20, max_age_s=50, now=240.0)
    array, _ = store.reservoirs.get("query_embedding", "current")
    assert array[:, 0].tolist() == list(range(30, 37))  # those added at 100 s are past the age bound
    recent, _ = store.reservoirs.get("query_embedding", "current", since=230.0)
    assert recent[:, 0].tolist() == [35, 36]


def test_model_change_requires_and_gets_a_new_reference(store):
    store.reservoirs.add("doc_embedding", "reference", vectors(10))
    store.reservoirs.add("doc_embedding", "current", vectors(5))
    with pytest.raises(ReservoirMismatch, match="reset_reference"):
        store.reservoirs.add("doc_embedding", "current", vectors(1, model="minilm-v2"))
    version = store.reservoirs.reset_reference("doc_embedding", "minilm-v2", source="release v7")
    assert version == 2
    for window in ("reference", "current"):
        array, ids = store.reservoirs.get("doc_embedding", window)
        assert len(ids) == 0 and array.shape[0] == 0
    store.reservoirs.add("doc_embedding", "reference", vectors(3, dim=16, model="minilm-v2"))
    info = store.reservoirs.info("doc_embedding", "reference")
    assert (info.version, info.model, info.source, info.seen, info.dim) == (2, "minilm-v2", "release v7", 3, 16)
    with pytest.raises(ReservoirMismatch, match="reset_reference"):
        store.reservoirs.add("doc_embedding", "current", vectors(1, dim=16, model="minilm-v1"))


def test_reservoir_rejects_bad_items(store):
    store.reservoirs.add("q", "reference", vectors(1))
    with pytest.raises(ReservoirMismatch, match="dimensional"):
        store.reservoirs.add("q", "reference", vectors(1, dim=4))
    with pytest.raises(ReservoirMismatch, match="NaN"):
        store.reservoirs.add("q", "reference", [ReservoirItem("a" * 32, [0.0] * 7 + [float("nan")])])
    with pytest.raises(ReservoirMismatch, match="categorical"):
        store.reservoirs.add("q", "reference", [ReservoirItem("a" * 32, value="billing")])
    with pytest.raises(ReservoirMismatch, match="exactly one"):
        store.reservoirs.add("q", "reference", [ReservoirItem("a" * 32)])
    with pytest.raises(ValueError, match="window"):
        store.reservoirs.add("q", "baseline", vectors(1))
    assert store.reservoirs.info("q", "reference").seen == 1  # nothing partial was kept


def test_empty_reservoir(store):
    array, ids = store.reservoirs.get("never", "current")
    assert array.shape == (0, 0) and ids == []
    assert store.reservoirs.info("never", "current") is None


def test_drift_run_is_claimed_once_across_concurrent_claimers(store_url, store):
    # Two replicas (each its own Store) race for the same scheduled run, many times over.
    replicas = [Store(store_url), Store(store_url)]
    wins: list[list[float]] = [[], []]
    try:
        barrier = threading.Barrier(2)

        def replica(k: int) -> None:
            for slot in range(15):
                barrier.wait()
                if replicas[k].drift_runs.claim("daily-query-drift", 3600.0 * slot, f"replica-{k}", lease_s=600, now=0.0):
                    wins[k].append(3600.0 * slot)

        threads = [threading.Thread(target=replica, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for r in replicas:
            r.close()
    assert sorted(wins[0] + wins[1]) == [3600.0 * s for s in range(15)]
    assert set(wins[0]).isdisjoint(wins[1])


def test_interrupted_run_is_reclaimed_after_its_lease(store):
    assert store.drift_runs.claim("p", 100.0, "replica-a", lease_s=60, signal="query_embedding", detector="mmd", now=100.0)
    assert not store.drift_runs.claim("p", 100.0, "replica-b", lease_s=60, now=150.0)
    # replica-a died: its lease lapses and the run is redone, not lost.
    assert store.drift_runs.claim("p", 100.0, "replica-b", lease_s=60, now=161.0)
    assert not store.drift_runs.finish("p", 100.0, "replica-a", result={"p_value": 0.5}, now=170.0)
    assert store.drift_runs.finish("p", 100.0, "replica-b", result={"p_value": 0.01, "drift": True}, now=175.0)
    run = store.drift_runs.get("p", 100.0)
    assert (run.holder, run.attempts, run.status, run.result, run.finished_at) == (
        "replica-b", 2, "ok", {"p_value": 0.01, "drift": True}, 175.0)
    # A finished run is never claimed again, however late.
    assert not store.drift_runs.claim("p", 100.0, "replica-c", now=10_000.0)
    assert [r.scheduled_for for r in store.drift_runs.list("p")] == [100.0]
    with pytest.raises(ValueError, match="status"):
        store.drift_runs.finish("p", 100.0, "replica-b", status="done")
