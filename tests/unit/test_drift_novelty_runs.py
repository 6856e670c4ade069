"""The novelty profile through the feed and the scheduled runs: every 6 hours a uniform sample of
the trailing day (overlapping windows, the traffic's full daily cycle), no page on the same daily
cycle as the reference, a page within a day of a new topic, and the daily MMD profile on the same
signal still tests whole days."""

from __future__ import annotations

import numpy as np

from rag_monitor.agent.drift.feed import DriftFeed
from rag_monitor.agent.drift.runs import run_profile
from rag_monitor.detectors.profiles import DriftProfile
from rag_monitor.record import QueryRecord
from rag_monitor.store import open_store

HOUR, DAY = 3600.0, 86400.0
PER_DAY = 4000


def day_of_traffic(rng, day: int, new_share: float = 0.0) -> list[QueryRecord]:
    """A day of queries without vectors: the rate peaks at 14:00 UTC, the topic follows the hour."""
    hours = np.arange(24)
    rate = 1 + 0.6 * np.cos(2 * np.pi * (hours - 14) / 24)
    counts = rng.multinomial(PER_DAY, rate / rate.sum())
    times = np.sort(np.concatenate([day * DAY + h * HOUR + rng.uniform(0, HOUR, size=c) for h, c in zip(hours, counts)]))
    return [QueryRecord(trace_id=f"{rng.integers(2**63):016x}{k:016x}", root_span_id="1" * 16, start_ns=int(t * 1e9),
                        end_ns=1, query="new topic" if rng.random() < new_share else f"topic {int(t // HOUR) % 24}")
            for k, t in enumerate(times)]


def embedder(texts):
    """Known topics on a circle, the new one off it."""
    out = np.zeros((len(texts), 3))
    for i, text in enumerate(texts):
        if text == "new topic":
            out[i, 2] = 1.0
        else:
            angle = 2 * np.pi * int(text.split()[1]) / 24
            out[i, :2] = np.cos(angle), np.sin(angle)
    return out


def test_novelty_tests_the_trailing_day_every_six_hours_and_pages_a_new_topic_within_a_day(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    common = dict(reference_size=400, current_size=300, min_current=300, current_max_age_s=None, reference_days=1.0)
    daily_mmd = DriftProfile("q-mmd", "query_embedding", "mmd", interval_s=DAY, **common)
    novelty = DriftProfile("q-novelty", "query_embedding", "novelty", interval_s=6 * HOUR, window_s=DAY, season="none",
                           reference_ratio=400 / 300, options={"fit_size": 200, "calibration_size": 200,
                                                               "neighbours": 3, "quantile": 0.02}, **common)
    assert novelty.page_rule().threshold == 1200  # four tests a day
    now = [0.0]
    feed = DriftFeed(store.reservoirs, [daily_mmd, novelty], embedder=embedder, embedding_model="m", clock=lambda: now[0], seed=1)
    rng = np.random.default_rng(5)
    runs, mmd_runs = [], []
    for day in range(4):
        queries = day_of_traffic(rng, day, new_share=0.2 if day == 3 else 0.0)
        for quarter in range(4):
            end = day * DAY + (quarter + 1) * 6 * HOUR
            feed.offer([q for q in queries if end - 6 * HOUR <= q.start_ns / 1e9 < end])
            now[0] = end
            feed.tick()
            runs.append(run_profile(store, novelty, holder="t", now=end + 60))
        mmd_runs.append(run_profile(store, daily_mmd, holder="t", now=(day + 1) * DAY + 60))

    # the reference is the day from the first query (seconds after midnight): the first trailing day
    # after it ends 6 hours into day 2
    assert all(r["status"] == "skipped" and "reference still being captured" in r["reason"] for r in runs[:3])
    assert all(r["status"] == "skipped" and "waiting for a full window" in r["reason"] for r in runs[3:8]), runs[3:8]
    tested = runs[8:]
    assert all(r["status"] == "done" and r["n_current"] == 300 for r in tested), tested
    for r, slot_end in zip(tested, 2 * DAY + 6 * HOUR * np.arange(1, len(tested) + 1)):
        # a sample of the whole trailing day before the slot, not of its last 6 hours
        assert slot_end - DAY <= r["window_start"] < slot_end - DAY + HOUR and slot_end - HOUR < r["window_end"] < slot_end
    assert all(later["window_start"] < earlier["window_end"] for earlier, later in zip(tested, tested[1:]))  # overlapping
    null, shifted = tested[:4], tested[4:]  # windows ending by day 3's start hold no new topic
    assert not any(r["decision"] for r in null), [r["p_value"] for r in null]
    paged = [r["decision"] for r in shifted]
    assert any(paged), [r["p_value"] for r in shifted]  # within the day after the topic starts
    first = shifted[paged.index(True)]
    assert first["metadata"]["novel_count"] > first["metadata"]["expected_count"] and first["p_value"] <= 1 / 1200
    assert first["changes"]["over"][0]["current"] > 0  # the report names the new cluster

    # the daily MMD test on the same signal still gets a whole day's sample (the store keeps every slot)
    day_two = mmd_runs[2]
    assert day_two["status"] == "done" and day_two["n_current"] == 300
    assert day_two["window_start"] < 2 * DAY + HOUR and day_two["window_end"] > 3 * DAY - HOUR
    store.close()
