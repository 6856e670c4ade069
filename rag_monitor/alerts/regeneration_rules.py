"""The regeneration-rate rule: regenerations per query against a control band learned from its own history."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import _alert, _indent, _num, _record
from rag_monitor.alerts.thresholds import format_duration, parse_duration

def _regeneration_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    r = t["regeneration"]
    w = r["window"]
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
  sum by (variant) (rate(rag_regenerations_total[{w}]))
  or
  0 * sum by (variant) (rate(rag_queries_total[{w}]))
)
/
(sum by (variant) (rate(rag_queries_total[{w}])) > 0)"""),
            _record("rag:regeneration_ratio:queries", f"sum by (variant) (increase(rag_queries_total[{w}]))"),
            # Seasonal baseline: the ratio at the same time of the previous seasons (hour of week).
            _record("rag:regeneration_ratio:baseline", f"avg without (season) (\n{_indent(seasons, 2)}\n)"),
            _record("rag:regeneration_ratio:baseline_seasons", f"count without (season) (\n{_indent(seasons, 2)}\n)"),
            _record("rag:regeneration_ratio:spread", f"stddev_over_time(rag:regeneration_ratio[{r['spread_window']}])"),
            _record("rag:regeneration_ratio:band_high", f"""
rag:regeneration_ratio:baseline
+ on (variant)
clamp_min({_num(r['k'])} * rag:regeneration_ratio:spread, {_num(r['min_band'])})"""),
            _record("rag:regeneration_ratio:band_low", f"""
clamp_min(
  rag:regeneration_ratio:baseline
  - on (variant)
  clamp_min({_num(r['k'])} * rag:regeneration_ratio:spread, {_num(r['min_band'])}),
  0
)"""),
        ]},
        {"name": "rag-regeneration-alerts", "rules": [_alert(
            t, "RagRegenerationRateOutsideBand",
            f"""
(
  rag:regeneration_ratio > on (variant) rag:regeneration_ratio:band_high
  or
  rag:regeneration_ratio < on (variant) rag:regeneration_ratio:band_low
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
Meaning: regenerations per query over the last {w} left the control band learned from the ratio's
own history: the baseline is its mean at the same time of week over the last {r['seasons']} x {r['season']}
(hour-of-week seasonality: nights and weekends differ), the half-width {_num(r['k'])} standard deviations
of the ratio over {r['spread_window']} (at least {_num(r['min_band'])}); it needs {r['min_queries']} queries in the window
and {r['min_seasons']} seasons of history. Above the band users re-ask because answers fail them; below
it the regenerate control or its telemetry may be broken.
Check first: rag_regenerations_total by source (explicit vs inferred near-duplicates) and
rag_feedback_total{{kind="thumbs_down"}}; in Phoenix, open sessions with several near-duplicate
queries and read the answers users rejected.
First step: if triage says regression, compare the release's answers with the previous release on
the re-asked queries and roll back if they got worse; if drift, look for a new topic or intent mix
(rag_queries_total by intent) and for documents missing from retrieval.""",
        )]},
    ]
