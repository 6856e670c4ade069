"""The drift feed and runs: a reference period, non-overlapping windows, a page, a model change, window thinning."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rag_monitor.detectors.feed import DriftFeed, WindowThinning
from rag_monitor.detectors.jobs import run_profile
from rag_monitor.detectors.profiles import DriftProfile
from rag_monitor.record import QueryRecord
from rag_monitor.store import open_store

HOUR = 3600.0


def records(start: int, n: int, model: str, dim: int = 8, intent: str = "billing", shift: float = 0.0,
            t0: float = 0.0, spacing: float = 0.0, documents: int = 0):
    rng = np.random.default_rng(start)
    return [QueryRecord(trace_id=f"{start + i:032x}", root_span_id="1" * 16, start_ns=int((t0 + i * spacing) * 1e9),
                        end_ns=1, query=f"q{i}", intent=intent, embedding_model=model,
                        query_embedding=(rng.normal(size=dim) + shift).tolist(),
                        document_embeddings=[(rng.normal(size=dim) + shift).tolist() for _ in range(documents)])
            for i in range(n)]


def test_count_reference_non_overlapping_windows_and_a_model_change(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    profiles = [DriftProfile("q", "query_embedding", "mmd", reference_size=60, current_size=30, min_current=30,
                             current_max_age_s=None, interval_s=1, reference_days=None, page_threshold=5.0),
                DriftProfile("i", "intent", "chi_square", reference_size=20, current_size=10, min_current=10,
                             current_max_age_s=None, interval_s=1, reference_days=None)]
    resets = []
    now = [100.0]
    feed = DriftFeed(store, profiles, embedder=None, on_reset=lambda signal, model: resets.append((signal, model)),
                     clock=lambda: now[0])
    feed.offer(records(0, 60, "model-a", t0=100.0, spacing=0.01))
    feed.tick()
    reference, ref_ids = store.reservoir_get("query_embedding", "reference")
    assert reference.shape == (60, 8) and ref_ids == [f"{i:032x}" for i in range(60)]  # the first items, then fixed
    assert run_profile(store, profiles[0], holder="t", now=103.0)["reason"].startswith("waiting for a full window: 0/30")
    now[0] = 105.0
    feed.offer(records(100, 30, "model-a", shift=3.0, t0=104.0, spacing=0.01))
    feed.tick()
    assert store.reservoir_get("query_embedding", "reference")[1] == ref_ids
    result = run_profile(store, profiles[0], holder="test", now=1000.0)
    assert result["status"] == "done" and result["is_drift"] and result["p_value"] >= 1 / 301
    assert result["reference"]["mode"] == "count" and result["reference"]["version"] == 1
    assert result["n_current"] == 30 and result["seed"] > 0 and result["decision"]  # threshold 5: one window pages
    over = result["changes"]["over"][0]
    assert over["current"] == 30 and over["examples"][0]["trace_id"] in {f"{100 + i:032x}" for i in range(30)}
    assert run_profile(store, profiles[0], holder="other", now=1000.5) is None  # that slot ran already
    # the same items are never tested twice: the next window waits for new ones
    assert run_profile(store, profiles[0], holder="test", now=1001.0)["status"] == "skipped"
    assert store.reservoir_get("intent", "reference")[0] == ["billing"] * 20

    feed.offer(records(200, 5, "model-b", t0=106.0))
    feed.tick()
    assert resets == [("query_embedding", "model-b")]
    info = store.reservoir_info("query_embedding", "reference")
    assert info.model == "model-b" and info.version == 2 and info.size == 5
    store.close()


def test_period_reference_with_a_daily_cycle_and_document_unit_is_the_query(tmp_path):
    """Reference = first day (hourly topic cycle); later windows at matching hours do not drift."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    # 99 permutations cannot reach the budget's threshold at one test an hour (p <= 1/7200): refused
    with pytest.raises(ValueError, match=r"profile 'd': no test can page: .*at least 7199 permutations"):
        DriftProfile("d", "document_embedding", "mmd", interval_s=HOUR, options={"n_permutations": 99})
    profile = DriftProfile("d", "document_embedding", "mmd", reference_size=2000, current_size=60, min_current=60,
                           current_max_age_s=None, interval_s=HOUR, reference_days=1.0, options={"n_permutations": 99},
                           page_threshold=100)
    now = [0.0]
    feed = DriftFeed(store, [profile], embedder=None, clock=lambda: now[0])

    def hour_of_traffic(hour: int, shift: float = 0.0):
        # the topic depends on the hour of the day: a strong daily cycle
        topic = 4.0 * np.sin(2 * np.pi * (hour % 24) / 24)
        return records(10_000 * (hour + 1), 60, "m", shift=topic + shift, t0=hour * HOUR + 1, spacing=50, documents=3)

    for hour in range(24):
        now[0] = (hour + 1) * HOUR
        feed.offer(hour_of_traffic(hour))
        feed.tick(batch=100)
    reference = store.reservoir_window("document_embedding", "reference")
    assert len(reference.trace_ids) == 24 * 60  # one item per query, not one per document
    unmatched = dataclasses.replace(profile, name="d-unmatched", season="none")
    p_values, unmatched_p_values = [], []
    for hour in range(24, 30):
        now[0] = (hour + 1) * HOUR
        feed.offer(hour_of_traffic(hour))
        feed.tick(batch=100)
        result = run_profile(store, profile, holder="t", now=now[0])
        assert result["status"] == "done", result
        assert result["match_hours"] == 1
        assert result["window_start"] >= hour * HOUR  # non-overlapping: only this hour's queries
        p_values.append(result["p_value"])
        unmatched_p_values.append(run_profile(store, unmatched, holder="t", now=now[0])["p_value"])
    assert min(p_values) > 0.01 and not result["decision"]
    assert max(unmatched_p_values) < 0.05  # without hour matching the daily cycle reads as drift

    # A clear shift pages at its first window: p at the floor 1/100 meets the threshold 100
    assert profile.page_rule().threshold == 100
    results = []
    for hour in range(30, 33):
        now[0] = (hour + 1) * HOUR
        feed.offer(hour_of_traffic(hour, shift=3.0))
        feed.tick(batch=100)
        results.append(run_profile(store, profile, holder="t", now=now[0]))
    assert [r["p_value"] for r in results] == [pytest.approx(1 / 100)] * 3
    assert all(r["decision"] for r in results)
    assert results[0]["log_evidence"] == pytest.approx(math.log(100))
    store.close()


