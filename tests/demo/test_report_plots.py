"""The demo report's drift plot labels the floor the points really sit on."""

from __future__ import annotations

import pytest


def test_drift_plot_labels_the_permutation_tests_smallest_p():
    from rag_monitor.demo.report import drift_figure
    from rag_monitor.demo.settings import drift_profiles
    from rag_monitor.detectors.profiles import DriftProfile

    profile = DriftProfile(**drift_profiles(quick=True)["profiles"][0])
    floor = profile.page_rule().p_floor
    assert floor == pytest.approx(1 / 201)
    runs = [(10.0, 0.3, False), (20.0, 0.0, True), (30.0, floor, True)]  # a 0 is drawn at the floor
    ax = drift_figure(runs, profile.alpha, [], floor).axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert "smallest possible p = 1/(1+200) = 0.00498" in labels
    points = ax.collections[0].get_offsets()[:, 1]
    assert min(points) == pytest.approx(floor) and ax.get_ylim()[0] < floor
    assert "floor 0.001" not in ax.get_ylabel()
