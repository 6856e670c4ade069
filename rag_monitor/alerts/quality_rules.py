"""Answer-quality rules: faithfulness of scored answers and relevance-filter false exclusions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, _alert, _num, _pct, _record

# The labels the page rests on (0 when it is the scorer's own rate).
LABELS_QUERY = ('{{ with printf "rag:unsupported_rate_ppi_labels{release=\\"%s\\",variant=\\"%s\\",scorer=\\"%s\\"}" '
                '$labels.release $labels.variant $labels.scorer | query }}{{ . | first | value }}{{ else }}0{{ end }}')

def _faithfulness_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = t["faithfulness"]
    w, hold = f["window"], t["triage"]["hold"]
    scored = 'verdict=~"supported|unsupported"'
    newest, previous = 'rag:triage:release_newest{guardrail="faithfulness"}', 'rag:triage:release_previous{guardrail="faithfulness"}'
    return [
        {"name": "rag-faithfulness-records", "rules": [
            # Counters appear with their first increment: "or 0 * ..." makes no unsupported answer a 0.
            _record("rag:faithfulness_unsupported_ratio", f"""
(
  sum by (variant, scorer) (increase(rag_faithfulness_weighted_total{{verdict="unsupported"}}[{w}]))
  or
  0 * sum by (variant, scorer) (increase(rag_faithfulness_weighted_total[{w}]))
)
/
(sum by (variant, scorer) (increase(rag_faithfulness_weighted_total{{{scored}}}[{w}])) > 0)"""),
            _record("rag:faithfulness_scored", f'sum by (variant, scorer) (increase(rag_faithfulness_scored_total{{{scored}}}[{w}]))'),
            # The scorer's own flag rate per release: biased by its errors, compared release
            # against release as a fast regression signal, never the level a team reads.
            _record("rag:unsupported_rate_scorer", f"""
(
  sum by (release, variant, scorer) (increase(rag_faithfulness_weighted_total{{verdict="unsupported"}}[{w}]))
  or
  0 * sum by (release, variant, scorer) (increase(rag_faithfulness_weighted_total[{w}]))
)
/
(sum by (release, variant, scorer) (increase(rag_faithfulness_weighted_total{{{scored}}}[{w}])) > 0)"""),
            _record("rag:unsupported_rate_scorer_scored", f'sum by (release, variant, scorer) (increase(rag_faithfulness_scored_total{{{scored}}}[{w}]))'),
            # Release against release on the scored sample, over each release's life (up to
            # triage.hold): the newest release serving production against the one before it (as
            # triage names them), per variant and scorer. Rates are weighted; n are scored answers.
            _record("rag:unsupported_rate_scorer_release", f"""
(
  sum by (release, variant, scorer) (increase(rag_faithfulness_weighted_total{{verdict="unsupported",{PRODUCTION}}}[{hold}]))
  or
  0 * sum by (release, variant, scorer) (increase(rag_faithfulness_weighted_total{{{PRODUCTION}}}[{hold}]))
)
/
(sum by (release, variant, scorer) (increase(rag_faithfulness_weighted_total{{{scored},{PRODUCTION}}}[{hold}])) > 0)"""),
            _record("rag:unsupported_rate_scorer_release_scored",
                    f"sum by (release, variant, scorer) (increase(rag_faithfulness_scored_total{{{scored},{PRODUCTION}}}[{hold}]))"),
            _record("rag:faithfulness_comparison_newest_rate", f"rag:unsupported_rate_scorer_release and on (release) {newest}"),
            _record("rag:faithfulness_comparison_newest_scored", f"rag:unsupported_rate_scorer_release_scored and on (release) {newest}"),
            # The previous release's figures lose their release label (to match the newest's) and
            # keep its name as compared_with.
            _record("rag:faithfulness_comparison_previous_rate", f"""
