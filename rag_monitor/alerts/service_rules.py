"""Service-level rules: query latency against its SLOs and cost per query against its budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, _alert, _num, _record

def _quantile_records(metric: str, by: str, window: str) -> list[dict[str, str]]:
    base = metric.removeprefix("rag_")
    return [
        _record(f"rag:{base}:p{q}", f"histogram_quantile(0.{q}, sum by (le, {by}) (rate({metric}_bucket[{window}])))")
        for q in ("50", "95", "99")
    ]


def _latency_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    lat = t["latency"]
    w = lat["window"]
    # The SLO is read per release as well as per variant: a slow canary breaches it although the
    # service's pooled quantile would not, and a release that makes an already-slow service slower
    # is its own incident (its own triage), not a continuation of the older release's page.
    guard = f"and on (release, variant)\nrag:query_duration_seconds:release_queries >= {lat['min_queries']}"
    runbook = f"""
Meaning: the end-to-end query latency quantile of one release over the last {w} exceeds its SLO
on at least {lat['min_queries']} of its queries. Check first: rag:stage_duration_seconds:p95 by stage shows which stage
(retrieve, rerank, generate, ...) grew; in Phoenix, sort the slowest traces of the window and open
their spans; rag_time_to_first_token_seconds separates model latency from retrieval.
First step: if triage says regression, diff the slow stage's configuration in that release (top-k,
reranker, model) and roll back if the slow stage changed; if drift, check the provider's status,
token counts (rag_tokens_total) for longer prompts or answers, and the store/vector index latency."""
    return [
        {"name": "rag-latency-records", "rules": [
            *_quantile_records("rag_query_duration_seconds", "variant", w),
            *_quantile_records("rag_stage_duration_seconds", "stage, variant", w),
            _record("rag:query_duration_seconds:queries", f"sum by (variant) (increase(rag_query_duration_seconds_count[{w}]))"),
            *(_record(f"rag:query_duration_seconds:release_p{q}",
                      f"histogram_quantile(0.{q}, sum by (le, release, variant) (rate(rag_query_duration_seconds_bucket[{w}])))")
              for q in ("95", "99")),
            _record("rag:query_duration_seconds:release_queries",
                    f"sum by (release, variant) (increase(rag_query_duration_seconds_count[{w}]))"),
        ]},
        {"name": "rag-latency-alerts", "rules": [
            _alert(
                t, "RagQueryLatencyOverSLO",
                f"rag:query_duration_seconds:release_p95{{{PRODUCTION}}} > {_num(lat['p95_slo_seconds'])}\n{guard}",
                lat["p95_for"], "warning",
                f"p95 query latency {{{{ $value | humanizeDuration }}}} of release {{{{ $labels.release }}}} on variant {{{{ $labels.variant }}}} over the last {w}, "
                f"above the {_num(lat['p95_slo_seconds'])}s SLO.",
                runbook, {"quantile": "p95"},
            ),
            _alert(
                t, "RagQueryLatencyOverSLO",
                f"rag:query_duration_seconds:release_p99{{{PRODUCTION}}} > {_num(lat['p99_slo_seconds'])}\n{guard}",
                lat["p99_for"], "page",
                f"p99 query latency {{{{ $value | humanizeDuration }}}} of release {{{{ $labels.release }}}} on variant {{{{ $labels.variant }}}} over the last {w}, "
                f"above the {_num(lat['p99_slo_seconds'])}s paging SLO.",
                runbook, {"quantile": "p99"},
            ),
        ]},
    ]


def _cost_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    c = t["cost"]
    w = c["window"]
    return [
        {"name": "rag-cost-records", "rules": [
            _record("rag:query_cost_usd:mean", f"""
sum by (variant) (rate(rag_query_cost_usd_sum[{w}]))
/
(sum by (variant) (rate(rag_query_cost_usd_count[{w}])) > 0)"""),
            _record("rag:query_cost_usd:p50", f"histogram_quantile(0.5, sum by (le, variant) (rate(rag_query_cost_usd_bucket[{w}])))"),
            _record("rag:query_cost_usd:p99", f"histogram_quantile(0.99, sum by (le, variant) (rate(rag_query_cost_usd_bucket[{w}])))"),
            _record("rag:query_cost_usd:queries", f"sum by (variant) (increase(rag_query_cost_usd_count[{w}]))"),
        ]},
        {"name": "rag-cost-alerts", "rules": [_alert(
            t, "RagCostPerQueryOverBudget",
            f"""
rag:query_cost_usd:mean{{{PRODUCTION}}} > {_num(c['max_usd_per_query'])}
and on (variant)
rag:query_cost_usd:queries >= {c['min_queries']}""",
            c["for"], c["severity"],
            f"Mean cost per query {{{{ $value | printf \"%.4f\" }}}} USD on variant {{{{ $labels.variant }}}} over the last {w}, "
            f"above the {_num(c['max_usd_per_query'])} USD budget.",
            f"""
Meaning: the mean generation cost per query over the last {w} (tokens times the agent's price
table) exceeds {_num(c['max_usd_per_query'])} USD on at least {c['min_queries']} queries.
Check first: rag_tokens_total by kind and model (longer prompts from more or larger retrieved
chunks, longer completions, or a pricier model), rag:query_cost_usd:p99 against p50 for a few
very expensive queries, rag_unpriced_queries_total for a price-table gap; in Phoenix, sort LLM
spans by llm.token_count.total.
First step: if triage says regression, diff the release's model, top-k and prompt template and
roll back or cap them; if drift, check for a price-table change and a shift to long queries or
intents that retrieve more context.""",
        )]},
    ]
