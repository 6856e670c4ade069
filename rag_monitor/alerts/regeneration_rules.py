"""The regeneration-rate rule: regenerated queries per query against a control band learned from its own history.

The numerator is ``rag_regenerated_queries_total``: a query counts once whether the user clicked
regenerate, re-asked a near-duplicate, or both (``rag_regenerations_total{source}`` keeps the
signals apart for dashboards, and would count a click and its re-ask twice).

The band (per variant) is ``baseline ± sqrt(z² b(1-b)/n + t²_{S-1} s² (S+1)/(S-1))``:

- ``baseline`` ``b``: the ratio at the same hour of the week, averaged over the ``S`` past seasons
  present (at most ``seasons``; hour-of-week seasonality: nights and weekends differ);
- ``b(1-b)/n``: the binomial noise of the current window's ``n`` queries, so a quiet hour gets a
  wide band and a busy one a narrow band (``b`` at least ``1/n``: a history of zeros at low
  traffic would otherwise make one regeneration page); ``z = Φ⁻¹(1 - budget / (2 x windows per 30 days))``,
  two-sided, one independent window per ``window`` (Bonferroni over a month);
- ``s²``: ``stdvar`` (the population variance) of those ``S`` past ratios; ``s² S/(S-1)`` is the
  sample variance and ``(1 + 1/S)`` adds the error of the baseline itself: the prediction
  interval of a new season's value, whose spread estimated from ``S`` values needs Student's t with
  ``S - 1`` degrees of freedom at the same tail (``t_{S-1}``), not the normal: with 2 to 4 seasons
  the normal's 3.2 pages 50 to 190 times the budget when the week-to-week spread dominates (high
  traffic). The generator writes one ``t`` per season count (``band_t``) and the rule picks it by
  ``count``.

``benchmarks/regeneration_band.py`` measures its false pages with week-to-week variation at high
and low traffic and with a holiday week, with ``band_half_width`` below as the same formula in
Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, _alert, _indent, _num, _record
from rag_monitor.alerts.thresholds import format_duration, parse_duration

THIRTY_DAYS_S = 30 * 86400


def _month_tail(r: Mapping[str, Any]) -> float:
    """The two-sided tail probability per window: the false-page budget over a month's windows."""
    return r["false_pages_per_30d"] / (THIRTY_DAYS_S / parse_duration(r["window"]))


def band_z(r: Mapping[str, Any]) -> float:
    """The binomial term's z from the false-page budget of ``thresholds["regeneration"]`` (3 decimals)."""
    from statistics import NormalDist

    return round(NormalDist().inv_cdf(1 - _month_tail(r) / 2), 3)


def band_t(r: Mapping[str, Any]) -> dict[int, float]:
    """Seasons present -> Student's t quantile with ``seasons - 1`` degrees of freedom at the same
    two-sided tail as ``band_z`` (3 decimals), for every count the alert may run with."""
    return {s: round(student_t_quantile(1 - _month_tail(r) / 2, s - 1), 3) for s in range(r["min_seasons"], r["seasons"] + 1)}


