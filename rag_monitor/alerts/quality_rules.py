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
    w = f["window"]
    scored = 'verdict=~"supported|unsupported"'
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
  rag:unsupported_rate_scorer{{{PRODUCTION}}} > {_num(f["max_unsupported_ratio"])}
  and on (release, variant, scorer)
  rag:unsupported_rate_scorer_scored >= {f["min_scored"]}
  unless on (release, variant, scorer)
  rag:unsupported_rate_ppi_labels >= {f["min_labels"]},
  "basis", "scorer_only", "", "")""",
            f["for"], f["severity"],
            f"Unsupported-answer rate at least {{{{ $value | humanizePercentage }}}} for release {{{{ $labels.release }}}} "
            f"on variant {{{{ $labels.variant }}}} (scorer {{{{ $labels.scorer }}}}, basis {{{{ $labels.basis }}}}), above {_pct(f['max_unsupported_ratio'])}; "
            f"human labels: {LABELS_QUERY}.",
            f"""
Meaning: with basis prediction_powered, the lower end of the 95% interval of this release's
unsupported-answer rate (the scorer's probabilities on the scored sample corrected by at least
{f['min_labels']} human labels; valid whatever the scorer's calibration) exceeds {_pct(f['max_unsupported_ratio'])}. Until a
release has {f['min_labels']} human labels, basis scorer_only: the scorer's own weighted flag rate over the last
{w} exceeds {_pct(f['max_unsupported_ratio'])} on at least {f['min_scored']} of its scored answers (biased by the scorer's errors: compare
with rag:unsupported_rate_human and the release before acting on the level).
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
