"""Compare what agents exported (their ``/metrics`` text, summed over replicas) with the truth.

``compare(truth, scrapes, ...)`` returns one ``Check`` per quantity, each with what was expected
and what was found; a check fails loudly with its name. Counters and histogram counts must be
equal, sums equal to floating-point rounding, cost per model to 1e-9 USD.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from rag_monitor.simulate.truth import Truth

REL = 1e-9


@dataclass
class Check:
    name: str
    expected: object
    actual: object
    ok: bool

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: expected {self.expected!r}, got {self.actual!r}"


class Samples:
    """Every sample of every scrape, summed over replicas by (name, labels)."""

    def __init__(self, texts: list[str]):
        from prometheus_client.parser import text_string_to_metric_families

        self.values: dict[tuple[str, frozenset], float] = defaultdict(float)
        for text in texts:
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    self.values[(s.name, frozenset(s.labels.items()))] += s.value

    def sum(self, name: str, **match: str) -> float:
        want = set(match.items())
        return sum(v for (n, labels), v in self.values.items() if n == name and want <= labels)

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(labels).get(label) for (n, labels) in self.values if n == name} - {None}


def _eq(name: str, expected, actual, checks: list[Check], rel: float = 0.0) -> None:
    ok = math.isclose(expected, actual, rel_tol=rel, abs_tol=rel) if rel else expected == actual
    checks.append(Check(name, expected, actual, ok))


def compare(truth: Truth, texts: list[str], top_releases: int = 10, top_intents: int = 20,
            single_agent: bool = True) -> list[Check]:
    m = Samples(texts)
    checks: list[Check] = []
    records = truth.records
    _eq("queries", len(records), m.sum("rag_queries_total"), checks)
    for variant in ("production", "shadow"):
        _eq(f"queries{{variant={variant}}}", sum(q.variant == variant for q in records),
            m.sum("rag_queries_total", variant=variant), checks)
    _eq("partial traces", truth.partial_traces, m.sum("rag_agent_traces_partial_total"), checks)
    _eq("spans received", truth.spans_sent, m.sum("rag_agent_spans_received_total"), checks)
    _eq("query errors", sum(truth.errors.values()), m.sum("rag_query_errors_total"), checks)
    _eq("refusals", sum(truth.refusals.values()), m.sum("rag_refusals_total"), checks)

    # Histograms: counts exact, sums to rounding, over every release and variant.
    for name, hist in (("rag_query_duration_seconds", truth.query_duration), ("rag_query_cost_usd", truth.query_cost),
                       ("rag_time_to_first_token_seconds", truth.ttft)):
        _eq(f"{name}_count", sum(h.count for h in hist.values()), m.sum(name + "_count"), checks)
        _eq(f"{name}_sum", sum(h.sum for h in hist.values()), m.sum(name + "_sum"), checks, rel=REL)
    for le in ("0.1", "0.5", "1.0", "2.5"):
        _eq(f"rag_query_duration_seconds_bucket{{le={le}}}", sum(h.bucket(float(le)) for h in truth.query_duration.values()),
            m.sum("rag_query_duration_seconds_bucket", le=le), checks)
    by_stage: dict[str, list[float]] = defaultdict(list)
    for (stage, _release, _variant), h in truth.stage_duration.items():
        by_stage[stage].extend(h.values)
    for stage, values in sorted(by_stage.items()):
        _eq(f"stage {stage} count", len(values), m.sum("rag_stage_duration_seconds_count", stage=stage), checks)
        _eq(f"stage {stage} sum", sum(values), m.sum("rag_stage_duration_seconds_sum", stage=stage), checks, rel=REL)

    # Cost and tokens per model: each call priced with its own model.
    for model, usd in sorted(truth.cost.items()):
        _eq(f"cost {model}", usd, m.sum("rag_cost_usd_total", model=model), checks, rel=REL)
    _eq("cost total", sum(truth.cost.values()), m.sum("rag_cost_usd_total"), checks, rel=REL)
    for component, h in sorted(truth.component_cost.items()):
        _eq(f"component {component} count", h.count, m.sum("rag_query_component_cost_usd_count", component=component), checks)
        _eq(f"component {component} sum", h.sum, m.sum("rag_query_component_cost_usd_sum", component=component), checks, rel=REL)
    _eq("prompt cache saved", truth.prompt_cache_saved, m.sum("rag_cache_saved_usd_total", cache="prompt"), checks, rel=REL)
    for (kind, model), n in sorted(truth.tokens.items()):
        if n:
            _eq(f"tokens {kind} {model}", n, m.sum("rag_tokens_total", kind=kind, model=model), checks)
    _eq("unpriced", 0, m.sum("rag_unpriced_queries_total"), checks)

    # Feedback (duplicates once), regenerations, filters.
    for kind, n in sorted(truth.feedback.items()):
        _eq(f"feedback {kind}", n, m.sum("rag_feedback_total", kind=kind), checks)
    for source in ("explicit", "inferred"):
        _eq(f"regenerations {source}", truth.regenerations[source], m.sum("rag_regenerations_total", source=source), checks)
    # Regenerated queries, each once (a click and its re-ask are one); the rate itself is checked
    # through the recording rule (tests/oracle/harness.py).
    for variant in ("production", "shadow"):
        _eq(f"regenerated queries {variant}", sum(v == variant for v in truth.regenerated.values()),
            m.sum("rag_regenerated_queries_total", variant=variant), checks)
    _eq("regenerated queries", len(truth.regenerated), m.sum("rag_regenerated_queries_total"), checks)
    for kind, n in sorted(truth.filter_queries.items()):
        _eq(f"filtered queries {kind}", n, m.sum("rag_filter_queries_total", filter_kind=kind), checks)
    for kind in ("entitlement", "relevance"):
        for outcome in ("emptied", "removed_topk"):
            _eq(f"filter exclusions {kind} {outcome}", truth.filter_exclusions[(kind, outcome)],
                m.sum("rag_filter_exclusions_total", filter_kind=kind, outcome=outcome), checks)

    # Releases: the newest N have their own series (first-seen time, and all their queries).
    newest = truth.newest_releases(top_releases)
    seen = m.label_values("rag_release_first_seen_timestamp_seconds", "release")
    _eq("newest releases have a first-seen series", sorted(newest), sorted(set(newest) & seen), checks)
    for release in newest:
        _eq(f"queries of release {release}", sum(q.release == release for q in records),
            m.sum("rag_queries_total", release=release), checks)
    if single_agent:  # label caps fold per process: exact per-label counts need one agent
        intents = m.label_values("rag_queries_total", "intent") - {"other", "unknown"}
        _eq("intent label values (cap)", min(top_intents, len({q.intent for q in records if q.intent})), len(intents), checks)
        for intent in sorted(intents):
            _eq(f"queries of intent {intent}", sum(q.intent == intent for q in records),
                m.sum("rag_queries_total", intent=intent), checks)
    return checks
