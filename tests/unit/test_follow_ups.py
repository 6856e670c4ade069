"""Follow-ups: the shipped patterns in several languages, the stratum, and weights that keep the
review sample's estimates unbiased when follow-ups (detected or marked) are over-sampled."""

from __future__ import annotations

import csv
import random
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_monitor.agent.follow_ups import _APOSTROPHES, FollowUpMatcher, normalise
from rag_monitor.config_files import config_path
from rag_monitor.record import Feedback
from rag_monitor.review.sampler import Sampler, SamplingConfig
from tests.unit.test_sampler import record, trace_ids


@pytest.fixture(scope="module")
def shipped() -> SamplingConfig:
    return SamplingConfig.load(config_path("sampling_config", "default"))


@pytest.mark.parametrize("text", [
    "Are you sure?", "ARE YOU SURE about that", "But what about roaming?", "That’s wrong.", "that's not right",
    "Is that correct?", "¿Estás seguro?", "Pero qué pasa con el IVA", "Eso está mal", "Êtes-vous sûr ?",
    "Mais qu'en est-il du remboursement ?", "C’est faux", "Bist du dir sicher?", "Aber was ist mit Roaming?",
    "Das stimmt nicht", "Você tem certeza?", "Isso está errado", "Sei sicuro?", "È sbagliato",
    "Weet je het zeker?", "Dat klopt niet",
])
def test_shipped_patterns_find_doubt_in_several_languages(shipped, text):
    assert FollowUpMatcher(shipped.follow_up_patterns, shipped.follow_up_window_s).matches(text)


@pytest.mark.parametrize("text", [
    "How do I cancel my plan?", "What is the refund policy?", "I am sure I paid twice", "what about my invoice",
    "Wie kündige ich meinen Vertrag?", "¿Cómo cambio mi dirección?", "Comment annuler mon abonnement ?",
])
def test_ordinary_questions_are_not_follow_ups(shipped, text):
    assert not FollowUpMatcher(shipped.follow_up_patterns, shipped.follow_up_window_s).matches(text)


def test_matching_folds_case_accents_and_apostrophes_and_keeps_to_the_window():
    assert normalise("ÊTES-VOUS SÛR ? C’est") == "etes-vous sur ? c'est"
    matcher = FollowUpMatcher([r"\bare you sure\b"], window_s=60)
    assert matcher.follows_up("Are you sure?", gap_ns=59 * 10**9)
    assert not matcher.follows_up("Are you sure?", gap_ns=61 * 10**9)
    assert not matcher.follows_up("Are you sure?", gap_ns=0)  # the same query resent, not a new one
    assert not FollowUpMatcher([], window_s=60).enabled


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_text_normalises_as_the_full_unicode_path_does(text):
    full = "".join(c for c in unicodedata.normalize("NFKD", text.casefold().translate(_APOSTROPHES)) if not unicodedata.combining(c))
    assert normalise(text) == full


def test_bad_follow_up_settings_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"follow_up_patterns: '\(unclosed' is not a regular expression"):
        SamplingConfig(follow_up_patterns=["(unclosed"])
    with pytest.raises(ValueError, match="follow_up_patterns must be a list"):
        SamplingConfig(follow_up_patterns="are you sure")
    with pytest.raises(ValueError, match="follow_up_rate must be within"):
        SamplingConfig(follow_up_rate=1.5)


def test_a_followed_up_query_takes_the_follow_up_stratum_and_its_weight():
    sampler = Sampler(SamplingConfig(base_rate=0.0, follow_up_rate=0.25, thumbs_down_rate=1.0))
    picked = [d for t in trace_ids(4000) if (d := sampler.decide(record(t, feedback=[Feedback("follow_up", 5)])))]
    assert all((d.stratum, d.weight) == ("follow_up", 4.0) for d in picked)
    assert 0.2 < len(picked) / 4000 < 0.3
    both = sampler.decide(record("a" * 32, feedback=[Feedback("follow_up", 5), Feedback("thumbs_down", 6)]))
    assert (both.stratum, both.probability) == ("thumbs_down", 1.0)  # the highest rate decides
    assert sampler.decide(record("b" * 32)) is None


def test_weighted_estimates_stay_unbiased_over_followed_up_and_other_queries():
    """A population where followed-up answers are far more often wrong: the review sample holds
    them at 10 times the base rate, and the 1 / p weights still recover the true count."""
    rng = random.Random(11)
    rows = []  # (trace id, unfaithful, how it was followed up)
    for trace_id in trace_ids(3000, seed=5):
        how = rng.choices([None, "marked", "detected_late"], weights=[0.85, 0.05, 0.10])[0]
        rows.append((trace_id, rng.random() < (0.4 if how else 0.05), how))
    truth = sum(unfaithful for _, unfaithful, _ in rows)
    weighted, unweighted = [], []
    for rep in range(200):  # a new salt is an independent draw of the same traffic
        sampler = Sampler(SamplingConfig(base_rate=0.05, follow_up_rate=0.5, salt=f"rep-{rep}"))
        total = sampled = hits = 0.0
        for trace_id, unfaithful, how in rows:
            query = record(trace_id, feedback=[Feedback("follow_up", 1)] if how == "marked" else [])
            decision = sampler.decide(query)
            if how == "detected_late":  # the follow-up arrives after the query: the stratum is added in place
                decision = sampler.decide(query, follow_up=True)
            if decision is not None:
                total += unfaithful * decision.weight
                sampled += 1
                hits += unfaithful
        weighted.append(total)
        unweighted.append(hits / sampled * len(rows))

    def mean_and_se(values):
        m = sum(values) / len(values)
        return m, (sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5

    m, se = mean_and_se(weighted)
    assert abs(m - truth) < 4 * se, (m, truth, se)
    m, se = mean_and_se(unweighted)
    assert m - truth > 4 * se, "without the weights the over-sampled follow-ups bias the estimate up"


def test_re2_and_re_agree_on_the_shipped_patterns(shipped):
    """RE2 searches ASCII texts: on banking77 queries, doubting variants of them and near misses,
    it finds what ``re`` finds."""
    matcher = FollowUpMatcher(shipped.follow_up_patterns, shipped.follow_up_window_s)
    assert matcher._ascii_pattern is not None, "google-re2 is part of the agent extra"
    with open(Path(__file__).parents[1] / "data" / "banking77" / "queries.csv", newline="") as f:
        queries = [row["text"] for row in csv.DictReader(f)][:400]
    texts = [*queries, *(f"{q} are you sure?" for q in queries[:50]), *(f"but what about {q}" for q in queries[:50]),
             "isn't that wrong", "thats wrong", "is this right?", "bare you sure", "that'snot right", "ARE U SURE"]
    folded = [normalise(t) for t in texts]
    found = [matcher.matches(t) for t in texts]
    assert found == [matcher._pattern.search(f) is not None for f in folded]
    assert 100 <= sum(found) < len(texts)  # both outcomes are exercised


@pytest.mark.filterwarnings("ignore:Possible nested set")
def test_patterns_re2_cannot_read_as_re_does_fall_back_to_re(capfd):
    for pattern, text in [(r"(?<!not )\bsure\b", "are you sure"), (r"sure$", "are you sure\n"), (r"[[:alpha:]]+x", "ax")]:
        matcher = FollowUpMatcher([pattern], 60)
        assert matcher._ascii_pattern is None and matcher.matches(text) == (re.search(pattern, text) is not None)
    assert capfd.readouterr().err == ""  # RE2's refusal is not logged
