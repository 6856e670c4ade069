"""support-v3: structured records made checkable, its answer features, and the shipped model on real
LLM answers from sources it was not fitted on (tests/data/ragtruth, odd source indexes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rag_monitor.faithfulness import load_scorer
from rag_monitor.faithfulness.structured import attribute_conflicts, flatten_record, parse_record
from rag_monitor.faithfulness.support_v3 import FEATURES, SupportV3Scorer, answer_features
from rag_monitor.faithfulness.thresholds import shipped_calibration
from rag_monitor.faithfulness.worker import FaithfulnessWorker, Pair
from rag_monitor.review.calibrate import _balanced_accuracy
from rag_monitor.review.ragtruth import load_ragtruth

DATA = Path(__file__).resolve().parents[1] / "data" / "ragtruth"
RECORD = {"name": "Finch & Fork", "hours": {"Monday": "17:30-23:0"},
          "attributes": {"OutdoorSeating": False, "RestaurantsTakeOut": True, "WiFi": "u'no'",
                         "BusinessParking": {"lot": False, "street": True}}}


def test_a_record_is_flattened_into_key_words_and_12_hour_times():
    record = parse_record(json.dumps(RECORD))
    text = flatten_record(record)
    assert "Outdoor Seating: False" in text and "Business Parking lot: False" in text
    assert text.splitlines()[-1].split() == ["5", "11"]  # 17:30 and 23:00 on the 12-hour clock
    assert parse_record("plain prose {not a record}") is None and parse_record("{broken") is None


@pytest.mark.parametrize(("sentence", "conflicts"), [
    ("It offers outdoor seating and free wifi.", 2),          # both false in the record
    ("It has no outdoor seating.", 0),                         # the negation agrees with the record
    ("It does not offer take-out.", 1),                        # denies a true attribute
    ("They serve a lot of pasta.", 0),                         # "lot" only counts next to parking
    ("Parking is on the street or in a lot.", 1),
])
def test_attribute_conflicts_read_assertions_against_the_record(sentence, conflicts):
    assert len(attribute_conflicts(RECORD, [sentence])) == conflicts


def test_answer_features_see_invented_numbers_names_and_words():
    context = ["The museum opened in 1889 in Paris and drew crowds of visitors."]
    faithful = dict(zip(FEATURES, answer_features(context, "The museum opened in 1889 in Paris.")))
    invented = dict(zip(FEATURES, answer_features(context, "The museum opened in 1901 in Lyon with fireworks.")))
    assert faithful["novel_number_share"] == 0 and invented["novel_number_share"] == 1
    assert faithful["novel_name_share"] == 0 and invented["novel_name_share"] == 1
    assert invented["novel_word_share"] > faithful["novel_word_share"]
    assert faithful["structured"] == 0 and all(v == 0 for k, v in faithful.items() if k.startswith("structured*"))
    assert answer_features(context, "Sure!") is None


def test_the_shipped_model_loads_and_ranks_an_invented_answer_lower():
    scorer = SupportV3Scorer()
    entry = shipped_calibration("support-v3", "1")
    assert scorer.threshold == entry["threshold"] and scorer.model.features == FEATURES
    context = ["The museum opened in 1889 in Paris and drew crowds of visitors."]
    faithful, invented = scorer.score([context, context], ["The museum opened in 1889 in Paris.",
                                                           "The museum opened in 1901 in Lyon with fireworks."])
    assert faithful > invented
    claims = scorer.assess(json.dumps(RECORD), "Finch & Fork offers outdoor seating.").claims
    assert claims[0].verdict == "contradicted" and "outdoor seating" in claims[0].reason


def test_the_agent_setting_selects_support_v3_without_an_embedding_model():
    scorer = load_scorer(None, offline="support-v3", torch_threads=None)
    assert (scorer.name, scorer.version) == ("support-v3", "1")


@pytest.mark.parametrize("task", ["summary", "data2txt"])
def test_the_shipped_model_beats_chance_on_held_out_real_answers(task):
    """The first 24 odd sources (144 answers): neither the model nor its threshold saw them. On all 75
    odd sources it scores 0.64 (summaries) and 0.70 (data-to-text): benchmarks/results/faithfulness_ragtruth_support_v3.json."""
    scorer = SupportV3Scorer()
    parts = [load_ragtruth(DATA / f"{task}_{name}.jsonl") for name in ("odd8", "odd17-47")]
    premises, answers = [p for d in parts for p in d.premises], [h for d in parts for h in d.hypotheses]
    supported = np.array([s for d in parts for s in d.supported])
    assert len(answers) == 144
    pairs = [Pair(str(i), [p], h) for i, (p, h) in enumerate(zip(premises, answers))]
    values = np.array([1.0 if s.value is None else s.value for s in FaithfulnessWorker(scorer).score_pairs(pairs)])
    accuracy = _balanced_accuracy(values, supported, np.ones(len(values)), scorer.threshold)
    flagged, true = float((values < scorer.threshold).mean()), float((~supported).mean())
    assert accuracy > 0.55, (task, accuracy)
    assert flagged <= 2 * true, (task, flagged, true)
