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


TRIAGE_LABELS = ("triage", "suspected_release", "suspected_change")


def _with_triage(condition: str, name: str, labels: Mapping[str, str]) -> str:
    """The condition with its triage labels, latched per alert: a firing alert keeps the labels it
    fired with (read back from its own ``ALERTS`` series), so it never flips or re-routes; an alert
    that is not firing takes the guardrail's current comparison (``rag:triage``, exactly one series
    per guardrail, so a many-to-one join adds its labels and keeps the condition's value).

    Latched per alert, not per guardrail: a page that begins while a warning of the same guardrail
    fires (a model change making a slow afternoon much worse, a new release beside an old one's
    incident) is a new incident and is triaged by the comparison at its own start."""
    condition = condition.strip()
    triage = ", ".join(TRIAGE_LABELS)
    # ALERTS carries the condition's labels, the rule's own labels, alertname and alertstate:
    # ignoring all but the condition's matches each firing alert to the series it came from.
    rule_labels = ", ".join(("alertname", "alertstate", *labels, *TRIAGE_LABELS))
    selector = ",".join(f'{k}="{v}"' for k, v in {"alertname": name, "alertstate": "firing", **labels}.items())
    return (f"(\n{_indent(condition, 2)}\n)\n* ignoring ({rule_labels}) group_left ({triage})\n  ALERTS{{{selector}}}\n"
            f"or ignoring ({triage})\n"
            f"(\n{_indent(condition, 2)}\n)\n* on () group_left ({triage})\n"
            f'  {TRIAGE_RECORD}{{guardrail="{labels["guardrail"]}"}}')


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.splitlines())


def _alert(t: Mapping[str, Any], name: str, condition: str, for_: str, severity: str, summary: str, runbook: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    rule_labels = {"severity": severity, "guardrail": _guardrail_of(name), **(labels or {})}
    return {
        "alert": name,
        "expr": _with_triage(condition, name, rule_labels) + "\n",
        "for": for_,
        "labels": rule_labels,
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
