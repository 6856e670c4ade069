"""`rag-monitor review report`: two releases' human-judged rates side by side.

The numbers are ``rates.judged_rates`` (weighted by inverse inclusion probability, 95%
Wilson intervals at the effective sample size, counts), for one variant; a rate with no
reviewed query is shown as missing, never 0. Agreement between reviewers (Cohen's kappa on
items reviewed twice) is reported beside them: rates from reviewers who do not agree are
weak evidence. Below them, each implicit signal against the blind verdicts (``signals.py``) for
the two releases and over all: which signals have earned a direction.

Usage::

    report = release_report(store, "2026.11.1", "2026.11.2")
    print(report.text()); write_html(report, "release.html")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rag_monitor.review.agreement import Agreement, agreement_by_label
from rag_monitor.review.rates import MEASURES, JudgedRate, judged_rates
from rag_monitor.review.signals import OVERALL, SignalAssociation, direction_words, signal_associations, signals_text
from rag_monitor.templating import render

DESCRIPTIONS = {
    "correct": "answers accepted as correct",
    "supported": "answers supported by their context",
    "refusal_appropriate": "refusals judged appropriate",
    "evidence_coverage": "answerable queries whose gold documents were delivered",
}


@dataclass(frozen=True)
class ReportRow:
    measure: str
    description: str
    baseline: JudgedRate | None
    candidate: JudgedRate | None

    @property
    def difference(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate.value - self.baseline.value


@dataclass(frozen=True)
class ReleaseReport:
    baseline: str
    candidate: str
    variant: str
    rows: list[ReportRow]
    agreement: list[Agreement]
    signals: list[SignalAssociation]

    def signal_rows(self) -> list[tuple[str, str, list[SignalAssociation | None], str]]:
        """(signal, verdict, one association per column of ``signal_columns``, direction words) for the HTML."""
        by = {(a.signal, a.verdict, a.release): a for a in self.signals}
        overall = [a for a in self.signals if a.release == OVERALL]
        return [(a.signal, a.verdict, [by.get((a.signal, a.verdict, c)) for c in self.signal_columns], direction_words(a))
                for a in overall]

    @property
    def signal_columns(self) -> list[str]:
        return [self.baseline, self.candidate, OVERALL]

    def text(self) -> str:
        def cell(rate: JudgedRate | None) -> str:
            if rate is None:
                return "-"
            return f"{rate.value:.1%} [{rate.low:.1%}, {rate.high:.1%}] ({rate.positives}/{rate.items})"

        head = f"{'measure':<22} {self.baseline:>34} {self.candidate:>34} {'difference':>11}"
        lines = [f"human-judged rates, variant {self.variant} (weighted; 95% interval; judged positive/reviewed)", head]
        for row in self.rows:
            diff = "-" if row.difference is None else f"{row.difference:+.1%}"
            lines.append(f"{row.measure:<22} {cell(row.baseline):>34} {cell(row.candidate):>34} {diff:>11}")
        kappas = ", ".join(f"{a.label} {'-' if a.kappa is None else f'{a.kappa:.2f}'} ({a.pairs} pairs)" for a in self.agreement)
        lines.append(f"reviewer agreement (Cohen's kappa): {kappas}")
        lines += ["", signals_text(self.signals, [self.baseline, self.candidate])]
        return "\n".join(lines)


def release_report(store, baseline: str, candidate: str, *, variant: str = "production") -> ReleaseReport:
    reviewed = store.queue.reviewed()
    known = {(r.release, r.measure): r for r in judged_rates(reviewed) if r.variant == variant}
    releases = {item.query_record.release for item, _ in reviewed}
    for release in (baseline, candidate):
        if release not in releases:
            raise ValueError(f"no reviewed query of release {release!r}; reviewed releases: {sorted(r for r in releases if r)}")
    rows = [ReportRow(m, DESCRIPTIONS[m], known.get((baseline, m)), known.get((candidate, m))) for m in MEASURES]
    agreement = list(agreement_by_label(store.review.all_reviews([item.id for item, _ in reviewed])).values())
    feedback = store.feedback.for_traces(item.trace_id for item, _ in reviewed)
    return ReleaseReport(baseline, candidate, variant, rows, agreement, signal_associations(reviewed, feedback))


def write_html(report: ReleaseReport, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(render("rag_monitor.review", "release_report.html", report=report), encoding="utf-8")
    return path
