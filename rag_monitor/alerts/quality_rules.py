"""Answer-quality rules: faithfulness of scored answers and relevance-filter false exclusions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, _alert, _num, _pct, _record

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
rag:faithfulness_unsupported_ratio{{{PRODUCTION}}} > {_num(f["max_unsupported_ratio"])}
and on (variant, scorer)
rag:faithfulness_scored >= {f["min_scored"]}""",
            f["for"], f["severity"],
            f"Unsupported-answer rate {{{{ $value | humanizePercentage }}}} on variant {{{{ $labels.variant }}}} "
            f"(scorer {{{{ $labels.scorer }}}}) over the last {w}, above {_pct(f['max_unsupported_ratio'])}.",
            f"""
Meaning: among sampled answers scored for faithfulness in the last {w}, the share the scorer found
unsupported by the delivered context (weighted by inverse sampling probability; answers with no
claims excluded) exceeds {_pct(f['max_unsupported_ratio'])} on at least {f['min_scored']} scored answers.
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
