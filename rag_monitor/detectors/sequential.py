"""When does a run of drift tests page? A CUSUM e-detector over non-overlapping windows.

One window's p-value at alpha 0.05, every few minutes, is a false "drift" about once an hour. A
page needs sustained evidence instead:

1. Each window's valid p-value becomes an e-value with the calibrator
   ``e = kappa * p ** (kappa - 1)`` (Vovk & Wang 2021; ``E[e] <= 1`` under no drift). ``p`` is
   first floored at ``p_floor`` (the permutation test's smallest p, ``1/(1+P)``), and ``kappa =
   1 / ln(1/p_floor)`` makes the largest e-value as large as possible: about 19 at ``P = 300``.
2. The evidence is a CUSUM of the e-values (the e-detector of Shin, Ramdas & Rinaldo, 2023):
   ``M_t = e_t * max(M_{t-1}, 1)``, kept as ``log M``. It pages while ``M_t >= threshold``.
   Under no drift, with valid e-values, the mean time to a false page is at least
   ``threshold`` windows.
3. ``threshold`` comes from the false-page budget: at most ``budget`` false pages per 30 days at
   the profile's schedule (at most one window per ``interval_s``, so at most
   ``30 days / interval_s`` windows) with a safety factor of 10 for the windows' shared
   reference, which makes successive p-values slightly dependent: ``threshold = 10 x
   windows_per_30_days / budget``. At one window an hour and one false page per 30 days that is
   7,200, reached by three windows at the smallest p-value (``ceil(ln 7200 / ln 19)``).

The month-long simulation (``benchmarks/drift_month.py``) measures the false pages per signal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

THIRTY_DAYS_S = 30 * 86400.0
SAFETY = 10.0


@dataclass(frozen=True)
class SequentialRule:
    p_floor: float
    threshold: float

    def __post_init__(self) -> None:
        if not 0.0 < self.p_floor < 1.0:
            raise ValueError(f"p_floor must be in (0, 1), got {self.p_floor!r}")
        if not self.threshold > 1.0:
            raise ValueError(f"the page threshold must exceed 1, got {self.threshold!r}")

    @classmethod
    def from_budget(cls, *, interval_s: float, false_pages_per_30d: float = 1.0, p_floor: float = 1 / 301) -> "SequentialRule":
        """The rule that keeps false pages within ``false_pages_per_30d`` at one window per ``interval_s``."""
        if not false_pages_per_30d > 0:
            raise ValueError(f"false_pages_per_30d must be positive, got {false_pages_per_30d!r}")
        windows = max(1.0, THIRTY_DAYS_S / interval_s)
        return cls(p_floor=p_floor, threshold=max(2.0, SAFETY * windows / false_pages_per_30d))

    @property
    def kappa(self) -> float:
        return 1.0 / math.log(1.0 / self.p_floor)

    @property
    def log_threshold(self) -> float:
        return math.log(self.threshold)

    def log_e_value(self, p_value: float) -> float:
        """``ln e`` of one window's p-value (at most ``ln e(p_floor)``)."""
        p = min(1.0, max(float(p_value), self.p_floor))
        return math.log(self.kappa) + (self.kappa - 1.0) * math.log(p)

    def update(self, log_evidence: float, p_value: float) -> float:
        """The CUSUM after one more window: ``ln M_t = ln e_t + max(ln M_{t-1}, 0)``."""
        return self.log_e_value(p_value) + max(float(log_evidence), 0.0)

    def pages(self, log_evidence: float) -> bool:
        return log_evidence >= self.log_threshold

    @property
    def min_windows_to_page(self) -> int:
        """Windows at the smallest p-value that take the evidence from 1 to the threshold."""
        return math.ceil(self.log_threshold / self.log_e_value(self.p_floor))
