"""The drift feed: a fixed reference, a rolling current window, a new reference on a model change."""

from __future__ import annotations

import numpy as np

from rag_monitor.detectors.feed import DriftFeed
from rag_monitor.detectors.jobs import run_profile
from rag_monitor.detectors.profiles import DriftProfile
from rag_monitor.record import QueryRecord
from rag_monitor.store import open_store


def records(start: int, n: int, model: str, dim: int = 8, intent: str = "billing", shift: float = 0.0):
    rng = np.random.default_rng(start)
    return [QueryRecord(trace_id=f"{start + i:032x}", root_span_id="1" * 16, start_ns=0, end_ns=1, query=f"q{i}",
                        intent=intent, embedding_model=model,
                        query_embedding=(rng.normal(size=dim) + shift).tolist()) for i in range(n)]


def test_reference_is_captured_once_current_rolls_and_a_model_change_resets(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    profiles = [DriftProfile("q", "query_embedding", "mmd", reference_size=20, current_size=10, min_current=10,
                             current_max_age_s=None, interval_s=1),
                DriftProfile("i", "intent", "chi_square", reference_size=20, current_size=10, min_current=10,
                             current_max_age_s=None, interval_s=1)]
    resets = []
    feed = DriftFeed(store, profiles, embedder=None, on_reset=lambda signal, model: resets.append((signal, model)))
    feed.offer(records(0, 30, "model-a"))
    feed.tick()
    reference, ref_ids = store.reservoir_get("query_embedding", "reference")
    current, cur_ids = store.reservoir_get("query_embedding", "current")
    assert reference.shape == (20, 8) and len(current) == 10
    assert ref_ids == [f"{i:032x}" for i in range(20)]  # the first items, then fixed
    feed.offer(records(100, 10, "model-a", shift=3.0))
    feed.tick()
    assert store.reservoir_get("query_embedding", "reference")[1] == ref_ids
    result = run_profile(store, profiles[0], holder="test", now=1000.0)
    assert result["status"] == "done" and result["is_drift"] and len(result["most_shifted"]) == 10
    assert run_profile(store, profiles[0], holder="other", now=1000.5) is None  # that slot ran already
    assert store.reservoir_get("intent", "reference")[0] == ["billing"] * 20

    feed.offer(records(200, 5, "model-b"))
    feed.tick()
    assert resets == [("query_embedding", "model-b")]
    info = store.reservoir_info("query_embedding", "reference")
    assert info.model == "model-b" and info.version == 2 and info.size == 5
    store.close()
