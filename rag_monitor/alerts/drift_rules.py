"""The drift rule: the agent's sequential drift decision, per signal and detector."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import _alert, _num
from rag_monitor.alerts.thresholds import parse_duration

def _drift_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    d = t["drift"]
    max_age = _num(parse_duration(d["max_result_age"]))
    return [{"name": "rag-drift-alerts", "rules": [_alert(
        t, "RagDriftDetected",
        # The value is the p-value; replicas run each job under a lock, so max deduplicates.
        f"""
max by (signal, detector) (rag_drift_p_value)
and on (signal, detector)
(max by (signal, detector) (rag_drift_detected) == 1)
and on (signal, detector)
(max by (signal, detector) (rag_drift_window_size{{window="current"}}) >= {d['min_window_items']})
and on (signal, detector)
(time() - max by (signal, detector) (rag_drift_last_run_timestamp_seconds) < {max_age})""",
        d["for"], d["severity"],
        "Drift detected on {{ $labels.signal }} by {{ $labels.detector }} (p-value {{ $value | printf \"%.3g\" }}).",
        f"""
Meaning: the latest drift test of this signal (query or retrieved-document embeddings, intents)
rejected "no drift" between the reference window and a current window of at least
{d['min_window_items']} items, and the verdict is less than {d['max_result_age']} old.
Check first: the drift report for this signal (Evidently) and rag_drift_statistic over time to see
whether the shift is sudden or gradual; in Phoenix, sample recent traces' queries and retrieved
documents and compare them with the reference period; rag_queries_total by intent for a mix change.
First step: if triage says regression, check whether the release changed the embedding model,
chunking or retrieval (that shifts document embeddings without any user change; reset the
reference if intended); if drift, find the new topics and check faithfulness and regeneration
alerts for the same period before updating the corpus or the reference.""",
    )]}]
