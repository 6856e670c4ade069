"""The three unsupported rates against simulated deployments with an imperfect scorer.

``rag_monitor/simulate/ppi.py`` knows the scorer's error rates per release (a style change in r2
raises its false-positive rate), so it predicts the scorer-only rate's bias; the PPI interval
must cover the true rate in at least 93% of deployments, never be wider than the humans' own,
and be at most 0.8x it (median) where the scorer's AUC is 0.9. Fixed seeds: the outcome is
deterministic. The long run is ``benchmarks/ppi_oracle.py`` (``benchmarks/results/ppi_oracle.json``).
"""

from __future__ import annotations

import pytest

from rag_monitor.simulate.ppi import ScorerRelease, deployment, summarise

RELEASES = [
    ScorerRelease.with_auc("r1", 0.3, 0.9),
    ScorerRelease.with_auc("r2", 0.3, 0.9, mu0=-0.3),  # answers restyled: more false positives
    ScorerRelease.with_auc("r3", 0.15, 0.75),
]
DEPLOYMENTS = 200


@pytest.fixture(scope="module")
def summary() -> dict[str, dict]:
    by_release: dict[str, list] = {r.name: [] for r in RELEASES}
    for seed in range(DEPLOYMENTS):
        for outcome in deployment(seed, RELEASES, queries=20000):
            by_release[outcome.release].append(outcome)
    return {name: summarise(outcomes) for name, outcomes in by_release.items()}


def test_the_scorer_only_rate_is_biased_by_the_predicted_amount(summary):
    assert RELEASES[1].false_positive_rate > RELEASES[0].false_positive_rate + 0.1
    for name, s in summary.items():
        assert abs(s["scorer_bias_predicted"]) > 0.01, name  # a bias worth correcting
        assert s["scorer_bias_mean"] == pytest.approx(s["scorer_bias_predicted"], abs=max(4 * s["scorer_bias_se"], 0.004)), name
    assert summary["r2"]["scorer_bias_mean"] > summary["r1"]["scorer_bias_mean"] + 0.05


def test_the_ppi_interval_covers_the_truth_and_is_never_wider_than_the_humans(summary):
    for name, s in summary.items():
        assert s["ppi_coverage"] >= 0.93, (name, s)
        assert abs(s["ppi_bias_mean"]) < 0.005, (name, s)
        assert s["width_ratio_max"] <= 1.0, (name, s)


def test_with_an_auc_of_0_9_the_interval_is_at_most_0_8x_the_humans(summary):
    for name in ("r1", "r2"):
        assert summary[name]["auc"] == pytest.approx(0.9, abs=1e-3)
        assert summary[name]["width_ratio_median"] <= 0.8, summary[name]
