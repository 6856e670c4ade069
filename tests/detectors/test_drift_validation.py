"""Bad windows get a clear ValueError, for every drift detector."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest

from rag_monitor.detectors import ChiSquareDrift, ClassifierDrift, DriftResult, MMDDrift, NotFittedError

EMBEDDING_DETECTORS = [MMDDrift, ClassifierDrift]


@pytest.fixture
def reference():
    return np.random.default_rng(0).normal(size=(40, 6))


@pytest.mark.parametrize("detector_class", EMBEDDING_DETECTORS)
def test_embedding_windows_are_validated(detector_class, reference):
    detector = detector_class().fit(reference)
    bad = reference[:30].copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinite values in 1 vector\(s\) \(first at row 3\)"):
        detector.predict(bad)
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        detector.predict(bad)
    with pytest.raises(ValueError, match="dimension 5 but the reference has 6"):
        detector.predict(reference[:30, :5])
    with pytest.raises(ValueError, match="must be 2-D"):
        detector.predict(reference[0])
    with pytest.raises(ValueError, match="empty"):
        detector.predict(np.empty((0, 6)))
    with pytest.raises(ValueError, match="empty"):
        detector.predict([])
    with pytest.raises(ValueError, match=r"has 3 observation\(s\); .* needs at least"):
        detector.predict(reference[:3])
    with pytest.raises(ValueError, match="2-D array of numbers"):
        detector.predict([["a", "b"]])
    with pytest.raises(ValueError, match="reference contains NaN"):
        detector_class().fit(np.full((40, 6), np.nan))


@pytest.mark.parametrize("detector_class", [MMDDrift, ClassifierDrift, ChiSquareDrift])
def test_predict_before_fit_says_what_to_do(detector_class):
    with pytest.raises(NotFittedError, match=r"call fit\(reference\) first"):
        detector_class().predict(["a"] * 20 if detector_class is ChiSquareDrift else np.zeros((20, 3)))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="alpha"):
        MMDDrift(alpha=1.5)
    with pytest.raises(ValueError, match="n_permutations"):
        MMDDrift(n_permutations=0)
    with pytest.raises(ValueError, match="bandwidth"):
        MMDDrift(bandwidth=-1.0)
    with pytest.raises(ValueError, match="dtype"):
        MMDDrift(dtype="float16")
    with pytest.raises(ValueError, match="train_fraction"):
        ClassifierDrift(train_fraction=1.0)
    with pytest.raises(ValueError, match="min_expected"):
        ChiSquareDrift(min_expected=0)


def test_identical_reference_vectors_cannot_set_a_bandwidth():
    with pytest.raises(ValueError, match="pass bandwidth= explicitly"):
        MMDDrift().fit(np.ones((20, 4)))
    assert MMDDrift(bandwidth=1.0).fit(np.ones((20, 4))).sigma_ == 1.0


def test_categorical_windows_are_validated():
    detector = ChiSquareDrift().fit(["a"] * 10 + ["b"] * 10)
    with pytest.raises(ValueError, match="contains None"):
        detector.predict(["a"] * 10 + [None])
    with pytest.raises(ValueError, match="contains NaN"):
        detector.predict(["a"] * 10 + [float("nan")])
    with pytest.raises(ValueError, match="empty"):
        detector.predict([])
    with pytest.raises(ValueError, match="not one string"):
        detector.predict("abcdefghijkl")
    with pytest.raises(ValueError, match="non-negative integer"):
        detector.predict({"a": -1, "b": 20})
    with pytest.raises(ValueError, match=r"has 4 observation\(s\)"):
        detector.predict(["a", "b", "a", "b"])


def test_result_is_frozen_with_read_only_metadata():
    result = MMDDrift().fit(np.random.default_rng(1).normal(size=(30, 3))).predict(
        np.random.default_rng(2).normal(size=(30, 3))
    )
    assert isinstance(result, DriftResult)
    with pytest.raises(AttributeError):
        result.is_drift = True  # type: ignore[misc]
    with pytest.raises(TypeError, match="read-only"):
        result.metadata["sigma"] = 0.0  # type: ignore[index]
    # plain-data friendly: drift jobs serialise results with dataclasses.asdict and json
    as_dict = dataclasses.asdict(result)
    assert as_dict["metadata"]["sigma"] == result.metadata["sigma"]
    assert json.loads(json.dumps(as_dict))["detector"] == "mmd"


def test_importing_the_package_loads_no_numerical_library():
    import subprocess

    code = (
        "import sys, rag_monitor.detectors; "
        "print(sorted(m for m in ('numpy', 'scipy', 'sklearn', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
