"""``rag-monitor drift report``: the current windows explained, for a person.

Writes a directory with ``index.html`` (our verdicts per profile, the current-window queries
farthest from the reference with links to their traces in Phoenix) and one Evidently report per
signal (``evidently-<signal>.html``: embeddings drift for vector signals, a data-drift table for
categorical ones). Evidently renders; the verdicts are the agent's own detectors' (Evidently's
default MMD threshold missed a clear shift here, see DEPENDENCIES.md).

Usage::

    write_report(store, profiles, "drift-report/", phoenix_url="http://127.0.0.1:6006")
"""

from __future__ import annotations

import html
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

    reference, _ = store.reservoir_get(signal, "reference")
    current, _ = store.reservoir_get(signal, "current")
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


def _trace_link(trace_id: str, phoenix_url: str | None) -> str:
    if not phoenix_url:
        return f"<code>{html.escape(trace_id)}</code>"
    # Phoenix's UI redirects an OpenTelemetry trace id to the trace's page in its project.
    url = f"{phoenix_url.rstrip('/')}/redirects/traces/{html.escape(trace_id)}"
    return f'<a href="{url}"><code>{html.escape(trace_id)}</code></a>'


def write_report(store, profiles: Sequence[DriftProfile], out_dir: str | Path, *,
                 phoenix_url: str | None = None) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, sections, rendered = [], [], {}
    for profile in profiles:
        runs = [r for r in store.drift_runs(profile.name, limit=10) if (r.result or {}).get("status") == "done"]
        if profile.signal not in rendered:
            try:
                rendered[profile.signal] = _evidently_report(store, profile.signal, out)
            except Exception as exc:  # noqa: BLE001 - our verdicts still render without Evidently's view
                log.warning("Evidently could not render %s: %s", profile.signal, exc)
                rendered[profile.signal] = None
        link = rendered[profile.signal]
        evidently = f'<a href="{link}">Evidently report</a>' if link else "no data yet"
        if not runs:
            rows.append(f"<tr><td>{html.escape(profile.name)}</td><td>{profile.signal}</td><td>{profile.detector}</td>"
                        f"<td colspan=4>no completed run yet</td><td>{evidently}</td></tr>")
            continue
        r = runs[0].result
        verdict = "DRIFT" if r["is_drift"] else "no drift"
        rows.append(
            f"<tr class={'drift' if r['is_drift'] else 'ok'}><td>{html.escape(profile.name)}</td><td>{profile.signal}</td>"
            f"<td>{profile.detector}</td><td><b>{verdict}</b></td><td>{r['p_value']:.4g} (&alpha; {r['threshold']})</td>"
            f"<td>{r['statistic']:.4g}</td><td>{r['n_reference']} / {r['n_current']}</td><td>{evidently}</td></tr>"
        )
        shifted = r.get("most_shifted") or []
        if shifted:
            items = "".join(
                f"<li>{_trace_link(s['trace_id'], phoenix_url)} distance {s['distance']:.3f}</li>" for s in shifted
            )
            sections.append(f"<h2>{html.escape(profile.name)}: current queries farthest from the reference</h2><ol>{items}</ol>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rag-monitor drift report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3rem .6rem}}
tr.drift{{background:#fde8e8}}tr.ok{{background:#eaf7ea}}</style></head><body>
<h1>Drift report</h1>
<table><tr><th>profile</th><th>signal</th><th>detector</th><th>verdict</th><th>p-value</th><th>statistic</th><th>reference / current</th><th>details</th></tr>
{''.join(rows)}</table>
{''.join(sections)}
</body></html>"""
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"
