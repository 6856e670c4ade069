"""The page bound under a shared reference: what the windows share, and what the rule relies on.

Every test of a deployment draws its reference from the same reservoir. The page rule
(``detectors/paging.py``) relies only on each test being valid on average over reservoirs; these
tests check that premise with the agent's own draw (``detectors.references.draw_reference``) and show the
dependence it is built to survive: a reference reused whole ties every window's p-value to it,
a fresh small draw from a large reservoir barely does. Fixed seeds; no timing.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from rag_monitor.detectors.profiles import DriftProfile, score_window
from rag_monitor.detectors.references import draw_reference

DIM, WINDOW, REFERENCES, WINDOWS = 8, 40, 20, 20


def profile() -> DriftProfile:
    return DriftProfile("p", "query_embedding", "mmd", reference_size=4000, current_size=WINDOW, min_current=WINDOW,
                        interval_s=86400, season="none", reference_ratio=1, page_threshold=100,
                        options={"n_permutations": 99, "bandwidths": (1.0,), "neighbours": 0})


def p_values(reservoir_size: int, seed: int) -> np.ndarray:
    """``(REFERENCES, WINDOWS)`` null p-values: each row one deployment's reservoir, tested window after window."""
    rng = np.random.default_rng(seed)
    out = np.empty((REFERENCES, WINDOWS))
    for k in range(REFERENCES):
        reservoir = SimpleNamespace(values=rng.normal(size=(reservoir_size, DIM)).astype(np.float32),
                                    times=np.zeros(reservoir_size), trace_ids=[str(i) for i in range(reservoir_size)])
        for w in range(WINDOWS):
            window = rng.normal(size=(WINDOW, DIM)).astype(np.float32)
            test_seed = int(rng.integers(2**62))
            matched, _, _ = draw_reference(profile(), reservoir, np.zeros(WINDOW), test_seed)
            out[k, w] = score_window(profile(), matched, window, test_seed).p_value
    return out


@pytest.fixture(scope="module")
def reused():
    return p_values(WINDOW, seed=1)  # the reservoir is the draw: every window meets the same reference


@pytest.fixture(scope="module")
def fresh():
    return p_values(50 * WINDOW, seed=2)  # each window draws 1/50 of the reservoir afresh


def test_each_test_is_valid_on_average_over_reservoirs(reused, fresh):
    """The page rule's premise: P(p <= u) <= u over reservoirs, however the windows share them."""
    for p in (reused, fresh):
        n = p.size
        for u in (0.05, 0.2, 0.5):
            # the share at or below u is Binomial(n, <= u): at most 4 sd above u
            assert np.mean(p <= u) <= u + 4 * math.sqrt(u * (1 - u) / n), (u, np.mean(p <= u))
        assert abs(p.mean() - 0.5) < 4 * math.sqrt(1 / 12 / n)


def test_a_reused_reference_ties_windows_together_a_fresh_draw_barely_does(reused, fresh):
    """Per deployment, the mean p of its windows spreads as independent windows' would (sd sqrt(1/12/W))
    only when each window draws a small fresh share of a large reservoir."""
    independent = math.sqrt(1 / 12 / WINDOWS)
    assert reused.mean(axis=1).std(ddof=1) > 1.8 * independent  # ~2.5x: the reference's luck is every window's
    assert fresh.mean(axis=1).std(ddof=1) < 1.5 * independent    # ~1x (an sd from 20 deployments: +-16%)
