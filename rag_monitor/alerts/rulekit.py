"""The building blocks every rule group shares: an alert with its triage join and annotations, a
recording rule and threshold formatting (the triage group is ``triage_rules``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRIAGE_RECORD = "rag:triage"
PRODUCTION = 'variant!="shadow"'
"""What users see: a shadow candidate's latency, cost or faithfulness is judged by the shadow report, never paged."""


def _num(value: float) -> str:
    """A threshold as PromQL writes it: 0.2, 30, 4."""
    return repr(int(value)) if float(value) == int(value) else repr(float(value))


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


TRIAGE_ANNOTATION = (
    '{{ if eq $labels.triage "regression" }}suspected regression after {{ $labels.suspected_change }}: '
    "worse than what it replaced on this signal"
    "{{ else }}suspected drift: the releases serving moved together and no change made this signal worse{{ end }}"
)


def _with_triage(condition: str, guardrail: str) -> str:
    # rag:triage has exactly one series per guardrail (triage=regression with suspected_change, or
    # triage=drift; triage_rules.py), so a many-to-one join adds its labels to every firing series
    # and keeps the condition's value.
    return (f"(\n{_indent(condition.strip(), 2)}\n)\n* on () group_left (triage, suspected_release, suspected_change)\n"
            f'  {TRIAGE_RECORD}{{guardrail="{guardrail}"}}')


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.splitlines())


def _alert(t: Mapping[str, Any], name: str, condition: str, for_: str, severity: str, summary: str, runbook: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": _with_triage(condition, _guardrail_of(name)) + "\n",
        "for": for_,
        "labels": {"severity": severity, "guardrail": _guardrail_of(name), **(labels or {})},
        "annotations": {
            "summary": summary,
            "triage": TRIAGE_ANNOTATION,
            "runbook": " ".join(runbook.split()),
        },
    }


_GUARDRAILS = {
    "RagFaithfulnessLow": "faithfulness", "RagQueryLatencyOverSLO": "latency",
    "RagFilterFalseExclusionsHigh": "filter_false_exclusion", "RagRegenerationRateOutsideBand": "regeneration",
    "RagCostPerQueryOverBudget": "cost", "RagDriftDetected": "drift",
    "RagIndexFreshnessLagOverSLO": "freshness", "RagStaleIndexServed": "freshness", "RagCacheHitRateCollapsed": "cache",
    "RagNeighbourOverlapDropped": "neighbour_stability",
}


def _guardrail_of(alert: str) -> str:
    return _GUARDRAILS[alert]


def _record(name: str, expr: str) -> dict[str, str]:
    return {"record": name, "expr": expr.strip() + "\n"}
