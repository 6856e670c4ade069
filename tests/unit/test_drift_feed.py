"""The drift feed and runs: a reference period, non-overlapping windows, a page, a model change, windows that cover the interval."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from rag_monitor.agent.drift.feed import DriftFeed
from rag_monitor.agent.drift.runs import run_profile
from rag_monitor.detectors.profiles import DriftProfile
from rag_monitor.record import Document, QueryRecord
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
    feed = DriftFeed(store.reservoirs, profiles, embedder=None, on_reset=lambda signal, model: resets.append((signal, model)),
                     clock=lambda: now[0])
    feed.offer(records(0, 60, "model-a", t0=100.0, spacing=0.01))
    feed.tick()
    reference, ref_ids = store.reservoirs.get("query_embedding", "reference")
    assert reference.shape == (60, 8) and ref_ids == [f"{i:032x}" for i in range(60)]  # the first items, then fixed
    assert run_profile(store, profiles[0], holder="t", now=103.0)["reason"].startswith("waiting for a full window: 0/30")
    now[0] = 105.0
    feed.offer(records(100, 30, "model-a", shift=3.0, t0=104.0, spacing=0.01))
    feed.tick()
    assert store.reservoirs.get("query_embedding", "reference")[1] == ref_ids
    result = run_profile(store, profiles[0], holder="test", now=1000.0)
    assert result["status"] == "done" and result["is_drift"] and result["p_value"] >= 1 / 301
    assert result["reference"]["mode"] == "count" and result["reference"]["version"] == 1
    assert result["n_current"] == 30 and result["seed"] > 0 and result["decision"]  # threshold 5: one window pages
    over = result["changes"]["over"][0]
    assert over["current"] == 30 and over["examples"][0]["trace_id"] in {f"{100 + i:032x}" for i in range(30)}
    assert run_profile(store, profiles[0], holder="other", now=1000.5) is None  # that slot ran already
    # the same items are never tested twice: the next window waits for new ones
    assert run_profile(store, profiles[0], holder="test", now=1001.0)["status"] == "skipped"
    assert store.reservoirs.get("intent", "reference")[0] == ["billing"] * 20

    feed.offer(records(200, 5, "model-b", t0=106.0))
    now[0] = 107.0  # the slot is over: its window is written, with the new model's vectors
    feed.tick()
    assert resets == [("query_embedding", "model-b")]
    info = store.reservoirs.info("query_embedding", "reference")
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
    feed = DriftFeed(store.reservoirs, [profile], embedder=None, clock=lambda: now[0])

    def hour_of_traffic(hour: int, shift: float = 0.0):
        # the topic depends on the hour of the day: a strong daily cycle
        topic = 4.0 * np.sin(2 * np.pi * (hour % 24) / 24)
        return records(10_000 * (hour + 1), 60, "m", shift=topic + shift, t0=hour * HOUR + 1, spacing=50, documents=3)

    for hour in range(24):
        now[0] = (hour + 1) * HOUR
        feed.offer(hour_of_traffic(hour))
        feed.tick(batch=100)
    reference = store.reservoirs.window("document_embedding", "reference")
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


def daily_traffic(rng, day: int, per_day: int):
    """A day of queries without vectors: the rate peaks at 14:00 UTC (x 4 the quietest hour), the topic follows the hour."""
    hours = np.arange(24)
    rate = 1 + 0.6 * np.cos(2 * np.pi * (hours - 14) / 24)
    counts = rng.multinomial(per_day, rate / rate.sum())
    times = np.sort(np.concatenate([day * DAY + h * HOUR + rng.uniform(0, HOUR, size=c) for h, c in zip(hours, counts)]))
    return [QueryRecord(trace_id=f"{rng.integers(2**63):016x}{k:016x}", root_span_id="1" * 16, start_ns=int(t * 1e9),
                        end_ns=1, query=f"topic {int(t // HOUR) % 24}") for k, t in enumerate(times)], rate / rate.sum()


DAY = 24 * HOUR


def test_windows_cover_the_interval_at_a_rate_the_feed_cannot_embed_in_full(tmp_path):
    """10,000 queries a day, none with vectors; the feed embeds only what its windows hold.

    The tested window spans the whole day and has the traffic's hour-of-day mix, the reference
    is uniform over its day (peak hours included), and every query is counted as sampled or skipped.
    """
    from scipy.stats import chisquare

    from rag_monitor.detectors.references import hour_of_season

    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    profile = DriftProfile("q", "query_embedding", "mmd", reference_size=400, current_size=300, min_current=300,
                           current_max_age_s=None, interval_s=DAY, reference_days=1.0)
    embedded = []

    def embedder(texts):  # the topic of the hour: a point on a circle
        embedded.append(len(texts))
        angle = np.array([2 * np.pi * int(t.split()[1]) / 24 for t in texts])
        return np.stack([np.cos(angle), np.sin(angle)], axis=1)

    counted = {"sampled": {}, "skipped": {}}

    def count(kind):
        return lambda signal, window, n: counted[kind].__setitem__(window, counted[kind].get(window, 0) + n)

    now = [0.0]
    feed = DriftFeed(store.reservoirs, [profile], embedder=embedder, embedding_model="m", on_sampled=count("sampled"),
                     on_skipped=count("skipped"), clock=lambda: now[0], seed=1)
    rng = np.random.default_rng(3)
    per_day, mixes, times, results = 10_000, [], [], []
    for day in range(3):
        queries, mix = daily_traffic(rng, day, per_day)
        mixes.append(mix)
        times += [q.start_ns / 1e9 for q in queries]
        for start in range(0, len(queries), 500):  # as the ingest pipeline hands them over, a tick now and then
            batch = queries[start:start + 500]
            feed.offer(batch)
            now[0] = batch[-1].start_ns / 1e9
            feed.tick()
        now[0] = (day + 1) * DAY
        feed.tick()
        if day:  # the day's run, just after its slot ends
            results.append(run_profile(store, profile, holder="t", now=now[0] + 60))
    offered = 3 * per_day
    # the embedder's work: the windows (300 a day) and Algorithm R's picks over the reference day
    # (about 400 x (1 + ln 25)), not the 30,000 queries
    assert sum(embedded) < 3 * 300 + 400 * (2 + math.log(per_day / 400)) < offered / 8
    assert counted["sampled"]["current"] == 3 * 300
    assert counted["sampled"]["current"] + counted["skipped"]["current"] == offered
    in_period = sum(1 for t in times if t < times[0] + DAY)  # the reference: a day from its first query
    assert counted["sampled"]["reference"] + counted["skipped"]["reference"] == in_period

    reference = store.reservoirs.window("query_embedding", "reference")
    assert len(reference.trace_ids) == 400 and reference.times.max() < DAY
    ref_hours = np.bincount(hour_of_season(reference.times, "day"), minlength=24)
    assert chisquare(ref_hours, 400 * mixes[0]).pvalue > 1e-3  # uniform over the day's traffic, peak hours included

    assert [r["status"] for r in results] == ["done", "done"] and results[1]["n_current"] == 300, results
    result = results[1]
    window = store.reservoirs.window("query_embedding", "current", after=results[0]["window_end"])  # what it tested
    # it spans the whole interval, not its last seconds
    assert result["window_start"] < 2 * DAY + HOUR and result["window_end"] > 3 * DAY - HOUR
    hours = np.bincount(hour_of_season(window.times, "day"), minlength=24)
    assert hours.sum() == 300 and chisquare(hours, 300 * mixes[2]).pvalue > 1e-3  # the traffic's hour-of-day mix
    assert not result["decision"]  # the same daily cycle as the reference: no page
    store.close()


def test_replicas_reservoirs_hold_the_slots_sample():
    """Each replica keeps its share's smallest hashes; together they hold the slot's overall smallest ones."""
    from rag_monitor.detectors.sampling import IntervalReservoir, smallest_hashes

    ids = [f"{i:032x}" for i in range(3000)]
    replicas = [IntervalReservoir(HOUR, 100) for _ in range(3)]
    for i, trace_id in enumerate(ids):
        replicas[i % 3].offer(float(i), trace_id, trace_id)
    union = [trace_id for r in replicas for sample, arrivals in r.release(HOUR) for trace_id in sample]
    assert len(union) == 300 and sorted(ids[i] for i in smallest_hashes(ids, 100)) == sorted(union[i] for i in smallest_hashes(union, 100))
    replicas[0].offer(10.0, "late", "late")  # its slot was released: counted late, not sampled
    assert replicas[0].late == 1 and replicas[0].release(2 * HOUR) == []


def test_each_distinct_text_is_embedded_once_and_items_are_unchanged(tmp_path):
    """Popular chunks repeat across queries and ticks: each distinct text goes to the embedder once,
    and the items (the query's vector; the mean of its documents') are those of embedding every text."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    profiles = [DriftProfile(name, signal, "mmd", reference_size=100, current_size=50, min_current=10,
                             current_max_age_s=None, interval_s=1, reference_days=None, page_threshold=5.0)
                for name, signal in (("q", "query_embedding"), ("d", "document_embedding"))]
    sent = []

    def embedder(texts):  # a text's vector depends on the text alone
        sent.extend(texts)
        return np.array([[len(t), sum(map(ord, t)) % 97, 1.0] for t in texts], dtype=np.float32)

    feed = DriftFeed(store.reservoirs, profiles, embedder=embedder, embedding_model="m", clock=lambda: 10.0)
    docs = [f"chunk {k} " * 20 for k in range(4)]

    def query(i: int) -> QueryRecord:
        return QueryRecord(trace_id=f"{i:032x}", root_span_id="1" * 16, start_ns=int(1e9), end_ns=1,
                           query=f"question {i % 3}", delivered=[Document(f"d{k}", content=docs[(i + k) % 4]) for k in range(3)])

    feed.offer([query(i) for i in range(6)])
    feed.tick()
    feed.offer([query(i) for i in range(6, 12)])
    feed.tick()
    assert sorted(sent) == sorted({f"question {i}" for i in range(3)} | set(docs))  # each once, over two ticks
    vectors, ids = store.reservoirs.get("document_embedding", "reference")
    for trace_id, vector in zip(ids, vectors):
        i = int(trace_id, 16)
        expected = np.asarray(embedder([docs[(i + k) % 4] for k in range(3)]), dtype=np.float64).mean(axis=0)
        assert np.allclose(vector, expected / np.linalg.norm(expected), atol=1e-6)
    assert len(ids) == 12
    store.close()


