"""``rag-monitor drift report``: the current windows explained, for a person.

Writes a directory with ``index.html`` (per profile: the page decision and its evidence,
the last window's p-value and seed, the reference in use, and the query clusters that grew or
shrank with redacted example queries linked to their traces in Phoenix) and one Evidently report per
signal (``evidently-<signal>.html``: embeddings drift for vector signals, a data-drift table for
categorical ones). Evidently renders; the verdicts are the agent's own detectors' (Evidently's
default MMD threshold missed a clear shift here, see DEPENDENCIES.md).

Usage::

    write_report(store, profiles, "drift-report/", phoenix_url="http://127.0.0.1:6006")
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from rag_monitor.detectors.profiles import EMBEDDING_SIGNALS, DriftProfile

log = logging.getLogger(__name__)


def _evidently_report(store, signal: str, path: Path) -> str | None:
    """Render Evidently's view of one signal's windows; returns the file name, or None when empty."""
    import pandas as pd
    from evidently.legacy.pipeline.column_mapping import ColumnMapping
    from evidently.legacy.report import Report

    reference, _ = store.reservoirs.get(signal, "reference")
    current, _ = store.reservoirs.get(signal, "current")
    if len(reference) == 0 or len(current) == 0:
        return None
    if signal in EMBEDDING_SIGNALS:
        from evidently.legacy.metrics import EmbeddingsDriftMetric

        columns = [f"e{i}" for i in range(reference.shape[1])]
        report = Report(metrics=[EmbeddingsDriftMetric(signal)])
        report.run(
            reference_data=pd.DataFrame(reference, columns=columns),
            current_data=pd.DataFrame(current, columns=columns),
            column_mapping=ColumnMapping(embeddings={signal: columns}, numerical_features=[], categorical_features=[]),
        )
    else:
        from evidently.legacy.metric_preset import DataDriftPreset

        report = Report(metrics=[DataDriftPreset()])
        report.run(
            reference_data=pd.DataFrame({signal: [str(v) for v in reference]}),
            current_data=pd.DataFrame({signal: [str(v) for v in current]}),
            column_mapping=ColumnMapping(categorical_features=[signal], numerical_features=[]),
        )
    name = f"evidently-{signal}.html"
    report.save_html(str(path / name))
    return name


def write_report(store, profiles: Sequence[DriftProfile], out_dir: str | Path, *,
                 phoenix_url: str | None = None) -> Path:
    """Render ``index.html`` (the Jinja2 template ``drift_report.html``) and Evidently's pages."""
    import datetime as dt
    import math

    from rag_monitor.agent.drift.export import latest_tested
    from rag_monitor.templating import render

    from rag_monitor.extras import MissingExtra, available

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, rendered = [], {}
    with_evidently = available("evidently", "pandas")
    if not with_evidently:  # the verdicts are ours and render without it; only Evidently's pages are missing
        log.warning("%s; the report has the agent's verdicts without Evidently's pages",
                    MissingExtra("Evidently's drift pages", "report"))
    for profile in profiles:
        if not with_evidently:
            rendered[profile.signal] = None
        elif profile.signal not in rendered:
            try:
                rendered[profile.signal] = _evidently_report(store, profile.signal, out)
            except Exception as exc:  # noqa: BLE001 - our verdicts still render without Evidently's view
                log.warning("Evidently could not render %s: %s", profile.signal, exc)
                rendered[profile.signal] = None
        run = latest_tested(store, profile)
        result = run.result if run is not None else None
        latest = store.drift_runs.list(profile.name, limit=1)
        waiting = (latest[0].result or {}).get("reason", "no completed run yet") if latest else "no completed run yet"
        window = ""
        if result:
            start, end = (dt.datetime.fromtimestamp(result[k], dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                          for k in ("window_start", "window_end"))
            window = f"{start} .. {end}"
        rows.append({
            "profile": profile, "result": result, "waiting": waiting, "window": window,
            "evidently": rendered[profile.signal],
            "log_threshold": math.log(result["page_threshold"]) if result else None,
            "css": "wait" if not result else ("drift" if result["decision"] else "ok"),
        })
    page = render("rag_monitor.agent.drift", "drift_report.html", rows=rows,
                  phoenix_url=phoenix_url.rstrip("/") if phoenix_url else None)
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"
