"""Drift runs to Prometheus gauges: the window's test, its evidence and page decision, and the top
changed cluster (an info series the alert's annotation reads).

``rag_drift_detected`` is the *page decision* (the test's evidence ``ln(1/p)`` at or above the
threshold the false-page budget sets, ``detectors/paging.py``), not one window's ``p < alpha``; the
alert rule reads it, so rule and detector agree.
"""

from __future__ import annotations

import math

EXAMPLE_CHARS = 80


def latest_tested(store, profile, *, limit: int = 5):
    """The latest run of ``profile`` that tested a window (``done``), or None."""
    for run in store.drift_runs.list(profile.name, limit=limit, tested=True):
        if (run.result or {}).get("status") == "done":
            return run
    return None


def top_change(result: dict, direction: str) -> dict | None:
    """The most shifted cluster of a run on one side (``over`` or ``under``), or None."""
    group = (result.get("changes") or {}).get(direction) or []
    return group[0] if group else None


def example_text(cluster: dict) -> str:
    """A short, already-redacted example query of a cluster (the category for categorical signals)."""
    for example in cluster.get("examples") or []:
        if isinstance(example, dict) and example.get("query"):
            text = " ".join(example["query"].split())
            return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"
    return str(cluster.get("cluster", ""))


class DriftExporter:
    """Sets the drift gauges of ``metrics`` (an ``AgentMetrics``) from a profile's latest run."""

    def __init__(self, metrics):
        self.metrics = metrics
        self._info_labels: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def export(self, profile, run) -> None:
        result = run.result or {}
        m, labels = self.metrics, (profile.signal, profile.detector)
        m.drift_statistic.labels(*labels).set(result["statistic"])
        m.drift_p_value.labels(*labels).set(result["p_value"])
        m.drift_detected.labels(*labels).set(1 if result.get("decision") else 0)
        m.drift_evidence.labels(*labels).set(result.get("log_evidence", 0.0))
        m.drift_evidence_threshold.labels(*labels).set(math.log(result.get("page_threshold", math.e)))
        m.drift_window_size.labels(*labels, "reference").set(result["n_reference"])
        m.drift_window_size.labels(*labels, "current").set(result["n_current"])
        m.drift_last_run.labels(*labels).set(run.finished_at or run.started_at)
        for direction in ("over", "under"):
            key = (*labels, direction)
            old = self._info_labels.pop(key, None)
            if old is not None:
                m.drift_top_cluster.remove(*old)
            cluster = top_change(result, direction)
            if cluster is None:
                continue
            new = (*key, example_text(cluster), f"{cluster['current_share']:.3f}", f"{cluster['reference_share']:.3f}")
            m.drift_top_cluster.labels(*new).set(1)
            self._info_labels[key] = new
