"""Every weighted rate the agent reports, from one place: pure arithmetic, no I/O.

A sampled item counts with its weight ``w = 1 / inclusion probability`` (the sampler's
single-draw design, ``review/sampler.py``), so oversampled complaints do not bias a rate.

- ``weighted_rate``: the ratio (Hajek) estimate ``sum w y / sum w`` with the 95% Wilson interval
  at the Kish effective size ``(sum w)^2 / sum w^2`` (the plain Wilson interval when every weight
  is equal). What the judged rates, the false-exclusion rate and the human-only unsupported
  rate export; ``from_sums`` rebuilds it from the three sums a metric carries.
- ``ht_ratio_se``: the linearised Horvitz-Thompson standard error of the same ratio, with the
  finite-population factor ``(1 - pi)``: the oracle's reference interval.
- ``rate_difference``: the difference of two such rates on disjoint groups (items with an implicit
  signal minus items without, ``review/signals.py``) with Newcombe's hybrid score interval, built
  from the two groups' Wilson intervals (Newcombe 1998, method 10: coverage near 95% where the
  Wald interval of a difference fails, at small groups and rates near 0 or 1).
- ``weighted_auc``: the weighted Mann-Whitney AUC of a score (dwell time) against a 0/1 verdict,
  with the Hanley-McNeil (1982) standard error at the Kish effective sizes of the two classes.
- ``ppi_mean`` / ``ppi_rate``: prediction-powered inference (PPI++, Angelopoulos, Duchi and
  Zrnic 2023). A scorer labels a large sample cheaply, people label a subsample exactly:

      estimate = lam * mean_S(f) + mean_R(y - lam * f)

  (weighted means; ``S`` the scored sample, ``R`` the reviewed one, ``f`` the scorer's
  probability, ``y`` the human label). It is unbiased for any ``lam`` and any scorer, calibrated
  or not. ``lam`` minimises the interval's own variance estimate, so the normal interval is
  never wider than the humans' alone at ``lam = 0`` (``ppi_rate`` also falls back to the
  humans' Wilson interval whenever that is narrower, or when too few labels of a class exist
  for a normal interval). ``ppi_py`` (the authors' package) computes the same estimate and
  interval for independent samples; ``tests/unit/test_estimators.py`` checks this module against
  it on the same data.

Usage::

    weighted_rate([2.0, 1.0, 1.0], [1, 0, 1])          # WeightedRate(value=0.75, low=..., high=...)
    ppi_rate(y, f, w, f_scored, w_scored, w_scored_of_labeled)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

Z95 = 1.959963984540054
"""The two-sided 95% normal quantile."""
MIN_LABELS_PER_CLASS = 5
"""Below this many human labels of either class the normal (Wald) interval of ``ppi_mean`` is not
trusted (its variance estimate can be 0): ``ppi_rate`` reports the humans' Wilson interval."""


def kish_effective_size(sum_w: float, sum_w2: float) -> float:
    """``(sum w)^2 / sum w^2``: how many equally weighted items the sample is worth."""
    return sum_w * sum_w / sum_w2 if sum_w2 > 0 else 0.0