def _student_t_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz and Stegun 26.7.3-4: closed forms)."""
    import math

    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(3, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
    term, total = 1.0, 1.0
    for k in range(2, df, 2):
        term *= c2 * (k - 1) / k
        total += term
    return math.sin(theta) * total


def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with integer ``df`` >= 1, by bisection (no scipy:
    the generator runs without the agent's extras)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"student_t_quantile: need 0.5 < p < 1 and df >= 1, got p={p!r}, df={df!r}")
    target = 2 * p - 1
    low, high = 0.0, 1.0
    while _student_t_two_sided(high, df) < target:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if _student_t_two_sided(mid, df) < target else (low, mid)
    return (low + high) / 2


def band_half_width(baseline, queries, season_variance, seasons, z: float, t, min_band: float):
    """The rule's half-width, in numpy (for the simulation): same formula as the PromQL.

    ``season_variance`` is the population variance (``stdvar``) of the ``seasons`` past ratios;
    ``t`` the Student quantile for that season count (``band_t``), an array or a number."""
    import numpy as np

    n = np.maximum(queries, 1)
    p = np.maximum(baseline, 1 / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = (z * z * p * (1 - p) / n
                    + np.square(t) * season_variance * (seasons + 1) / (seasons - 1))
    return np.maximum(np.sqrt(variance), min_band)


SIGNAL_MEANING = (
    # Regenerations are a candidate signal until blind review shows which way they point
    # (review/signals.py): the alert says whether that is established, never assumes it.
    '{{ with query "max by (verdict) (rag_signal_direction{signal=\'regenerate\'}) != 0" }}'
    "direction established by blind review (rag_signal_direction): regenerated answers are "
    '{{ range $i, $s := sortByLabel "verdict" . }}{{ if $i }}, {{ end }}{{ if gt $s.Value 0.0 }}more{{ else }}less{{ end }} often '
    '{{ reReplaceAll "_" " " $s.Labels.verdict }}{{ end }}'
    "{{ else }}direction not established: blind review has not shown that regenerations go with worse "
    "answers on this traffic (rag_signal_direction{signal=\"regenerate\"} 0 or absent); read the move as a "
    "change in how users re-ask, not as answer quality{{ end }}"
)
"""The ``signal_meaning`` annotation of the regeneration alert."""


def _regeneration_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    r = t["regeneration"]
    w = r["window"]
    z = band_z(r)
    ts = band_t(r)
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
            # Student's t for the seasons present (S - 1 degrees of freedom), one per count.
            _record("rag:regeneration_ratio:band_t", "\nor\n".join(
                f"0 * (rag:regeneration_ratio:baseline_seasons == {n}) + {_num(t)}" for n, t in ts.items())),
            # The binomial term's rate: at least one regeneration in the window, so a history of
            # zeros at low traffic does not make a single regeneration page.
            _record("rag:regeneration_ratio:binomial_p", """
rag:regeneration_ratio:baseline > 1 / clamp_min(rag:regeneration_ratio:queries, 1)
or
1 / clamp_min(rag:regeneration_ratio:queries, 1)"""),
            _record("rag:regeneration_ratio:half_width", f"""
clamp_min(
  sqrt(
    {_num(round(z * z, 6))} * rag:regeneration_ratio:binomial_p * (1 - rag:regeneration_ratio:binomial_p)
    / clamp_min(rag:regeneration_ratio:queries, 1)
    + rag:regeneration_ratio:band_t ^ 2 * rag:regeneration_ratio:baseline_stdvar
    * (rag:regeneration_ratio:baseline_seasons + 1) / (rag:regeneration_ratio:baseline_seasons - 1)
  ),
  {_num(r['min_band'])}
)"""),
            _record("rag:regeneration_ratio:band_high", "rag:regeneration_ratio:baseline + rag:regeneration_ratio:half_width"),
            _record("rag:regeneration_ratio:band_low", "clamp_min(rag:regeneration_ratio:baseline - rag:regeneration_ratio:half_width, 0)"),
        ]},
        {"name": "rag-regeneration-alerts", "rules": [_with_signal_meaning(_alert(
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
(hour-of-week seasonality: nights and weekends differ); the half-width adds {_num(z)} binomial standard
errors of this window's query count to Student's t ({", ".join(f"{_num(t)} with {n} seasons" for n, t in ts.items())})
times the week-to-week spread, which keeps false pages within {_num(r['false_pages_per_30d'])} per 30 days per variant (at least {_num(r['min_band'])});
it needs {r['min_queries']} queries in the window and {r['min_seasons']} seasons of history. Above the band users
re-ask more; whether that means answers fail them is for blind review to show (the signal_meaning annotation,
rag_signal_direction{{signal="regenerate"}}): until it does, the alert reports a change in behaviour, not in quality.
Below the band the regenerate control or its telemetry may be broken.
Check first: rag:regeneration_ratio:by_intent for the intents that carry the change,
rag_regenerations_total by source (explicit vs inferred near-duplicates) and
rag_feedback_total{{kind="thumbs_down"}}; in Phoenix, open sessions with several near-duplicate
queries and read the answers users rejected.
First step: if triage says regression, compare the release's answers with the previous release on
the re-asked queries and roll back if they got worse; if drift, look for a new topic or intent mix
(rag_queries_total by intent) and for documents missing from retrieval.""",
        ))]},
    ]


def _with_signal_meaning(alert: dict[str, Any]) -> dict[str, Any]:
    alert["annotations"]["signal_meaning"] = SIGNAL_MEANING
    return alert
