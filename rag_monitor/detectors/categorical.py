"""Chi-square test of homogeneity for categorical signals: intent, route, refusal.

The two windows form a 2 x k table over the union of categories seen in either window, so
a category that appears only in the current window (a new intent) counts with a reference
count of 0: that is exactly the drift we want to see, not an error.

Low counts. The chi-square approximation needs expected counts that are not tiny (Cochran:
about 5). Rule applied: categories are taken in order of their pooled count (reference +
current), smallest first, and consecutive categories are grouped into one bin until the
bin's expected count in the smaller window (``pooled count x smaller window / total``)
reaches ``min_expected``; a category large enough on its own stays alone, and a last short
bin joins the one before it. The grouping looks only at the pooled counts, the table's
margins, which carry no information about a difference between the windows: grouping by
either window's own counts (for instance "rare in the reference") selects that window's
chance deficits and inflates false alarms (measured: 10-12% at alpha 0.05 on banking77).

Categories unseen in the reference form a bin of their own when their pooled expected
count reaches ``min_expected`` (a reference count of 0 against real current traffic is
exactly the signal); fewer of them are binned like the rest, so a stray new label cannot
raise a false alarm. That one choice looks at which window the counts are in, but with no
drift new labels are rare and it almost never applies. With fewer than two bins there is
nothing to compare and the result is ``p = 1``. Bins of several categories are listed in
the result's metadata (``merged_bins``).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Hashable, Mapping

from rag_monitor.detectors.base import DriftDetector, DriftScore

__all__ = ["ChiSquareDrift"]


class ChiSquareDrift(DriftDetector[Counter]):
    """Has the mix of categories (intents, routes, refusal yes/no) changed?

    >>> detector = ChiSquareDrift(signal="intent").fit(["billing"] * 60 + ["card"] * 40)
    >>> detector.predict(["billing"] * 30 + ["card"] * 20).is_drift
    False
    >>> detector.predict(["billing"] * 10 + ["card"] * 10 + ["crypto"] * 30).is_drift
    True

    A window is a sequence of labels (one per query) or a mapping ``{label: count}``.

    Parameters
    ----------
    alpha
        Significance level: the false-alarm rate accepted on windows that did not drift.
    signal
        Name of the watched signal, copied into results.
    min_expected
        Expected count under which a category is pooled with other rare ones (see the
        module notes); 5 is the textbook threshold.
    min_window_size
        Fewest observations accepted in a window.
    """

    detector_name = "chi_square"

    def __init__(
        self, *, alpha: float = 0.05, signal: str = "", min_expected: float = 5.0, min_window_size: int = 10
    ) -> None:
        super().__init__(alpha=alpha, signal=signal, min_window_size=min_window_size)
        if not float(min_expected) > 0.0:
            raise ValueError(f"min_expected must be positive, got {min_expected!r}")
        self.min_expected = float(min_expected)

    def _prepare(self, window: Any, what: str) -> Counter:
        if isinstance(window, (str, bytes)):
            raise ValueError(f"{what} must be a sequence of labels or a {{label: count}} mapping, not one string")
        if isinstance(window, Mapping):
            counts: Counter = Counter()
            for label, count in window.items():
                _check_label(label, what)
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise ValueError(f"{what}: count of {label!r} must be a non-negative integer, got {count!r}")
                if count:
                    counts[label] = count
        else:
            try:
                labels = list(window)
            except TypeError:
                raise ValueError(f"{what} must be a sequence of labels or a {{label: count}} mapping") from None
            for label in labels:
                _check_label(label, what)
            counts = Counter(labels)
        if not counts:
            raise ValueError(f"{what} is empty: no observations to test")
        return counts

    def _size(self, window: Counter) -> int:
        return sum(window.values())

    def _concat(self, old: Counter, new: Counter) -> Counter:
        return old + new

    def _tail(self, window: Counter, size: int) -> Counter:
        raise ValueError("a categorical reference keeps counts, not order: refit it instead of trimming with max_size")

    def _score(self, reference: Counter, current: Counter) -> DriftScore:
        from scipy.stats import chi2

        n_ref, n_cur = self._size(reference), self._size(current)
        categories = sorted(set(reference) | set(current), key=lambda c: (reference[c] + current[c], str(c)))
        bins = self._bin_categories(categories, reference, current, n_ref, n_cur)
        if len(bins) < 2:
            statistic, dof, p_value = 0.0, 0, 1.0
        else:
            statistic = 0.0
            total = n_ref + n_cur
            for members in bins:
                ref_count = sum(reference[c] for c in members)
                cur_count = sum(current[c] for c in members)
                column_total = ref_count + cur_count
                for observed, row_total in ((ref_count, n_ref), (cur_count, n_cur)):
                    expected = row_total * column_total / total
                    statistic += (observed - expected) ** 2 / expected
            dof = len(bins) - 1
            p_value = float(chi2.sf(statistic, dof))
        return DriftScore(
            statistic=float(statistic),
            p_value=1.0 if math.isnan(p_value) else p_value,
            metadata={
                "degrees_of_freedom": dof,
                "categories": len(categories),
                "unseen_in_reference": tuple(sorted(str(c) for c in current if c not in reference)),
                "merged_bins": tuple(tuple(str(c) for c in members) for members in bins if len(members) > 1),
                "reference_share": {str(c): reference[c] / n_ref for c in categories},
                "current_share": {str(c): current[c] / n_cur for c in categories},
            },
        )

    def _bin_categories(
        self, categories: list[Hashable], reference: Counter, current: Counter, n_ref: int, n_cur: int
    ) -> list[list[Hashable]]:
        """Group consecutive categories (ordered by pooled count) until each bin expects enough."""
        smaller_share = min(n_ref, n_cur) / (n_ref + n_cur)
        bins: list[list[Hashable]] = []
        unseen = [c for c in categories if reference[c] == 0]
        if unseen and sum(current[c] for c in unseen) * smaller_share >= self.min_expected:
            bins.append(unseen)  # enough new-category traffic to stand as its own bin
            categories = [c for c in categories if reference[c] > 0]
        members: list[Hashable] = []
        pooled_count = 0
        for category in categories:
            members.append(category)
            pooled_count += reference[category] + current[category]
            if pooled_count * smaller_share >= self.min_expected:
                bins.append(members)
                members, pooled_count = [], 0
        if members:  # the largest categories come last, so a leftover is short: fold it in
            if bins:
                bins[-1].extend(members)
            else:
                bins.append(members)
        return bins


def _check_label(label: Any, what: str) -> None:
    if label is None:
        raise ValueError(f"{what} contains None: map missing values to an explicit label such as 'unknown'")
    if isinstance(label, float) and math.isnan(label):
        raise ValueError(f"{what} contains NaN: map missing values to an explicit label such as 'unknown'")
    try:
        hash(label)
    except TypeError:
        raise ValueError(f"{what} contains an unhashable label {label!r}") from None
