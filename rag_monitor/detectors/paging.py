"""When does a drift test page? One test whose p-value clears a threshold set by the schedule.

A test pages when its p-value is at most ``1 / threshold``, with

    threshold = SAFETY x tests_per_30_days / false_pages_per_30d      (SAFETY = 10)

so that, with no drift, the expected number of false pages in 30 days is at most a tenth of the
budget. At one test a day and one false page per 30 days that is ``threshold = 300``: the test
pages at ``p <= 1/300``, which a permutation test with 300 permutations reaches only when the
observed split beats every permuted one (``p = 1/301``).

Why the bound holds although every test shares the reference
-------------------------------------------------------------
Every window is tested against a fresh draw from the same reference reservoir ``R``. Each test's
p-value is valid on average over ``R`` (the reservoir is a uniform sample of reference traffic, so
the drawn reference and the window are exchangeable under no drift): ``P(p_t <= u) <= u``. It is
*not* valid given one deployment's ``R``: ``P(p_t <= u | R)`` is a little above or below ``u``,
the same way for every window, so windows are dependent through ``R``. Evidence multiplied over
windows (a CUSUM of e-values) needs ``E[e_t | earlier windows] <= 1``, which the shared ``R``
breaks: ``E[e_1 ... e_L] = E[mu(R)^L] >= 1`` when ``mu(R) = E[e_t | R]`` varies with ``R``
(Jensen). The expected number of pages needs no independence at all (linearity of expectation):

    E[false pages in 30 days] = sum_t P(p_t <= 1/threshold) <= tests_per_30_days / threshold

whatever the dependence between tests. The bound is an average over reference draws; how far one
deployment's rate can sit from it is what ``benchmarks/drift_paging.py`` measures (per reference,
on real embeddings), and the window sampling keeps it small: the window is a uniform sample of the
whole interval, so its reference is a small draw from every hour of a large reservoir.

Windows may overlap for the same reason: the novelty profile tests the trailing day every 6 hours
(``threshold = 1200``), consecutive windows share 18 hours, and each test still counts once.

A test must be able to reach the threshold: the smallest p-value (``p_floor``, ``1/(1+P)`` for a
permutation test with ``P`` permutations) must be at most ``1/threshold``, or the profile is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

THIRTY_DAYS_S = 30 * 86400.0
SAFETY = 10.0
NO_FLOOR = 1e-300
"""``p_floor`` of tests whose p-value has no floor (asymptotic tests: chi-square, rank-sum)."""


@dataclass(frozen=True)
class PageRule:
    p_floor: float
    threshold: float

    def __post_init__(self) -> None:
        if not 0.0 < self.p_floor < 1.0:
            raise ValueError(f"p_floor must be in (0, 1), got {self.p_floor!r}")
        if not self.threshold > 1.0:
            raise ValueError(f"the page threshold must exceed 1, got {self.threshold!r}")
        if self.p_floor * self.threshold > 1.0 + 1e-9:
            raise ValueError(
                f"no test can page: the smallest p-value is {self.p_floor:.3g} and a page needs p <= 1/{self.threshold:g}; "
                f"use at least {math.ceil(self.threshold) - 1} permutations (n_permutations), a longer interval_s, "
                "or a larger false_pages_per_30d")

    @classmethod
    def from_budget(cls, *, interval_s: float, false_pages_per_30d: float = 1.0, p_floor: float = NO_FLOOR) -> "PageRule":
        """The rule that keeps expected false pages within ``false_pages_per_30d / SAFETY`` at one test per ``interval_s``."""
        if not false_pages_per_30d > 0:
            raise ValueError(f"false_pages_per_30d must be positive, got {false_pages_per_30d!r}")
        return cls(p_floor=p_floor, threshold=max(2.0, SAFETY * tests_per_30_days(interval_s) / false_pages_per_30d))

    @property
    def log_threshold(self) -> float:
        return math.log(self.threshold)

    def log_evidence(self, p_value: float) -> float:
        """``ln(1/p)`` of one test (p floored at ``p_floor``); it pages at ``ln threshold`` or above."""
        return -math.log(min(1.0, max(float(p_value), self.p_floor)))

    def pages(self, log_evidence: float) -> bool:
        # the tolerance lets p = 1/threshold page despite rounding in ln
        return log_evidence >= self.log_threshold - 1e-9

    def expected_false_pages_per_30d(self, interval_s: float) -> float:
        """The bound above: tests in 30 days over the threshold (dependence between tests allowed)."""
        return tests_per_30_days(interval_s) / self.threshold


def tests_per_30_days(interval_s: float) -> float:
    """At most one test per ``interval_s`` (a run that finds no full window tests nothing)."""
    return max(1.0, THIRTY_DAYS_S / interval_s)