max without (release) (
  label_replace(rag:unsupported_rate_scorer_release and on (release) {previous}, "compared_with", "$1", "release", "(.*)")
)"""),
            _record("rag:faithfulness_comparison_previous_scored",
                    f"max without (release) (rag:unsupported_rate_scorer_release_scored and on (release) {previous})"),
            # The pooled two-proportion z statistic (the score test: under "no change" both releases
            # share one rate, whose pooled estimate gives the null variance); positive = newest worse.
            _record("rag:faithfulness_comparison_pooled_rate", """
(
  rag:faithfulness_comparison_newest_rate * rag:faithfulness_comparison_newest_scored
  + on (variant, scorer) group_left ()
  max without (compared_with) (rag:faithfulness_comparison_previous_rate * on (variant, scorer) group_left () rag:faithfulness_comparison_previous_scored)
)
/
(rag:faithfulness_comparison_newest_scored + on (variant, scorer) group_left () rag:faithfulness_comparison_previous_scored)"""),
            _record("rag:faithfulness_comparison_z", """
(rag:faithfulness_comparison_newest_rate - on (variant, scorer) group_left () max without (compared_with) (rag:faithfulness_comparison_previous_rate))
/
sqrt(
  rag:faithfulness_comparison_pooled_rate * (1 - rag:faithfulness_comparison_pooled_rate)
  * (1 / rag:faithfulness_comparison_newest_scored + on (variant, scorer) group_left () (1 / rag:faithfulness_comparison_previous_scored))
)"""),
            # Every replica computes the review-based gauges from the shared store: deduplicate with max.
            _record("rag:unsupported_rate_ppi", "max by (release, variant, scorer, bound) (rag_unsupported_rate_ppi)"),
            _record("rag:unsupported_rate_ppi_labels", "max by (release, variant, scorer) (rag_unsupported_rate_ppi_labels)"),
            _record("rag:unsupported_rate_human", "max by (release, variant, scorer, bound) (rag_unsupported_rate_human)"),
            _record("rag:faithfulness_no_claims_ratio", f"""
(
  sum by (variant, scorer) (increase(rag_faithfulness_weighted_total{{verdict="no_claims"}}[{w}]))
  or
  0 * sum by (variant, scorer) (increase(rag_faithfulness_weighted_total[{w}]))
)
/
(sum by (variant, scorer) (increase(rag_faithfulness_weighted_total[{w}])) > 0)"""),
        ]},
        {"name": "rag-faithfulness-alerts", "rules": [_alert(
            t, "RagFaithfulnessLow",
            f"""
label_replace(
  max without (bound) (rag:unsupported_rate_ppi{{bound="lower",{PRODUCTION}}}) > {_num(f["max_unsupported_ratio"])}
  and on (release, variant, scorer)
  rag:unsupported_rate_ppi_labels >= {f["min_labels"]},
  "basis", "prediction_powered", "", "")
or
label_replace(
  (
    rag:faithfulness_comparison_newest_rate{{{PRODUCTION}}}
    and on (release, variant, scorer) (rag:faithfulness_comparison_z > {_num(f["comparison_z"])})
    and on (release, variant, scorer) (rag:faithfulness_comparison_newest_scored >= {f["min_scored"]})
    and on (variant, scorer) (rag:faithfulness_comparison_previous_scored >= {f["min_scored"]})
    unless on (release, variant, scorer) (rag:unsupported_rate_ppi_labels >= {f["min_labels"]})
  )
  * on (variant, scorer) group_left (compared_with) (rag:faithfulness_comparison_previous_rate * 0 + 1),
  "basis", "scorer_comparison", "", "")""",
            f["for"], f["severity"],
            f'{{{{ if eq $labels.basis "prediction_powered" }}}}Unsupported-answer rate at least {{{{ $value | humanizePercentage }}}} '
            f"for release {{{{ $labels.release }}}} on variant {{{{ $labels.variant }}}} (scorer {{{{ $labels.scorer }}}}, basis prediction_powered), "
            f"above {_pct(f['max_unsupported_ratio'])}{{{{ else }}}}The scorer flags {{{{ $value | humanizePercentage }}}} of release "
            f"{{{{ $labels.release }}}}'s scored answers on variant {{{{ $labels.variant }}}} (scorer {{{{ $labels.scorer }}}}, basis scorer_comparison), "
            f"significantly more than release {{{{ $labels.compared_with }}}} (two-proportion z above {_num(f['comparison_z'])}; "
            f"a regression signal, not the level){{{{ end }}}}; human labels: {LABELS_QUERY}.",
            f"""
