"""Do implicit signals mean what they seem to? Each one against the blind reviewers' verdicts.

A thumbs-down, a regenerate click, a copy, a long dwell: each is a candidate signal of answer
quality, not a quality measure, until the team's own reviewed traffic shows which way it points
(a copy can mean "useful" or "checking this elsewhere"; a long dwell reading or confusion). For
each signal and each blind verdict (``unfaithful``: the reviewer said the context does not
support the answer; ``incorrect``; ``refusal_inappropriate``: a refusal the reviewer judged
wrong), over the reviewed items judged for that verdict, per release and over all (``all``):

- ``rate_difference``: the verdict's weighted rate among items with the signal minus among items
  without, with Newcombe's 95% interval (``estimators.rate_difference``: each group's Wilson
  interval at its Kish effective size; every item weighs 1 / its inclusion probability, so the
  oversampled thumbs-down stratum does not bias either group);
- ``auc`` for ``dwell`` (a time, not an event): the weighted probability that an item with the
  verdict was dwelt on longer than one without (0.5: no relation), over the items with a dwell
  time, Hanley-McNeil interval (``estimators.weighted_auc``).

The direction is +1 (the signal goes with more of the verdict), -1 (with less) or 0: "direction
not established", when the interval includes 0 (0.5 for an AUC) or either group has fewer than
``MIN_GROUP_ITEMS`` reviewed items. Only the overall estimate sets it.

Thumbs-down reasons are free text: a reason becomes its own signal (``thumbs_down:<reason>``)
when at least ``MIN_REASON_ITEMS`` reviewed items carry the same normalised text, at most
``TOP_REASONS`` of them, and only a short text of letters (no digit, address or other detail a
user typed: a label value never carries it); any other reason is ``thumbs_down:other``.
``regenerate`` is the stored click (an inferred re-ask is a counter, not stored per query).

Usage::

    feedback = store.feedback.for_traces(item.trace_id for item, _ in reviewed)
    for a in signal_associations(reviewed, feedback):
        a.signal, a.verdict, a.release, a.value, a.low, a.high, a.items, a.direction
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client.core import GaugeMetricFamily

from rag_monitor import semconv
from rag_monitor.estimators import rate_difference, weighted_auc, weighted_rate
from rag_monitor.review.rates import judged_outcome

# The SDK's three newer kinds (issue 25 item 3) by name: no item carries them until apps send them.
CITATION_CLICK, SHARE, EDIT = "citation_click", "share", "edit"
SIGNALS = (
    semconv.FEEDBACK_THUMBS_UP, semconv.FEEDBACK_THUMBS_DOWN, semconv.FEEDBACK_REGENERATE, semconv.FEEDBACK_COPY,
    semconv.FEEDBACK_DWELL, semconv.FEEDBACK_FOLLOW_UP, CITATION_CLICK, SHARE, EDIT,
)
VERDICTS = {
    # verdict -> (the judged measure of ``rates.py``, what a positive verdict is in words)
    "unfaithful": ("supported", "unfaithful answers"),
    "incorrect": ("correct", "incorrect answers"),
    "refusal_inappropriate": ("refusal_appropriate", "inappropriate refusals"),
}
OVERALL = "all"
MIN_GROUP_ITEMS = 10
"""Reviewed items each side needs (with and without the signal; positives and negatives for an
AUC) before a direction counts: one odd item must not establish one."""
TOP_REASONS = 8
MIN_REASON_ITEMS = 5
_REASON_TEXT = re.compile(r"[a-z][a-z '_-]{0,39}")


@dataclass(frozen=True)
class SignalAssociation:
    signal: str
    verdict: str
    release: str
    statistic: str
    """``rate_difference`` or ``auc`` (dwell)."""
    value: float | None
    low: float | None
    high: float | None
    items: int
    """Reviewed items judged for the verdict (in the release): what the estimate rests on."""
    with_signal: int
    """Of which carry the signal (for dwell: have a dwell time, the AUC's items)."""
    groups: tuple[int, int]
    """The two sides compared: (with, without), or the AUC's (positives, negatives)."""

    @property
    def null(self) -> float:
        return 0.5 if self.statistic == "auc" else 0.0

    @property
    def direction(self) -> int:
        """+1 / -1 when the interval excludes the null and both sides are big enough, else 0."""
        if self.low is None or self.high is None or min(self.groups) < MIN_GROUP_ITEMS:
            return 0
        return 1 if self.low > self.null else -1 if self.high < self.null else 0


@dataclass(frozen=True)
class _Row:
    release: str
    weight: float
    outcomes: dict[str, bool]
    signals: frozenset[str]
    dwell: float | None


def reason_key(reason: str | None) -> str | None:
    """A thumbs-down reason as one lower-case, single-spaced text (None without a reason)."""
    if reason is None:
        return None
    text = " ".join(str(reason).lower().split()).strip(" .,!?;:")
    return text or None


def kept_reasons(reasons: Iterable[str | None]) -> list[str]:
    """The reasons that become signals: common (``MIN_REASON_ITEMS``), short letters only, the
    ``TOP_REASONS`` most frequent (ties by text)."""
    counts = Counter(r for r in reasons if r is not None and _REASON_TEXT.fullmatch(r))
    common = sorted((r for r, n in counts.items() if n >= MIN_REASON_ITEMS), key=lambda r: (-counts[r], r))
    return sorted(common[:TOP_REASONS])


def _dwell_seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 and seconds == seconds and seconds != float("inf") else None


def _rows(reviewed: Iterable[tuple[Any, Any]], feedback: Mapping[str, Sequence[Any]],
          release_label: Callable[[str | None], str]) -> tuple[list[_Row], list[str]]:
    pending = []
    for item, review in reviewed:
        record = item.query_record
        if item.pair_trace_id or (record.variant or semconv.VARIANT_PRODUCTION) != semconv.VARIANT_PRODUCTION:
            continue  # a shadow's answer never reached a user: no signal is about it
        outcomes = {}
        for verdict, (measure, _) in VERDICTS.items():
            judged = judged_outcome(measure, record, review.labels)
            if judged is not None:
                outcomes[verdict] = not judged
        if outcomes:
            pending.append((item, outcomes, feedback.get(item.trace_id, ())))
    reasons_of = [{reason_key(e.reason) for e in events if e.kind == semconv.FEEDBACK_THUMBS_DOWN} - {None}
                  for _, _, events in pending]
    kept = kept_reasons(r for reasons in reasons_of for r in reasons)
    rows = []
    for (item, outcomes, events), reasons in zip(pending, reasons_of):
        kinds = {e.kind for e in events if e.kind in SIGNALS}
        kinds |= {f"thumbs_down:{r if r in kept else 'other'}" for r in reasons}
        dwell = [d for d in (_dwell_seconds(e.value) for e in events if e.kind == semconv.FEEDBACK_DWELL) if d is not None]
        rows.append(_Row(release_label(item.query_record.release), float(item.weight), outcomes, frozenset(kinds),
                         max(dwell) if dwell else None))
    names = [*SIGNALS, *(f"thumbs_down:{r}" for r in kept)]
    if any("thumbs_down:other" in row.signals for row in rows):
        names.append("thumbs_down:other")
    return rows, names


def _association(signal: str, verdict: str, release: str, w: np.ndarray, y: np.ndarray, has: np.ndarray,
                 dwell: np.ndarray) -> SignalAssociation:
    """``has``: which items carry the signal (for dwell: have a dwell time, ``dwell`` NaN otherwise)."""
    n, n_with = len(w), int(has.sum())
    if signal == semconv.FEEDBACK_DWELL:
        positives = int(y[has].sum())
        auc = weighted_auc(dwell[has], y[has], w[has]) if n_with else None
        value, low, high = (auc.value, auc.low, auc.high) if auc else (None, None, None)
        return SignalAssociation(signal, verdict, release, "auc", value, low, high, n, n_with, (positives, n_with - positives))
    a, b = weighted_rate(w[has], y[has]), weighted_rate(w[~has], y[~has])
    d = rate_difference(a, b) if a is not None and b is not None else None
    value, low, high = (d.value, d.low, d.high) if d else (None, None, None)
    return SignalAssociation(signal, verdict, release, "rate_difference", value, low, high, n, n_with, (n_with, n - n_with))


def signal_associations(reviewed: Iterable[tuple[Any, Any]], feedback: Mapping[str, Sequence[Any]],
                        release_label: Callable[[str | None], str] = lambda r: r or "unknown") -> list[SignalAssociation]:
    """Every (signal, verdict) per release and over all (``OVERALL``), from ``(ReviewItem, Review)``
    pairs and each trace's stored feedback events (``store.feedback.for_traces``)."""
    rows, names = _rows(reviewed, feedback, release_label)
    out = []
    for release in [*sorted({r.release for r in rows}), OVERALL]:
        in_release = rows if release == OVERALL else [r for r in rows if r.release == release]
        for verdict in VERDICTS:
            judged = [r for r in in_release if verdict in r.outcomes]
            if not judged and release != OVERALL:
                continue
            w = np.array([r.weight for r in judged], dtype=float)
            y = np.array([r.outcomes[verdict] for r in judged], dtype=float)
            dwell = np.array([np.nan if r.dwell is None else r.dwell for r in judged], dtype=float)
            for signal in names:
                has = ~np.isnan(dwell) if signal == semconv.FEEDBACK_DWELL else np.array(
                    [signal in r.signals for r in judged], dtype=bool)
                out.append(_association(signal, verdict, release, w, y, has, dwell))
    return out


# --- what a person reads -----------------------------------------------------------------------------


def direction_words(a: SignalAssociation) -> str:
    if not a.direction:
        return "direction not established"
    words = VERDICTS[a.verdict][1]
    more = "more" if a.direction > 0 else "fewer"
    return f"longer dwell goes with {more} {words}" if a.statistic == "auc" else f"goes with {more} {words}"


def cell(a: SignalAssociation | None) -> str:
    if a is None or a.value is None:
        return f"- (n={a.items if a else 0})"
    pct = (lambda v: f"{v:.2f}") if a.statistic == "auc" else (lambda v: f"{v * 100:+.1f}")
    return f"{pct(a.value)} [{pct(a.low)}, {pct(a.high)}] (n={a.items}, {a.with_signal} with)"


def signals_text(associations: list[SignalAssociation], releases: Sequence[str]) -> str:
    """The report's table: one row per (signal, verdict), one column per release and ``all``."""
    by = {(a.signal, a.verdict, a.release): a for a in associations}
    columns = [*releases, OVERALL]
    keys = sorted({(a.signal, a.verdict) for a in associations if a.release == OVERALL},
                  key=lambda k: (list(VERDICTS).index(k[1]), k[0]))
    lines = ["implicit signals against blind review (verdict rate with the signal minus without, in points; "
             "dwell: AUC; 95% interval; n = reviewed items judged, how many with the signal)",
             f"{'signal':<24} {'verdict':<22} " + " ".join(f"{c:>38}" for c in columns) + "  direction (all)"]
    for signal, verdict in keys:
        row = " ".join(f"{cell(by.get((signal, verdict, c))):>38}" for c in columns)
        lines.append(f"{signal:<24} {verdict:<22} {row}  {direction_words(by[(signal, verdict, OVERALL)])}")
    return "\n".join(lines)


# --- metrics -------------------------------------------------------------------------------------------


def signal_families() -> dict[str, GaugeMetricFamily]:
    cell_labels = ["signal", "verdict", "release"]
    return {
        "association": GaugeMetricFamily(
            "rag_signal_association",
            "An implicit signal against a blind review verdict (unfaithful, incorrect, refusal_inappropriate), per release "
            "and over all (release=\"all\"): the verdict's weighted rate among reviewed items with the signal minus among "
            "those without (dwell: the AUC of the dwell time), with its 95% interval (bound: estimate, lower, upper).",
            labels=[*cell_labels, "bound"]),
        "direction": GaugeMetricFamily(
            "rag_signal_direction",
            "Whether blind review established the signal's direction over all reviewed releases: 1 it goes with more of "
            "the verdict, -1 with less, 0 direction not established (the interval includes no difference, or too few items).",
            labels=["signal", "verdict"]),
        "items": GaugeMetricFamily(
            "rag_signal_items", "Reviewed items judged for the verdict that rag_signal_association rests on.", labels=cell_labels),
        "with_signal": GaugeMetricFamily(
            "rag_signal_items_with_signal", "Of rag_signal_items, those that carry the signal (dwell: with a dwell time).",
            labels=cell_labels),
    }


def add_signal_metrics(f: dict[str, GaugeMetricFamily], associations: Iterable[SignalAssociation]) -> None:
    for a in associations:
        labels = [a.signal, a.verdict, a.release]
        f["items"].add_metric(labels, a.items)
        f["with_signal"].add_metric(labels, a.with_signal)
        if a.value is not None:
            for bound, value in (("estimate", a.value), ("lower", a.low), ("upper", a.high)):
                f["association"].add_metric([*labels, bound], value)
        if a.release == OVERALL:
            f["direction"].add_metric([a.signal, a.verdict], a.direction)
