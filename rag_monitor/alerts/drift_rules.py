"""The drift rule: the agent's drift page decision, per signal and detector."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import _alert, _num
from rag_monitor.alerts.thresholds import parse_duration



def _cluster_annotation(direction: str, what: str, none: str) -> str:
    # The agent exports the latest run's most shifted cluster as an info series (a redacted example).
    selector = f"rag_drift_top_cluster_info{{signal='%s',detector='%s',direction='{direction}'}}"
    return (
        f'{{{{ with printf "{selector}" $labels.signal $labels.detector | query }}}}{{{{ with . | first }}}}'
        f'{what} queries like "{{{{ .Labels.example }}}}": {{{{ .Labels.current_share }}}} of the current window '
        f"against {{{{ .Labels.reference_share }}}} of the reference{{{{ end }}}}{{{{ else }}}}{none}{{{{ end }}}}"
    )


def _drift_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    d = t["drift"]
    max_age = _num(parse_duration(d["max_result_age"]))
    alert = _alert(
        t, "RagDriftDetected",
        # rag_drift_detected is the agent's page decision (a test's ln(1/p) at or above its
        # threshold), so the rule and the detector agree; the value is that evidence.
        # Replicas run each job under a lock, so max deduplicates.
        f"""
max by (signal, detector) (rag_drift_evidence)
and on (signal, detector)
(max by (signal, detector) (rag_drift_detected) == 1)
and on (signal, detector)
(max by (signal, detector) (rag_drift_window_size{{window="current"}}) >= {d['min_window_items']})
and on (signal, detector)
(time() - max by (signal, detector) (rag_drift_last_run_timestamp_seconds) < {max_age})""",
        d["for"], d["severity"],
        "Drift on {{ $labels.signal }} by {{ $labels.detector }} (evidence ln(1/p) = {{ $value | printf \"%.1f\" }}, "
        "at or above its page threshold).",
        f"""
Meaning: the latest window of this signal (query or retrieved-document embeddings, intents), a
uniform sample of its schedule interval (or, for a novelty profile, of the trailing day), rejected
"no drift" against a fresh draw of the reference (at the same hours of the day where the profile
matches hours; the novelty test counts window items farther from the reference than its 1% tail)
with a p-value at or below the page threshold, set so that false pages
average at most a tenth of the budget (one per 30 days) whatever the windows share; windows hold at
least {d['min_window_items']} items and the verdict is less than {d['max_result_age']} old.
Check first: the annotations name the query cluster that grew and the one that shrank; `rag-monitor
drift report` lists them with example queries and Phoenix links, and `rag-monitor drift reference
show` the reference in use; rag_drift_p_value over time shows when windows started to differ;
rag_queries_total by intent for a mix change.
First step: if triage says regression, check whether the release changed the embedding model,
chunking or retrieval (that shifts document embeddings without any user change; set a new reference
with `rag-monitor drift reference set --release` if intended); if drift, look at the new cluster's
queries, check faithfulness and regeneration alerts for the same period, then update the corpus or
reset the reference.""",
    )
    alert["annotations"]["grew"] = _cluster_annotation("over", "More", "no cluster of queries is clearly more common than in the reference")
    alert["annotations"]["shrank"] = _cluster_annotation("under", "Fewer", "no cluster of queries is clearly less common than in the reference")
    return [{"name": "rag-drift-alerts", "rules": [alert]}]