Meaning: with basis prediction_powered, the lower end of the 95% interval of this release's
unsupported-answer rate (the scorer's probabilities on the scored sample corrected by at least
{f['min_labels']} human labels; valid whatever the scorer's calibration) exceeds {_pct(f['max_unsupported_ratio'])}: the level. The
scorer's own flag rate is never the level (it is biased by the scorer's errors). Until a release has
{f['min_labels']} human labels, basis scorer_comparison: the scorer flags significantly more of the newest release's
scored answers than of the release before it (weighted flag rates over each release's life up to
{hold}, at least {f['min_scored']} scored answers each; pooled two-proportion z above {_num(f['comparison_z'])}, one-sided, strict
because it is re-tested at every evaluation): a regression, whatever the scorer's bias, since both
releases are scored by the same scorer. It says nothing about the level: review the release's
answers (rag-monitor review) to get one.
Check first: in Phoenix, open the project's traces with a faithfulness annotation below the
threshold and compare the retrieval documents with the answer; then
sum by (release) (increase(rag_faithfulness_weighted_total{{verdict="unsupported"}}[{w}])) to see
whether one release carries the unsupported answers, and rag_scorer_info for a scorer change.
First step: if triage says regression, compare that release's unsupported rate with the previous
release's and roll back if it alone is bad; if drift, check rag_drift_detected for document or
query drift and the retrieval stage (empty or off-topic contexts) before the generator.""",
        )]},
    ]


def _filter_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    fx = t["filter_false_exclusion"]
    w = t["latency"]["window"]
    # Every replica computes the review-based gauges from the shared store: deduplicate with max.
    return [
        {"name": "rag-filter-records", "rules": [
            _record("rag:filter_exclusion_ratio", f"""
sum by (variant, filter_kind, outcome) (rate(rag_filter_exclusions_total[{w}]))
/ on (variant) group_left ()
(sum by (variant) (rate(rag_queries_total[{w}])) > 0)"""),
            _record("rag:filter_false_exclusion_ratio", "max by (release) (rag_filter_false_exclusion_ratio)"),
            _record("rag:filter_false_exclusion_eligible", "max by (release) (rag_filter_false_exclusion_eligible)"),
            # Across releases, from the counts (unweighted); the per-release gauge is weighted.
            _record("rag:filter_false_exclusion_ratio:all", """
sum(max by (release) (rag_filter_false_exclusions))
/
(sum(max by (release) (rag_filter_false_exclusion_eligible)) > 0)"""),
        ]},
        {"name": "rag-filter-alerts", "rules": [_alert(
            t, "RagFilterFalseExclusionsHigh",
            f"""
rag:filter_false_exclusion_ratio > {_num(fx['max_ratio'])}
and on (release)
rag:filter_false_exclusion_eligible >= {fx['min_eligible']}""",
            fx["for"], fx["severity"],
            f"Relevance filters removed every eligible gold document in {{{{ $value | humanizePercentage }}}} of reviewed "
            f"queries of release {{{{ $labels.release }}}}, above {_pct(fx['max_ratio'])}.",
            f"""
Meaning: among reviewed queries of this release with at least one entitlement-eligible gold
document (at least {fx['min_eligible']}), the share where a relevance filter (locale, version, recency,
category) removed all of them exceeds {_pct(fx['max_ratio'])}. Entitlement filters never count.
Check first: rag:filter_exclusion_ratio by filter_kind and outcome (emptied, removed_topk) for the
filter that grew; in Phoenix, open traces of reviewed queries with rag.filter.kind=relevance and
compare rag.filter.predicate with the gold documents' metadata.
First step: if triage says regression, diff that release's relevance-filter predicates and
defaults and relax the one that grew; if drift, check for documents whose metadata (locale,
version, dates) changed in the corpus, and for new intents the filters do not anticipate.""",
        )]},
    ]