def test_the_window_is_a_uniform_sample_of_each_interval_at_any_traffic():
    """At 20x the window's rate the current window still spans its whole interval, not the last minutes."""
    from rag_monitor.store import ReservoirItem

    thinning = WindowThinning(HOUR, target=125)
    rng = np.random.default_rng(7)
    kept_per_hour, spans = [], []
    for hour in range(6):
        times = np.sort(rng.uniform(hour * HOUR, (hour + 1) * HOUR, size=2500))
        items = [ReservoirItem(f"{rng.integers(2**63):032x}", value="x", added_at=float(t)) for t in times]
        kept = []
        for start in range(0, len(items), 300):  # the feed's ticks hand over batches
            kept += thinning.keep(items[start:start + 300])
        kept_per_hour.append(len(kept))
        spans.append((min(it.added_at for it in kept) - hour * HOUR, (hour + 1) * HOUR - max(it.added_at for it in kept)))
    assert kept_per_hour[0] == 2500  # no previous interval to size it by: everything
    # then Binomial(2500, 125/2500): 125 +- 11; 4.5 sd either side
    assert all(75 <= k <= 175 for k in kept_per_hour[1:]), kept_per_hour
    assert all(head < 300 and tail < 300 for head, tail in spans[1:])  # within 5 minutes of both ends
    # the choice is the trace id's, not the content's or the batch's: the same ids, the same answer
    def kept_ids(content: str, batch: int) -> list[str]:
        thinning = WindowThinning(HOUR, target=125)
        thinning.keep([ReservoirItem(f"{i:032x}", value="x", added_at=5 * HOUR + i) for i in range(2500)])
        probe = [ReservoirItem(f"{i:032x}", value=f"{content}{i}", added_at=6 * HOUR + i) for i in range(2500)]
        return [it.trace_id for start in range(0, 2500, batch) for it in thinning.keep(probe[start:start + batch])]

    assert kept_ids("a", 2500) == kept_ids("b", 97) and 75 <= len(kept_ids("a", 2500)) <= 175
