"""The review sampler: deterministic on the trace id, stratified, with inclusion probabilities."""

from __future__ import annotations

import random

import pytest

from rag_monitor.config_files import shipped_path
from rag_monitor.record import Feedback, QueryRecord
from rag_monitor.review.sampler import Sampler, SamplingConfig, ScoreRate


def record(trace_id: str, **fields) -> QueryRecord:
    return QueryRecord(trace_id=trace_id, root_span_id="1" * 16, start_ns=0, end_ns=1, **fields)


def trace_ids(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def test_the_same_decision_on_every_replica():
    ids = trace_ids(2000)
    a, b = Sampler(SamplingConfig(base_rate=0.1)), Sampler(SamplingConfig(base_rate=0.1))
    assert [a.decide(record(t)) for t in ids] == [b.decide(record(t)) for t in ids]


def test_base_rate_is_honoured_and_a_new_salt_draws_another_sample():
    ids = trace_ids(20_000)
    sampler = Sampler(SamplingConfig(base_rate=0.05))
    chosen = {t for t in ids if sampler.decide(record(t))}
    assert 0.04 < len(chosen) / len(ids) < 0.06
    other = {t for t in ids if Sampler(SamplingConfig(base_rate=0.05, salt="programme-2")).decide(record(t))}
    assert len(chosen & other) < 0.2 * len(chosen)


def test_strata_and_inclusion_probabilities():
    sampler = Sampler(SamplingConfig(base_rate=0.0, thumbs_down_rate=1.0, low_confidence_rate=1.0, refusal_rate=1.0))
    td = sampler.decide(record("a" * 32, feedback=[Feedback("thumbs_down", 5)]))
    assert (td.stratum, td.probability, td.weight) == ("thumbs_down", 1.0, 1.0)
    assert sampler.decide(record("b" * 32, confidence=0.2)).stratum == "low_confidence"
    assert sampler.decide(record("c" * 32, confidence=0.9)) is None
    assert sampler.decide(record("d" * 32, refused=True)).stratum == "refusal"
    assert sampler.decide(record("e" * 32), thumbs_down=True).stratum == "thumbs_down"


def test_a_query_takes_its_highest_rate_stratum_and_weight():
    sampler = Sampler(SamplingConfig(base_rate=1.0, refusal_rate=0.5))
    decision = sampler.decide(record("f" * 32, refused=True))
    assert (decision.stratum, decision.probability) == ("base", 1.0)
    sampler = Sampler(SamplingConfig(base_rate=0.01, low_confidence_rate=0.25))
    picked = [d for t in trace_ids(4000) if (d := sampler.decide(record(t, confidence=0.1)))]
    assert all(d.stratum == "low_confidence" and d.weight == 4.0 for d in picked)
    assert 0.2 < len(picked) / 4000 < 0.3


def test_shadow_pairs_are_sampled_together_with_their_production_query():
    sampler = Sampler(SamplingConfig(base_rate=0.0, shadow_pair_rate=0.3))
    for production in trace_ids(300):
        shadow = sampler.decide(record(trace_ids(1, seed=hash(production) % 1000)[0], shadow_of=production))
        if shadow is not None:
            assert shadow.pair_trace_id == production and sampler.uniform(production) < 0.3


def test_bad_rates_are_refused_with_the_value():
    with pytest.raises(ValueError, match="base_rate.*1.5"):
        SamplingConfig(base_rate=1.5)


def test_sampling_yaml_unknown_key(tmp_path):
    (tmp_path / "s.yaml").write_text("base_rate: 0.02\nbase_rat: 0.5\n")
    with pytest.raises(ValueError, match="base_rat"):
        SamplingConfig.load(tmp_path / "s.yaml")
    assert SamplingConfig.load(shipped_path("sampling_config")).base_rate == 0.01


# --- the single-draw design ---------------------------------------------------------------------


def test_a_shadow_query_is_included_with_exactly_its_highest_rate():
    # A low-confidence shadow answer is in two strata (0.2 and 0.05): one draw, probability 0.2.
    sampler = Sampler(SamplingConfig(base_rate=0.0, low_confidence_rate=0.2, shadow_pair_rate=0.05))
    ids = trace_ids(20_000, seed=3)
    decisions = [sampler.decide(record(t, shadow_of=p, confidence=0.1)) for t, p in zip(ids, ids[1:] + ids[:1])]
    chosen = [d for d in decisions if d is not None]
    assert {(d.stratum, d.probability) for d in chosen} == {("low_confidence", 0.2)}
    assert abs(len(chosen) / len(ids) - 0.2) < 4 * (0.2 * 0.8 / len(ids)) ** 0.5


def population(n: int, seed: int = 11):
    """(trace id, unsupported, complains, complaint timing) with complaints correlated with unsupported."""
    rng = random.Random(seed)
    rows = []
    for t in trace_ids(n, seed):
        unsupported = rng.random() < 0.1
        complains = rng.random() < (0.5 if unsupported else 0.02)
        timing = rng.choice(["with_trace", "late", "after_cache"]) if complains else None
        rows.append((t, unsupported, complains, timing))
    return rows


def design_weights(sampler: Sampler, trace_id: str, timing: str | None) -> tuple[float, float, float]:
    """(stored weight, counted weight, the old code's weight) of a trace, 0 when not sampled."""
    first = sampler.decide(record(trace_id), thumbs_down=timing == "with_trace")
    stored = counted = stale = 1 / first.probability if first else 0.0
    if timing == "late":  # a complaint while the query is in the recent-records cache
        later = sampler.decide(record(trace_id), thumbs_down=True)
        if later is not None:
            stored = 1 / later.probability  # the item is updated in place (or pulled in, counted 0)
            stale = stale or 1 / later.probability  # before: a queued item kept its first weight
    return stored, counted, stale


def test_horvitz_thompson_estimates_stay_unbiased_when_complaints_arrive_later():
    rows = population(2000)
    truth = sum(unsupported for _, unsupported, _, _ in rows)
    stored_estimates, counted_estimates, stale_estimates = [], [], []
    for rep in range(200):  # a new salt is an independent draw of the same traffic
        sampler = Sampler(SamplingConfig(base_rate=0.05, thumbs_down_rate=1.0, salt=f"rep-{rep}"))
        stored = counted = stale = 0.0
        for trace_id, unsupported, _, timing in rows:
            w_stored, w_counted, w_stale = design_weights(sampler, trace_id, timing)
            stored += unsupported * w_stored
            counted += unsupported * w_counted
            stale += unsupported * w_stale
        stored_estimates.append(stored)
        counted_estimates.append(counted)
        stale_estimates.append(stale)

    def mean_and_se(values):
        m = sum(values) / len(values)
        var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
        return m, (var / len(values)) ** 0.5

    for estimates in (stored_estimates, counted_estimates):
        m, se = mean_and_se(estimates)
        assert abs(m - truth) < 4 * se, (m, truth, se)
    m, se = mean_and_se(stale_estimates)
    assert m - truth > 4 * se, "the old weights must show their bias (complaints over-weighted)"


def test_the_review_sample_is_a_subsample_of_the_scored_one():
    sampler = Sampler(SamplingConfig(base_rate=0.05, refusal_rate=0.5, score_rate=0.2))
    ids = trace_ids(5000, seed=3)
    records = [record(t) for t in ids[:4000]] + [record(t, refused=True) for t in ids[4000:]]
    scored = reviewed = 0
    for r in records:
        decision = sampler.decide(r)
        p = sampler.score_probability(r, decision, 0.2)
        if decision is not None:
            assert p == max(0.2, decision.probability)  # reviewed implies scored, with both probabilities
            reviewed += 1
        if p is not None:
            assert sampler.uniform(r.trace_id) < p
            scored += 1
        else:
            assert sampler.uniform(r.trace_id) >= max(0.2, sampler.stratum(r)[1])
    assert 4000 * 0.2 + 1000 * 0.5 - 150 < scored < 4000 * 0.2 + 1000 * 0.5 + 150
    assert reviewed < scored


def test_the_scoring_rate_is_lowered_to_the_budget():
    now = [0.0]
    rate = ScoreRate(SamplingConfig(score_rate=0.1, score_budget=5.0), window_s=60.0, clock=lambda: now[0])
    assert rate.observe(10) == 0.1  # 10 queries a minute: far under budget
    for _ in range(60):
        now[0] += 1.0
        p = rate.observe(100)  # about 100 queries/s: 10 pairs/s at 10%, twice the budget
    assert p == pytest.approx(5.0 / 100, rel=0.05)
    assert ScoreRate(SamplingConfig(score_rate=0.1, score_budget=0)).observe(10**6) == 0.1  # no bound
    with pytest.raises(ValueError, match="score_budget"):
        SamplingConfig(score_budget=-1)
