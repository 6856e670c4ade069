"""The building blocks every rule group shares: an alert with its triage join and annotations, a
recording rule, threshold formatting, and the triage group itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.thresholds import parse_duration

TRIAGE_RECORD = "rag:triage"
PRODUCTION = 'variant!="shadow"'
"""What users see: a shadow candidate's latency, cost or faithfulness is judged by the shadow report, never paged."""
RELEASE_AGE_RECORD = "rag:release:newest_age_seconds"


def _num(value: float) -> str:
    """A threshold as PromQL writes it: 0.2, 30, 4."""
    return repr(int(value)) if float(value) == int(value) else repr(float(value))


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


# Computed from the raw metric at template time, not from the recorded age (a rule group
# evaluated before rag-triage would read the previous evaluation's age).
_RELEASE_AGE_SECONDS = "time() - max(min by (service, release) (rag_release_first_seen_timestamp_seconds))"
# "just now" under 5 s, seconds under a minute, then Prometheus' humanizeDuration ("17m 3s", "2h 5m 0s"):
# a release minutes old read "deployed 0 minutes ago".
_AGE = ('{{ $age := . | first | value }}{{ if lt $age 5.0 }}just now{{ else if lt $age 60.0 }}'
        '{{ $age | printf "%.0f" }} seconds ago{{ else }}{{ $age | humanizeDuration }} ago{{ end }}')


def _triage_annotation(release_window: str) -> str:
    return (
        '{{ if eq $labels.triage "regression" }}suspected regression after release {{ $labels.suspected_release }}, '
        f'deployed {{{{ with query "{_RELEASE_AGE_SECONDS}" }}}}{_AGE}{{{{ end }}}}'
        f"{{{{ else }}}}suspected drift: no release in the last {release_window}{{{{ end }}}}"
    )


def _with_triage(condition: str) -> str:
    # rag:triage is exactly one series (triage=regression with suspected_release, or triage=drift),
    # so a many-to-one join adds its labels to every firing series and keeps the condition's value.
    return f"(\n{_indent(condition.strip(), 2)}\n)\n* on () group_left (triage, suspected_release)\n  {TRIAGE_RECORD}"


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.splitlines())


def _alert(t: Mapping[str, Any], name: str, condition: str, for_: str, severity: str, summary: str, runbook: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": _with_triage(condition) + "\n",
        "for": for_,
        "labels": {"severity": severity, "guardrail": _guardrail_of(name), **(labels or {})},
        "annotations": {
            "summary": summary,
            "triage": _triage_annotation(t["triage"]["release_window"]),
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


def _triage_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    window = _num(parse_duration(t["triage"]["release_window"]))
    return [{
        "name": "rag-triage",
        "rules": [
            # Replicas see a release at slightly different times: the earliest sighting wins.
            _record("rag:release:first_seen_timestamp_seconds", "min by (service, release) (rag_release_first_seen_timestamp_seconds)"),
            _record(RELEASE_AGE_RECORD, "time() - topk(1, rag:release:first_seen_timestamp_seconds)"),
            _record("rag:triage:regression", f"""
max by (triage, suspected_release) (
  label_replace(
    label_replace({RELEASE_AGE_RECORD} < {window}, "suspected_release", "$1", "release", "(.*)"),
    "triage", "regression", "", ""
  )
) * 0 + 1"""),
            _record(TRIAGE_RECORD, """
rag:triage:regression
or on ()
label_replace(vector(1), "triage", "drift", "", "")"""),
        ],
    }]
