"""Index freshness and cache rules: commit-to-searchable lag over its SLO, queries served stale
documents, and an app cache whose hit rate collapses against its own recent past."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, _alert, _num, _pct, _record


def _ratio(part: str, whole: str, by: str, window: str) -> str:
    """``part / whole`` over ``window``, 0 (not absent) when ``part`` has no series yet."""
    return f"""
(
  sum by ({by}) (rate({part}[{window}]))
  or
  0 * sum by ({by}) (rate({whole}[{window}]))
)
/
(sum by ({by}) (rate({whole}[{window}])) > 0)"""


def _freshness_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    f = t["freshness"]
    w = f["window"]
    lag = "rag_index_freshness_lag_seconds"
    return [
        {"name": "rag-freshness-records", "rules": [
            *[_record(f"rag:index_freshness_lag_seconds:p{q}", f"histogram_quantile(0.{q}, sum by (le) (rate({lag}_bucket[{w}])))")
              for q in ("50", "99")],
            _record("rag:index_freshness_lag_seconds:events", f"sum(increase({lag}_count[{w}]))"),
            _record("rag:index_stale_ratio", _ratio("rag_index_stale_queries_total", "rag_index_checked_queries_total", "variant", w)),
            _record("rag:index_stale_ratio:checked", f"sum by (variant) (increase(rag_index_checked_queries_total[{w}]))"),
        ]},
        {"name": "rag-freshness-alerts", "rules": [
            _alert(
                t, "RagIndexFreshnessLagOverSLO",
                f"""
rag:index_freshness_lag_seconds:p99 > {_num(f['p99_slo_seconds'])}
and on ()
rag:index_freshness_lag_seconds:events >= {f['min_events']}""",
                f["for"], f["severity"],
                f"p99 index freshness lag {{{{ $value | humanizeDuration }}}} over the last {w}, above the "
                f"{_num(f['p99_slo_seconds'])}s SLO from commit to searchable.",
                f"""
Meaning: of the new document versions that became searchable in the last {w} (at least
{f['min_events']}), the slowest 1% took longer than {_num(f['p99_slo_seconds'])}s from their commit at the source
to being searchable: users are answered from documents the business has already changed.
Check first: rag:index_freshness_lag_seconds:p50 against p99 (everything slow: the indexer is
behind or stopped; a tail: one source), rag_index_freshness_lag_seconds_count by source for the
source that carries it, rag_index_events_total by outcome for malformed events, and
rag:index_stale_ratio for whether users already get stale documents; in Phoenix, open the
rag.index spans of the window sorted by rag.index.committed_at.
First step: if triage says regression, check whether the release changed the ingestion job or
its schedule and roll it back; if drift, look at the indexer's queue and the source's export
(a batch of backfilled documents shows as a spike in lag, not a stuck indexer).""",
            ),
            _alert(
                t, "RagStaleIndexServed",
                f"""
rag:index_stale_ratio{{{PRODUCTION}}} > {_num(f['max_stale_ratio'])}
and on (variant)
rag:index_stale_ratio:checked >= {f['min_checked_queries']}""",
                f["for"], f["severity"],
                f"{{{{ $value | humanizePercentage }}}} of checked queries on variant {{{{ $labels.variant }}}} over the last {w} "
                f"were served a document older than its newest version, above {_pct(f['max_stale_ratio'])}.",
                f"""
Meaning: among queries whose served documents carry a version (a commit time in their metadata)
that index events also know, more than {_pct(f['max_stale_ratio'])} (on at least {f['min_checked_queries']}) got a
document older than a version committed before the query started: users were answered from a
stale index.
Check first: sum by (release) (rate(rag_index_stale_queries_total[{w}])) for the release that
carries it, rag:index_freshness_lag_seconds:p99 (a slow indexer leaves committed versions
unsearchable for longer: everyone is served the old one meanwhile), and in Phoenix the retrieval spans of the window whose document.metadata committed_at is
old.
First step: if triage says regression, check which index or snapshot the release points at (a
release shipped with an old index) and roll back or repoint it; if drift, check index replicas
and caches in front of the index (a retrieval cache that outlives document updates).""",
            ),
        ]},
    ]


def _cache_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    c = t["cache"]
    w, base = c["window"], c["baseline_window"]
    by = "variant, cache"
    hit = 'rag_cache_requests_total{outcome="hit"}'
    baseline = _ratio(hit, "rag_cache_requests_total", by, base).replace(f"[{base}])", f"[{base}] offset {w})")
    floor = round(1 - c["max_relative_drop"], 6)
    return [
        {"name": "rag-cache-records", "rules": [
            _record("rag:cache_hit_ratio", _ratio(hit, "rag_cache_requests_total", by, w)),
            # The preceding baseline_window, ending where the current window starts.
            _record("rag:cache_hit_ratio:baseline", baseline),
            _record("rag:cache_hit_ratio:requests", f"sum by ({by}) (increase(rag_cache_requests_total[{w}]))"),
            # The provider's prompt cache, in tokens (for dashboards; its cost saved is rag_cache_saved_usd_total).
            _record("rag:prompt_cache_token_ratio", _ratio('rag_tokens_total{kind="cached_prompt"}', 'rag_tokens_total{kind="prompt"}', "variant", w)),
        ]},
        {"name": "rag-cache-alerts", "rules": [_alert(
            t, "RagCacheHitRateCollapsed",
            f"""
rag:cache_hit_ratio{{{PRODUCTION}}} < {_num(floor)} * rag:cache_hit_ratio:baseline
and on ({by}) rag:cache_hit_ratio:baseline >= {_num(c['min_baseline_ratio'])}
and on ({by}) rag:cache_hit_ratio:requests >= {c['min_requests']}""",
            c["for"], c["severity"],
            f"The {{{{ $labels.cache }}}} cache hit rate on variant {{{{ $labels.variant }}}} fell to {{{{ $value | humanizePercentage }}}} "
            f"over the last {w}, below {_pct(floor)} of its rate over the preceding {base}.",
            f"""
Meaning: the share of the app's {{embedding, retrieval, response}} cache lookups served from the
cache over the last {w} fell below {_pct(floor)} of what it was over the {base} before (which was at
least {_pct(c['min_baseline_ratio'])}), on at least {c['min_requests']} lookups: each miss now pays
for an embedding, a search or a generation the cache used to absorb, in cost and latency.
Check first: sum by (release, outcome) (rate(rag_cache_requests_total[{w}])) for a release
that changed cache keys, rag:query_cost_usd:mean and rag_query_component_cost_usd by component
for what the misses cost, and rag:prompt_cache_token_ratio for the provider's prompt cache; in
Phoenix, compare the rag.cache attributes of root spans before and after the drop.
First step: if triage says regression, diff the release's cache key (prompt template, embedding
model, normalisation) and its TTL and roll back; if drift, check the cache service's evictions
and memory, and a shift to new queries (rag_drift_detected) that the cache has never seen.""",
        )]},
    ]

