"""The demo's one-page HTML report: the story of the run in four plots.

    path = write_report(root / "report", agent, summary, phases, alerts)   # .../report/index.html

Read from the agent itself (its recent-records cache and drift runs in the store) and the
alerts Alertmanager delivered, so it needs no Prometheus: latency p95 per stage in each phase,
unsupported and false-exclusion rates per release against their alert thresholds, drift
p-values over time against the detector's alpha, and when each alert fired. Plots are PNGs
embedded as data URIs: the page is one file that can be mailed or attached to a ticket.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rag_monitor.demo.summary import STAGE_ORDER
from rag_monitor.templating import render

PHASE_COLOURS = ("#4C78A8", "#F58518", "#E45756", "#72B7B2", "#54A24B")
TRIAGE_COLOURS = {"regression": "#E45756", "drift": "#4C78A8"}


@dataclass(frozen=True)
class PhaseWindow:
    name: str
    release: str
    start_s: float
    end_s: float
    latencies: dict[str, list[float]]
    """Stage (and ``query`` for end to end) -> durations in seconds of the phase's queries."""


def phase_windows(store: Any, phases: Sequence[Any]) -> tuple[float, list[PhaseWindow]]:
    """(t0, windows): each phase's span of time, relative to the first query, and its latencies."""
    records = [[r for r in (store.recent.get(t) for t in p.trace_ids) if r is not None] for p in phases]
    starts = [r.start_ns for rs in records for r in rs]
    t0 = min(starts) / 1e9 if starts else 0.0
    windows = []
    for phase, rs in zip(phases, records):
        if not rs:
            continue
        latencies: dict[str, list[float]] = {"query": [r.duration_s for r in rs]}
        for r in rs:
            for stage in r.stages:
                latencies.setdefault(stage.name, []).append(stage.duration_s)
        windows.append(PhaseWindow(phase.phase, phase.release, min(r.start_ns for r in rs) / 1e9 - t0,
                                   max(r.end_ns for r in rs) / 1e9 - t0, latencies))
    return t0, windows


def _timestamp(value: str | None) -> float | None:
    """Alertmanager's RFC 3339 times (nanoseconds; year 1 for 'not ended') as Unix seconds."""
    if not value or value.startswith("0001-"):
        return None
    value = re.sub(r"(\.\d{6})\d+", r"\1", value).replace("Z", "+00:00")
    return datetime.fromisoformat(value).timestamp()


def alert_spans(alerts: Sequence[Mapping[str, Any]], t0: float, end_s: float) -> list[dict[str, Any]]:
    """One bar per alert (name and subject): from its first firing to its resolution or the end."""
    spans: dict[tuple, dict[str, Any]] = {}
    for alert in alerts:
        labels = alert.get("labels", {})
        subject = labels.get("signal") or labels.get("release") or labels.get("variant") or ""
        key = (labels.get("alertname", "?"), subject)
        start = _timestamp(alert.get("startsAt"))
        if start is None:
            continue
        after = f" (after {labels['suspected_release']})" if labels.get("suspected_release") else ""
        span = spans.setdefault(key, {"label": f"{key[0]} {subject}".strip() + after, "start": start - t0, "end": None,
                                      "triage": labels.get("triage", "")})
        span["start"] = min(span["start"], start - t0)
        if alert.get("status") == "resolved" and (ended := _timestamp(alert.get("endsAt"))) is not None:
            span["end"] = max(span["end"] or 0.0, ended - t0)
    for span in spans.values():
        span["end"] = span["end"] if span["end"] is not None else max(end_s, span["start"] + 1)
    return sorted(spans.values(), key=lambda s: s["start"])


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _shade_phases(ax: Any, windows: Sequence[PhaseWindow]) -> None:
    for i, w in enumerate(windows):
        ax.axvspan(w.start_s, w.end_s, color=PHASE_COLOURS[i % len(PHASE_COLOURS)], alpha=0.08)
        ax.text((w.start_s + w.end_s) / 2, 1.01, w.name, transform=ax.get_xaxis_transform(), ha="center", fontsize=8)


def latency_plot(windows: Sequence[PhaseWindow]) -> str:
    import numpy as np
    from matplotlib.figure import Figure

    stages = [s for s in (*STAGE_ORDER, "query") if any(s in w.latencies for w in windows)]
    fig = Figure(figsize=(8, 3.2))
    ax = fig.subplots()
    width = 0.8 / max(1, len(windows))
    for i, w in enumerate(windows):
        p95 = [float(np.percentile(w.latencies[s], 95)) * 1000 if w.latencies.get(s) else 0.0 for s in stages]
        ax.bar(np.arange(len(stages)) + i * width, p95, width, label=f"{w.name} ({w.release})",
               color=PHASE_COLOURS[i % len(PHASE_COLOURS)])
    ax.set_xticks(np.arange(len(stages)) + width * (len(windows) - 1) / 2, [s if s != "query" else "end to end" for s in stages])
    ax.set_ylabel("p95 latency (ms)")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("Latency p95 per stage, by phase", fontsize=10)
    return _png(fig)


