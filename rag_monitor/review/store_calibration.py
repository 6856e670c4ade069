"""The scorer against the team's own reviewers: ``rag-monitor calibrate --from-store`` and
``scorer_threshold: auto``.

Only items of the ``judge_calibration`` split (``golden.assign_splits``: a session's items and
items sharing a document stay together) count, never the ``release`` split that decides a
release, so choosing the threshold cannot leak into that decision. An item counts when its
first review says faithful yes or no and the scorer scored it; its weight is the review
queue's inverse inclusion probability, so oversampled strata count for what they represent.

``scorer_threshold: auto`` adopts the threshold maximising the weighted balanced accuracy
there once ``MIN_LABELS`` labels, ``MIN_PER_CLASS`` of each verdict, exist for the scorer's
current version; until then the shipped threshold stands.

Usage::

    rows = calibration_rows(store, "support-v1")
    for group in calibration_groups(rows, "support-v1"): print(group.version, group.release, group.report.roc_auc)
    adoption = calibrated_threshold(rows, "support-v1", "1")      # None below the minimums
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_monitor.review.calibrate import CalibrationReport, calibrate
from rag_monitor.review.golden import DEFAULT_SHARES, golden_rows

log = logging.getLogger(__name__)

SPLIT = "judge_calibration"
MIN_LABELS = 200
MIN_PER_CLASS = 30


@dataclass(frozen=True)
class CalibrationGroup:
    """One scorer version, on all releases (``release`` None) or on one."""

    version: str
    release: str | None
    report: CalibrationReport


@dataclass(frozen=True)
class Adoption:
    """A threshold calibrated on the store's labels, and what it rests on."""

    scorer: str
    version: str
    threshold: float
    n: int
    n_supported: int
    n_unsupported: int
    balanced_accuracy: float
    """In-sample, at the adopted threshold (it was chosen on these labels)."""
    decided_at: float

    def describe(self) -> str:
        return (f"{self.scorer}@{self.version} threshold {self.threshold:.4f} calibrated on {self.n} human labels of the "
                f"{SPLIT} split ({self.n_unsupported} unsupported, {self.n_supported} supported; balanced accuracy "
                f"{self.balanced_accuracy:.3f} on them)")


def calibration_rows(store, scorer: str, shares: Sequence[float] = DEFAULT_SHARES) -> list[dict[str, Any]]:
    """Reviewed rows of the judge-calibration split with a faithful yes/no label and a ``scorer`` score."""
    return [r for r in golden_rows(store, shares=shares)
            if r["split"] == SPLIT and r["labels"].get("faithful") in ("yes", "no") and r["scores"].get(scorer) is not None]


def _report(rows: list[dict[str, Any]], scorer: str, n_bootstrap: int) -> CalibrationReport:
    thresholds = [r["score_thresholds"].get(scorer) for r in rows if r["score_thresholds"].get(scorer) is not None]
    return calibrate([r["scores"][scorer] for r in rows], [r["labels"]["faithful"] == "yes" for r in rows],
                     [r["weight"] for r in rows], threshold=thresholds[-1] if thresholds else None,
                     n_bootstrap=n_bootstrap, scorer=scorer)


def _both_classes(rows: list[dict[str, Any]]) -> bool:
    return len({r["labels"]["faithful"] for r in rows}) == 2


def calibration_groups(rows: list[dict[str, Any]], scorer: str, n_bootstrap: int = 1000) -> list[CalibrationGroup]:
    """Per scorer version: all releases, then each release with both verdicts among its labels."""
    groups = []
    for version in sorted({r["versions"]["scorers"].get(scorer, "") for r in rows}):
        mine = [r for r in rows if r["versions"]["scorers"].get(scorer, "") == version]
        if _both_classes(mine):
            groups.append(CalibrationGroup(version, None, _report(mine, scorer, n_bootstrap)))
        for release in sorted({r["release"] or "" for r in mine}):
            theirs = [r for r in mine if (r["release"] or "") == release]
            if _both_classes(theirs):
                groups.append(CalibrationGroup(version, release, _report(theirs, scorer, n_bootstrap)))
    return groups


def calibrated_threshold(rows: list[dict[str, Any]], scorer: str, version: str, *,
                         now: float | None = None) -> Adoption | None:
    """The threshold to adopt for ``scorer@version``, or None below MIN_LABELS / MIN_PER_CLASS."""
    mine = [r for r in rows if r["versions"]["scorers"].get(scorer) == version]
    unsupported = sum(r["labels"]["faithful"] == "no" for r in mine)
    if len(mine) < MIN_LABELS or min(unsupported, len(mine) - unsupported) < MIN_PER_CLASS:
        return None
    report = _report(mine, scorer, n_bootstrap=0)
    return Adoption(scorer, version, round(report.recommended_threshold, 4), report.n, report.n_supported,
                    report.n_unsupported, report.recommended_balanced_accuracy, time.time() if now is None else now)


class ThresholdAdopter:
    """``scorer_threshold: auto`` in the agent: each ``tick`` recalibrates on the store's labels and,
    past the minimums, sets the scorer's threshold (and ``rag_scorer_info``) when it changed."""

    def __init__(self, store, scoring_loop) -> None:
        self.store = store
        self.loop = scoring_loop
        self.adoption: Adoption | None = None

    def tick(self) -> Adoption | None:
        scorer = self.loop.scorer
        adoption = calibrated_threshold(calibration_rows(self.store, scorer.name), scorer.name, scorer.version)
        if adoption is None or (self.adoption is not None and adoption.threshold == self.adoption.threshold):
            return self.adoption
        self.adoption = adoption
        self.loop.set_threshold(adoption.threshold, source="calibrated")
        log.info("scorer_threshold auto: adopted %s", adoption.describe())
        return adoption
