"""The review sampler: deterministic on the trace id, stratified, with inclusion probabilities."""

from __future__ import annotations

import random

import pytest

from rag_monitor.record import Feedback, QueryRecord
from rag_monitor.review.sampler import Sampler, SamplingConfig


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
    assert SamplingConfig.load("detectors/sampling.yaml").base_rate == 0.01