def rates_plot(releases: Sequence[Any], thresholds: Mapping[str, float]) -> str:
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.2))
    axes = fig.subplots(1, 2)
    names = [r.release for r in releases]
    for ax, (title, attr, limit) in zip(axes, (
        ("Unsupported answers (weighted)", "faithfulness_unsupported", thresholds["unsupported"]),
        ("False exclusions (reviewed)", "false_exclusion_rate", thresholds["false_exclusion"]),
    )):
        values = [getattr(r, attr) for r in releases]
        bars = ax.bar(np.arange(len(names)), [v or 0.0 for v in values], color=PHASE_COLOURS[0])
        for bar, v in zip(bars, values):
            ax.annotate("n/a" if v is None else f"{v:.0%}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.axhline(limit, color="#E45756", ls="--", lw=1, label=f"alert threshold {limit:.0%}")
        ax.set_xticks(np.arange(len(names)), names)
        ax.set_ylim(0, max(1.0, limit * 1.2))
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    return _png(fig)


def drift_figure(runs: Sequence[tuple[float, float, bool]], alpha: float, windows: Sequence[PhaseWindow], p_floor: float) -> Any:
    """The drift runs' p-values on a log axis; ``p_floor`` is the permutation test's smallest p, 1/(1+P)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.2))
    ax = fig.subplots()
    _shade_phases(ax, windows)
    if runs:
        xs, ps, flags = zip(*runs)
        ps = [max(p, p_floor) for p in ps]  # the test cannot go lower; keeps a 0 on the log axis
        ax.plot(xs, ps, color="#555", lw=1)
        ax.scatter(xs, ps, c=["#E45756" if f else "#4C78A8" for f in flags], s=18, zorder=3)
    ax.axhline(alpha, color="#E45756", ls="--", lw=1, label=f"alpha {alpha:g} (below: drift)")
    ax.axhline(p_floor, color="#999", ls=":", lw=1, label=f"smallest possible p = 1/(1+{round(1 / p_floor) - 1}) = {p_floor:.3g}")
    ax.set_yscale("log")
    ax.set_ylim(p_floor / 2, 1.5)
    ax.set_xlabel("seconds since the first query")
    ax.set_ylabel("p-value (permutation test)")
    ax.legend(fontsize=8, frameon=False, loc="lower left")
    ax.set_title("Drift test p-values (query embeddings, MMD)", fontsize=10, pad=14)
    return fig


def drift_plot(runs: Sequence[tuple[float, float, bool]], alpha: float, windows: Sequence[PhaseWindow], p_floor: float) -> str:
    return _png(drift_figure(runs, alpha, windows, p_floor))


def alerts_plot(spans: Sequence[Mapping[str, Any]], windows: Sequence[PhaseWindow]) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 0.9 + 0.4 * max(1, len(spans))))
    ax = fig.subplots()
    _shade_phases(ax, windows)
    for i, span in enumerate(spans):
        ax.broken_barh([(span["start"], span["end"] - span["start"])], (i - 0.35, 0.7),
                       color=TRIAGE_COLOURS.get(span["triage"], "#888"))
        ax.text(span["start"], i, f" {span['triage']}", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(spans)), [s["label"] for s in spans])
    ax.set_ylim(-0.6, max(1, len(spans)) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first query")
    ax.set_title("When each alert fired (colour: triage)", fontsize=10, pad=14)
    return _png(fig)


def drift_runs(store: Any, profile: str, t0: float) -> list[tuple[float, float, bool]]:
    """(seconds since t0, p-value, drift?) of every finished run of ``profile``, oldest first."""
    out = []
    for run in store.drift_runs.list(profile, limit=1000):
        result = run.result or {}
        if result.get("status") == "done" and run.finished_at is not None and result.get("p_value") is not None:
            out.append((run.finished_at - t0, float(result["p_value"]), bool(result.get("is_drift"))))
    return sorted(out)


def write_report(out_dir: Path, agent: Any, summary: Any, phases: Sequence[Any], alerts: Sequence[Mapping[str, Any]],
                 drift_profile: str, alpha: float, thresholds: Mapping[str, float], p_floor: float) -> Path:
    """Render the report into ``out_dir/index.html``; returns its path."""
    t0, windows = phase_windows(agent.store, phases)
    end_s = max((w.end_s for w in windows), default=0.0)
    runs = drift_runs(agent.store, drift_profile, t0)
    firing = alert_spans([a for a in alerts if a.get("status") in ("firing", "resolved")], t0, max(end_s, *(r[0] for r in runs), 0.0))
    plots = {
        "latency": latency_plot(windows),
        "rates": rates_plot(summary.releases, thresholds),
        "drift": drift_plot(runs, alpha, windows, p_floor),
        "alerts": alerts_plot(firing, windows),
    }
    from rag_monitor.demo.signals import component_rows

    html = render("rag_monitor.demo", "report.html", plots=plots, summary=summary, windows=windows, alerts=firing,
                  signals=component_rows(getattr(summary, "signals", [])),
                  generated=datetime.now().strftime("%Y-%m-%d %H:%M"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    path.write_text(html)
    return path