def test_a_full_embedding_cache_is_cleared_without_losing_the_batchs_cached_texts(tmp_path, monkeypatch):
    from rag_monitor.agent.drift import embedder as embedder_module

    monkeypatch.setattr(embedder_module, "EMBEDDING_CACHE_ENTRIES", 3)
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    feed = DriftFeed(store.reservoirs, [], embedder=lambda texts: np.array([[len(t), 1.0] for t in texts]))
    feed._embed(["a", "bb"])
    vectors = feed._embed(["a", "ccc", "dddd"])  # "a" cached, two new: the cache is full and cleared
    assert [float(v[0]) for v in vectors] == [1.0, 3.0, 4.0]
    store.close()


def test_a_slot_waits_lateness_s_for_the_queries_that_reach_the_feed_after_it_is_over(tmp_path):
    """A query reaches the feed after it ended and was exported and assembled: seconds after its start,
    more on a busy machine. Its slot is written ``lateness_s`` after it is over, so such a query is
    tested in its own slot; one later still is counted skipped."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    profile = DriftProfile("q", "query_embedding", "mmd", reference_size=5, current_size=50, min_current=10,
                           current_max_age_s=None, interval_s=3, reference_days=None, page_threshold=5.0)
    counted = {}
    now = [100.0]
    feed = DriftFeed(store.reservoirs, [profile], embedder=None, clock=lambda: now[0], lateness_s=5.0,
                     on_sampled=lambda signal, window, n: counted.__setitem__(("sampled", window), n),
                     on_skipped=lambda signal, window, n: counted.__setitem__(("skipped", window), n))
    feed.offer(records(0, 5, "m", t0=100.0))  # the reference
    feed.offer(records(10, 4, "m", t0=102.0, spacing=0.2))  # slot [102, 105)
    now[0] = 106.0  # the slot is over; its last queries are still on their way
    feed.tick()
    assert store.reservoirs.window("query_embedding", "current").trace_ids == []
    feed.offer(records(20, 3, "m", t0=104.5, spacing=0.1))  # late, within lateness_s
    now[0] = 110.0
    feed.tick()
    assert len(store.reservoirs.window("query_embedding", "current").trace_ids) == 7
    assert counted[("sampled", "current")] == 7 and ("skipped", "current") not in counted
    feed.offer(records(30, 2, "m", t0=104.9))  # later than lateness_s: its slot was written
    feed.tick()
    assert counted[("skipped", "current")] == 2
    store.close()
