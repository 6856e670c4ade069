"""The regeneration-rate rule: regenerated queries per query against a control band learned from its own history.

The numerator is ``rag_regenerated_queries_total``: a query counts once whether the user clicked
regenerate, re-asked a near-duplicate, or both (``rag_regenerations_total{source}`` keeps the
signals apart for dashboards, and would count a click and its re-ask twice).

The band (per variant) is ``baseline ± z x sqrt(b(1-b)/n + s² (1 + 1/S))``:

- ``baseline`` ``b``: the ratio at the same hour of the week, averaged over the last ``S`` seasons
  (hour-of-week seasonality: nights and weekends differ);
- ``b(1-b)/n``: the binomial noise of the current window's ``n`` queries, so a quiet hour gets a
  wide band and a busy one a narrow band;
- ``s²``: the variance of those ``S`` past ratios (week-to-week variation and their own noise),
  plus ``s²/S`` for the error of the baseline itself;
- ``z``: from the false-page budget, ``z = Φ⁻¹(1 - budget / (2 x windows per 30 days))``,
  two-sided, one independent window per ``window`` (Bonferroni over a month).

``benchmarks/drift_month.py`` measures its false pages on a month of stationary traffic with a
daily cycle, with ``band_half_width`` below as the same formula in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, _alert, _indent, _num, _record
from rag_monitor.alerts.thresholds import format_duration, parse_duration

THIRTY_DAYS_S = 30 * 86400


def band_z(r: Mapping[str, Any]) -> float:
    """The band's z from the false-page budget of ``thresholds["regeneration"]`` (3 decimals)."""
    from statistics import NormalDist

    windows = THIRTY_DAYS_S / parse_duration(r["window"])
    return round(NormalDist().inv_cdf(1 - r["false_pages_per_30d"] / (2 * windows)), 3)


def band_half_width(baseline, queries, season_variance, seasons, z: float, min_band: float):
    """The rule's half-width, in numpy (for the simulation): same formula as the PromQL."""
    import numpy as np

    variance = baseline * (1 - baseline) / np.maximum(queries, 1) + season_variance * (1 + 1 / seasons)
    return np.maximum(z * np.sqrt(variance), min_band)


def _regeneration_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    r = t["regeneration"]
    w = r["window"]
    z = band_z(r)
    season = parse_duration(r["season"])
    seasons = "\nor\n".join(
        f'label_replace(rag:regeneration_ratio offset {format_duration(season * i)}, "season", "{i}", "", "")'
        for i in range(1, r["seasons"] + 1)
    )
    return [
        {"name": "rag-regeneration-records", "rules": [
            # No regeneration at all is a 0 (and below the band), not a missing series.
            _record("rag:regeneration_ratio", f"""
(
  sum by (variant) (rate(rag_regenerated_queries_total[{w}]))
  or
  0 * sum by (variant) (rate(rag_queries_total[{w}]))
)
/
(sum by (variant) (rate(rag_queries_total[{w}])) > 0)"""),
            _record("rag:regeneration_ratio:queries", f"sum by (variant) (increase(rag_queries_total[{w}]))"),
            # Per intent, for dashboards (no alert: one per intent would multiply the false pages).
            _record("rag:regeneration_ratio:by_intent", f"""
(
  sum by (variant, intent) (rate(rag_regenerated_queries_total[{w}]))
  or
  0 * sum by (variant, intent) (rate(rag_queries_total[{w}]))
)
/
(sum by (variant, intent) (rate(rag_queries_total[{w}])) > 0)"""),
            # Seasonal baseline: the ratio at the same time of the previous seasons (hour of week).
            _record("rag:regeneration_ratio:baseline", f"avg without (season) (\n{_indent(seasons, 2)}\n)"),
            _record("rag:regeneration_ratio:baseline_seasons", f"count without (season) (\n{_indent(seasons, 2)}\n)"),
            _record("rag:regeneration_ratio:baseline_stdvar", f"stdvar without (season) (\n{_indent(seasons, 2)}\n)"),
            _record("rag:regeneration_ratio:half_width", f"""
clamp_min(
  {_num(z)} * sqrt(
    rag:regeneration_ratio:baseline * (1 - rag:regeneration_ratio:baseline)
    / clamp_min(rag:regeneration_ratio:queries, 1)
    + rag:regeneration_ratio:baseline_stdvar * (1 + 1 / rag:regeneration_ratio:baseline_seasons)
  ),
  {_num(r['min_band'])}
)"""),
            _record("rag:regeneration_ratio:band_high", "rag:regeneration_ratio:baseline + rag:regeneration_ratio:half_width"),
            _record("rag:regeneration_ratio:band_low", "clamp_min(rag:regeneration_ratio:baseline - rag:regeneration_ratio:half_width, 0)"),
        ]},
        {"name": "rag-regeneration-alerts", "rules": [_alert(
            t, "RagRegenerationRateOutsideBand",
            f"""
(
  rag:regeneration_ratio{{{PRODUCTION}}} > on (variant) rag:regeneration_ratio:band_high
  or
  rag:regeneration_ratio{{{PRODUCTION}}} < on (variant) rag:regeneration_ratio:band_low
)
and on (variant) rag:regeneration_ratio:queries >= {r['min_queries']}
and on (variant) rag:regeneration_ratio:baseline_seasons >= {r['min_seasons']}""",
            r["for"], r["severity"],
            f"Regeneration rate {{{{ $value | humanizePercentage }}}} on variant {{{{ $labels.variant }}}} over the last {w} "
            f"is outside its learned band "
            + "".join(
                f"""{{{{ with printf "rag:regeneration_ratio:band_{edge}{{variant='%s'}}" $labels.variant | query }}}}"""
                f"{{{{ . | first | value | humanizePercentage }}}}{{{{ end }}}}{sep}"
                for edge, sep in (("low", " to "), ("high", "."))
            ),
            f"""
Meaning: regenerated queries per query over the last {w} (a regenerate click and the re-ask it triggers are one) left the control band learned from the ratio's
own history: the baseline is its mean at the same time of week over the last {r['seasons']} x {r['season']}
(hour-of-week seasonality: nights and weekends differ); the half-width is {_num(z)} standard errors, where
the error adds the binomial noise of this window's query count to the week-to-week variance, and
{_num(z)} keeps false pages within {_num(r['false_pages_per_30d'])} per 30 days per variant (at least {_num(r['min_band'])});
it needs {r['min_queries']} queries in the window and {r['min_seasons']} seasons of history. Above the band users
re-ask because answers fail them; below it the regenerate control or its telemetry may be broken.
Check first: rag:regeneration_ratio:by_intent for the intents that carry the change,
rag_regenerations_total by source (explicit vs inferred near-duplicates) and
rag_feedback_total{{kind="thumbs_down"}}; in Phoenix, open sessions with several near-duplicate
queries and read the answers users rejected.
First step: if triage says regression, compare the release's answers with the previous release on
the re-asked queries and roll back if they got worse; if drift, look for a new topic or intent mix
(rag_queries_total by intent) and for documents missing from retrieval.""",
        )]},
    ]