def wilson(p: float, n_eff: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``p`` observed on ``n_eff`` items; (0, 1) with none."""
    if n_eff <= 0:
        return 0.0, 1.0
    denominator = 1 + z * z / n_eff
    centre = (p + z * z / (2 * n_eff)) / denominator
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n_eff + z * z / (4 * n_eff * n_eff)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class WeightedRate:
    """A weighted proportion with its 95% Wilson interval at the Kish effective size."""

    value: float
    low: float
    high: float
    items: int
    sum_w: float
    sum_w2: float

    @property
    def n_eff(self) -> float:
        return kish_effective_size(self.sum_w, self.sum_w2)

    @property
    def width(self) -> float:
        return self.high - self.low

    @classmethod
    def from_sums(cls, sum_w: float, sum_wy: float, sum_w2: float, items: int = 0, z: float = Z95) -> WeightedRate | None:
        """From the sums a metric exports; None with no weight (a rate with no item is absent, never 0)."""
        if sum_w <= 0:
            return None
        p = sum_wy / sum_w
        low, high = wilson(p, kish_effective_size(sum_w, sum_w2), z)
        return cls(p, low, high, items, sum_w, sum_w2)


def weighted_rate(weights: Sequence[float], outcomes: Sequence[float], z: float = Z95) -> WeightedRate | None:
    """The weighted share of ``outcomes`` (0/1, or a tie as 0.5); None for an empty sample."""
    w = np.asarray(weights, dtype=float)
    y = np.asarray(outcomes, dtype=float)
    return WeightedRate.from_sums(float(w.sum()), float((w * y).sum()), float((w * w).sum()), len(w), z)


def ht_ratio_se(weights: Sequence[float], outcomes: Sequence[float]) -> tuple[float | None, float]:
    """Ratio estimate and its linearised Horvitz-Thompson standard error under Poisson sampling:
    ``sqrt(sum (w^2 - w) (y - R)^2) / sum w`` (the ``w^2 - w = (1 - pi) / pi^2`` factor)."""
    w = np.asarray(weights, dtype=float)
    y = np.asarray(outcomes, dtype=float)
    total = float(w.sum())
    if not total:
        return None, math.inf
    rate = float((w * y).sum()) / total
    return rate, math.sqrt(float(((w * w - w) * (y - rate) ** 2).sum())) / total


@dataclass(frozen=True)
class RateDifference:
    """``with_.value - without.value`` and its 95% interval (Newcombe's hybrid score interval)."""

    value: float
    low: float
    high: float
    with_: WeightedRate
    without: WeightedRate


def rate_difference(with_: WeightedRate, without: WeightedRate) -> RateDifference:
    """Newcombe's method 10 from the two groups' own Wilson intervals (at their Kish sizes): the
    lower end subtracts the distance to ``with_``'s lower and ``without``'s upper end in quadrature."""
    d = with_.value - without.value
    low = d - math.hypot(with_.value - with_.low, without.high - without.value)
    high = d + math.hypot(with_.high - with_.value, without.value - without.low)
    return RateDifference(d, max(-1.0, low), min(1.0, high), with_, without)


@dataclass(frozen=True)
class WeightedAUC:
    """P(score of a positive > score of a negative), ties half, both drawn by weight; 95% interval."""

    value: float
    low: float
    high: float
    positives: int
    negatives: int


def weighted_auc(scores: Sequence[float], outcomes: Sequence[float], weights: Sequence[float],
                 z: float = Z95) -> WeightedAUC | None:
    """The weighted AUC of ``scores`` for ``outcomes`` (0/1); None without both classes.

    The interval is Hanley and McNeil's normal interval, its variance taken at the Kish effective
    sizes of the positives and the negatives (their formula assumes equal weights)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(outcomes, dtype=float) > 0.5
    w = np.asarray(weights, dtype=float)
    if not y.any() or y.all():
        return None
    values, group = np.unique(s, return_inverse=True)
    neg = np.bincount(group, weights=np.where(y, 0.0, w), minlength=len(values))
    below = np.concatenate(([0.0], np.cumsum(neg)[:-1]))  # negative weight strictly below each value
    w_pos, w_neg = w[y], w[~y]
    wins = float(w_pos @ (below[group[y]] + neg[group[y]] / 2))
    auc = wins / (float(w_pos.sum()) * float(w_neg.sum()))
    n_pos = kish_effective_size(float(w_pos.sum()), float(w_pos @ w_pos))
    n_neg = kish_effective_size(float(w_neg.sum()), float(w_neg @ w_neg))
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    variance = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)
    half = z * math.sqrt(max(variance, 0.0))
    return WeightedAUC(auc, max(0.0, auc - half), min(1.0, auc + half), int(y.sum()), int((~y).sum()))


@dataclass(frozen=True)
class PPIMean:
    """A prediction-powered mean, its standard error and the ``lam`` it was taken at."""

    value: float
    se: float
    lam: float
    labeled: int
    scored: int

    def interval(self, z: float = Z95) -> tuple[float, float]:
        return self.value - z * self.se, self.value + z * self.se


def _normalised(w: Sequence[float] | None, n: int) -> np.ndarray:
    if w is None:
        return np.full(n, 1.0 / n)
    arr = np.asarray(w, dtype=float)
    if arr.shape != (n,) or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"weights must be {n} finite positive numbers")
    return arr / arr.sum()


@dataclass(frozen=True)
class ScoredSums:
    """What ``ppi_mean`` needs of the scored sample: five running sums of weights ``w`` and the
    scorer's predictions ``f`` (kept per release in the store, so a scrape reads five numbers,
    not the sample)."""

    items: int = 0
    w: float = 0.0
    wf: float = 0.0
    w2: float = 0.0
    w2f: float = 0.0
    w2f2: float = 0.0

    @classmethod
    def of(cls, f: Sequence[float], w: Sequence[float] | None = None) -> ScoredSums:
        f_ = np.asarray(f, dtype=float)
        w_ = np.ones(len(f_)) if w is None else np.asarray(w, dtype=float)
        return cls(len(f_), float(w_.sum()), float(w_ @ f_), float(w_ @ w_), float((w_ * w_) @ f_),
                   float((w_ * w_) @ (f_ * f_)))

    def __add__(self, other: ScoredSums) -> ScoredSums:
        return ScoredSums(*(a + b for a, b in zip(self.__dict__.values(), other.__dict__.values())))

    @property
    def mean(self) -> float:
        return self.wf / self.w

    def centred_square_share(self) -> float:
        """``sum (w / sum w)^2 (f - mean)^2``: the variance of the weighted mean of ``f``."""
        m = self.mean
        return max(self.w2f2 - 2 * m * self.w2f + m * m * self.w2, 0.0) / (self.w * self.w)


def ppi_mean(
    y: Sequence[float],
    yhat: Sequence[float],
    yhat_scored: Sequence[float] | ScoredSums,
    w: Sequence[float] | None = None,
    w_scored: Sequence[float] | None = None,
    *,
    w_scored_of_labeled: Sequence[float] | None = None,
    lam: float | None = None,
) -> PPIMean:
    """PPI++ estimate of the mean of ``y`` from labels on ``R`` and predictions on ``S``.

    ``y``, ``yhat``, ``w``: the labeled items' labels, predictions and weights; ``yhat_scored``,
    ``w_scored``: the scored sample's predictions and weights (or its ``ScoredSums``).
    ``w_scored_of_labeled``: the scored-sample weights of the labeled items when ``R`` is a
    subsample of ``S`` (the agent's nested design: the labeled items are among the scored ones);
    None when the two samples are independent (``ppi_py``'s setting). The variance is the
    design's linearisation with Hajek centring, and with the nested design's covariance term
    (both means see the same items). ``lam`` None: the minimiser of that variance estimate
    (unclipped: the guarantee needs no clip, and any scale of the scorer's output works).
    """
    scored = yhat_scored if isinstance(yhat_scored, ScoredSums) else ScoredSums.of(yhat_scored, w_scored)
    y_ = np.asarray(y, dtype=float)
    f_r = np.asarray(yhat, dtype=float)
    n = len(y_)
    if n == 0 or scored.items == 0 or f_r.shape != y_.shape:
        raise ValueError("ppi_mean needs labels with one prediction each, and a non-empty scored sample")
    p_r = _normalised(w, n)
    f_bar_s = scored.mean
    e = y_ - float(p_r @ y_)
    g = f_r - float(p_r @ f_r)
    # V(lam) = lam^2 a + b - 2 lam c  (a quadratic): a, b, c from the sample.
    a = scored.centred_square_share() + float(p_r**2 @ g**2)
    b = float(p_r**2 @ e**2)
    c = float(p_r**2 @ (e * g))
    if w_scored_of_labeled is not None:
        # cov(lam mean_S f, mean_R (y - lam f)): 2 lam sum p_r q (f - mean_S f)(e - lam g)
        q = np.asarray(w_scored_of_labeled, dtype=float) / scored.w
        d_r = f_r - f_bar_s
        a -= 2 * float((p_r * q) @ (d_r * g))
        c -= float((p_r * q) @ (d_r * e))
    if lam is None:
        lam = c / a if a > 0 else 0.0
    value = lam * f_bar_s + float(p_r @ (y_ - lam * f_r))
    variance = max(lam * lam * a + b - 2 * lam * c, 0.0)
    return PPIMean(value, math.sqrt(variance), float(lam), n, scored.items)


@dataclass(frozen=True)
class PPIRate:
    """The prediction-powered rate as the agent exports it, beside the humans' own."""

    value: float
    low: float
    high: float
    lam: float
    """0 when the humans' interval stands (``fallback`` says why)."""
    labels: int
    """Human labels the estimate rests on."""
    scored: int
    human: WeightedRate
    fallback: str | None = None
    """None, ``"few_labels"`` (under ``MIN_LABELS_PER_CLASS`` of a class) or ``"wider"``."""


def ppi_rate(
    y: Sequence[float],
    yhat: Sequence[float],
    w: Sequence[float],
    yhat_scored: Sequence[float] | ScoredSums,
    w_scored: Sequence[float] | None,
    w_scored_of_labeled: Sequence[float] | None,
    z: float = Z95,
) -> PPIRate | None:
    """A 0/1 rate by ``ppi_mean``, clipped to [0, 1], never wider than the humans' Wilson interval.

    None without labels. Without a scored sample, or with under ``MIN_LABELS_PER_CLASS`` labels of
    either class, or when the PPI interval comes out wider, the humans' estimate and Wilson
    interval stand (``lam`` 0, ``fallback`` says which)."""
    human = weighted_rate(w, y, z)
    if human is None:
        return None
    scored = yhat_scored if isinstance(yhat_scored, ScoredSums) else ScoredSums.of(yhat_scored, w_scored)
    positives = int(np.sum(np.asarray(y, dtype=float) > 0.5))
    standing = PPIRate(human.value, human.low, human.high, 0.0, human.items, scored.items, human)
    if not scored.items or min(positives, human.items - positives) < MIN_LABELS_PER_CLASS:
        return replace(standing, fallback="few_labels")
    est = ppi_mean(y, yhat, scored, w, w_scored_of_labeled=w_scored_of_labeled)
    low, high = est.interval(z)
    low, high = max(0.0, low), min(1.0, high)
    if high - low > human.width:
        return replace(standing, fallback="wider")
    return PPIRate(min(max(est.value, 0.0), 1.0), low, high, est.lam, est.labeled, est.scored, human)
