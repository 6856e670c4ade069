"""What the agent must export for a scenario, computed from the scenario alone.

Independent of the agent's code on purpose: prices are read from the shipped price table and
matched here, inclusion probabilities follow DESIGN.md's single-draw design from the sampling
rates, regenerations follow the documented window-and-similarity rule. Only the trace's random
draw ``u`` is taken from the agent's sampler (it is the design's source of randomness, not a rule).
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rag_monitor.simulate.scenario import Scenario, SimQuery

_WORD = re.compile(r"\w+")
REGENERATION_WINDOW_NS = 120 * 10**9
REGENERATION_SIMILARITY = 0.8


def price_table(path: str | Path | None = None) -> dict[str, dict[str, float]]:
    """The price table the agent ships (its packaged default; USD per million tokens by pattern)."""
    import yaml

    from rag_monitor.config_files import shipped_path

    if path is None:
        path = shipped_path("price_table")
    return {k.lower(): v for k, v in (yaml.safe_load(Path(path).read_text()).get("models") or {}).items()}


def call_cost(prices: dict[str, dict[str, float]], model: str, input_tokens: int, output_tokens: int,
              cached: int) -> float | None:
    """USD for one call: the most specific (longest) matching pattern's prices; cached prompt
    tokens at the cached rate when the table gives one."""
    matches = [p for p in prices if fnmatch.fnmatchcase(model.lower(), p)]
    if not matches:
        return None
    price = prices[max(matches, key=len)]
    cached_rate = price.get("cached_input", price.get("input_cached", price["input"]))
    return ((input_tokens - cached) * price["input"] + cached * cached_rate + output_tokens * price.get("output", 0)) / 1e6


def cache_saving(prices: dict[str, dict[str, float]], model: str, cached: int) -> float:
    """USD the prompt cache saved on a call: cached tokens at the input rate minus the cached rate."""
    matches = [p for p in prices if fnmatch.fnmatchcase(model.lower(), p)]
    if not cached or not matches or "cached_input" not in prices[max(matches, key=len)]:
        return 0.0
    price = prices[max(matches, key=len)]
    return cached * (price["input"] - price["cached_input"]) / 1e6


@dataclass
class Histogram:
    values: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def sum(self) -> float:
        return sum(self.values)

    def bucket(self, le: float) -> int:
        return sum(1 for v in self.values if v <= le)


@dataclass
class Truth:
    scenario: Scenario
    spans_sent: int
    queries: Counter = field(default_factory=Counter)
    """(release, variant, intent, tenant) -> queries (raw label values, before folding)."""
    errors: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    query_duration: dict = field(default_factory=lambda: defaultdict(Histogram))
    stage_duration: dict = field(default_factory=lambda: defaultdict(Histogram))
    """(stage, release, variant) -> durations."""
    ttft: dict = field(default_factory=lambda: defaultdict(Histogram))
    tokens: Counter = field(default_factory=Counter)
    """(kind, model) -> tokens; kind prompt, completion or cached_prompt (the cached part of prompt;
    embedding input tokens are prompt)."""
    cost: Counter = field(default_factory=Counter)
    """model -> USD."""
    query_cost: dict = field(default_factory=lambda: defaultdict(Histogram))
    component_cost: dict = field(default_factory=lambda: defaultdict(Histogram))
    """component (generation: every LLM call; embedding) -> USD per priced query that made such calls."""
    prompt_cache_saved: float = 0.0
    """USD: cached prompt tokens at the input rate minus the cached rate, where the table has one."""
    feedback: Counter = field(default_factory=Counter)
    regenerations: Counter = field(default_factory=Counter)
    """source (explicit, inferred) -> count: the signals, a click and the re-ask it triggers both."""
    regenerated: dict[str, str] = field(default_factory=dict)
    """trace id -> variant of every regenerated query, each once: clicked regenerate while the
    query was still known (not after the recent-records TTL), or re-asked in its session."""
    filter_queries: Counter = field(default_factory=Counter)
    filter_exclusions: Counter = field(default_factory=Counter)
    """(filter kind, outcome) -> queries."""
    partial_traces: int = 0
    releases: list[str] = field(default_factory=list)

    def regeneration_rate(self, variant: str) -> float | None:
        """Regenerated queries over queries: what ``rag:regeneration_ratio`` must read over a window
        holding the whole scenario."""
        queries = sum(q.variant == variant for q in self.records)
        return sum(v == variant for v in self.regenerated.values()) / queries if queries else None

    @property
    def records(self) -> list[SimQuery]:
        return [q for q in self.scenario.queries if not q.root_lost]

    def newest_releases(self, n: int) -> list[str]:
        return self.releases[-n:]

    # --- sample-based quantities ------------------------------------------------------------

    def inclusion(self, q: SimQuery, rates: dict[str, float]) -> tuple[str, float, int]:
        """(stratum, probability, draw trace id) under the single-draw design."""
        strata = [("base", rates["base_rate"])]
        # A complaint after the recent-records TTL can no longer pull the query in; were it to
        # raise the probability of an item already sampled, the estimates would be biased.
        if any(f.kind == "thumbs_down" and f.timing != "after_ttl" for f in q.feedback):
            strata.append(("thumbs_down", rates["thumbs_down_rate"]))
        if q.confidence is not None and q.confidence < rates["low_confidence_below"]:
            strata.append(("low_confidence", rates["low_confidence_rate"]))
        if q.refused:
            strata.append(("refusal", rates["refusal_rate"]))
        if q.shadow_of:
            strata.append(("shadow_pair", rates["shadow_pair_rate"]))
        stratum, p = max(strata, key=lambda s: s[1])
        # One draw for every stratum; a shadow query draws on the production trace it shadows.
        return stratum, p, q.shadow_of or q.trace_id

    def sample(self, rates: dict[str, float], uniform) -> dict[str, tuple[str, float]]:
        """trace id -> (stratum, probability) of every query the sampler must choose for review."""
        out = {}
        for q in self.records:
            stratum, p, draw = self.inclusion(q, rates)
            if uniform(f"{draw:032x}") < p:
                out[q.trace_hex] = (stratum, p)
        return out

    def score_sample(self, rates: dict[str, float], uniform) -> dict[str, float]:
        """trace id -> scoring probability of every query the scorer must label (the review sample
        is a subsample: the same draw below ``max(score_rate, review probability)``; a shadow
        query is scored when reviewed only). Assumes no scoring budget binds."""
        out = {}
        for q in self.records:
            _, p, draw = self.inclusion(q, rates)
            p_score = p if q.shadow_of else max(rates.get("score_rate", 0.0), p)
            if uniform(f"{draw:032x}") < p_score:
                out[q.trace_hex] = p_score
        return out

    def verdict(self, q: SimQuery) -> str | None:
        """The faithfulness verdict the agent must reach (None: the failed query, any non-scored verdict)."""
        if q.hidden:
            return "not_scored"
        if q.refused:
            return "refused"
        if q.error is not None:
            return None
        if not q.delivered:
            return "no_context"
        return "supported" if q.supported else "unsupported"

    def unsupported_rate(self, variant: str) -> float | None:
        """The population value the weighted unsupported rate estimates."""
        verdicts = [self.verdict(q) for q in self.records if q.variant == variant]
        scored = [v for v in verdicts if v in ("supported", "unsupported")]
        return sum(v == "unsupported" for v in scored) / len(scored) if scored else None

    def false_exclusion(self, q: SimQuery) -> bool | None:
        """True/False for a query with an entitlement-eligible gold document a blind reviewer can
        judge (its content is shown: retrieved, delivered, or removed and sent with
        ``excluded_documents``), else None; hidden documents cannot be judged at all."""
        if q.hidden:
            return None
        removed = {"entitlement": set(), "relevance": set()}
        shown = {d.id for d in [*q.retrieved, *q.delivered]}
        for f in q.filters:
            removed[f.kind].update(d.id for d in f.excluded)
            if f.report in ("documents", "both"):
                shown.update(d.id for d in f.excluded)
        eligible = (set(q.gold) & shown) - removed["entitlement"]
        if not eligible:
            return None
        return eligible <= removed["relevance"]

    def false_exclusion_rate(self) -> float | None:
        verdicts = [v for v in (self.false_exclusion(q) for q in self.records) if v is not None]
        return sum(verdicts) / len(verdicts) if verdicts else None


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def _reasked_queries(records: list[SimQuery]) -> list[SimQuery]:
    """The query each inferred regeneration re-asks (one entry per re-ask)."""
    last: dict[str, tuple[SimQuery, frozenset[str]]] = {}
    found = []
    for q in records:  # roots arrive in query order
        if q.hidden or not q.session_id or not q.query:
            continue
        words = _words(q.query)
        previous = last.get(q.session_id)
        last[q.session_id] = (q, words)
        if previous is not None and 0 <= q.start_ns - previous[0].start_ns <= REGENERATION_WINDOW_NS:
            a, b = words, previous[1]
            if len(a & b) / len(a | b) >= REGENERATION_SIMILARITY:
                found.append(previous[0])
    return found


def expected(scenario: Scenario, spans_sent: int, prices: dict | None = None) -> Truth:
    prices = prices if prices is not None else price_table()
    t = Truth(scenario, spans_sent)
    for q in scenario.queries:
        if q.root_lost:
            t.partial_traces += 1
            continue
        if q.release not in t.releases:
            t.releases.append(q.release)
        rv = (q.release, q.variant)
        t.queries[(q.release, q.variant, q.intent, q.tenant)] += 1
        t.query_duration[rv].values.append(q.duration_s)
        t.errors[rv] += q.error is not None
        t.refusals[rv] += q.refused
        for stage in q.stages:
            t.stage_duration[(stage.name, *rv)].values.append(stage.duration_s)
        if q.ttft_s is not None:
            t.ttft[rv].values.append(q.ttft_s)
        query_cost, priced, components = 0.0, 0, Counter()
        for call in q.calls:
            t.tokens[("prompt", call.model)] += call.input_tokens
            t.tokens[("completion", call.model)] += call.output_tokens
            t.tokens[("cached_prompt", call.model)] += call.cached_input_tokens
            t.prompt_cache_saved += cache_saving(prices, call.model, call.cached_input_tokens)
            if call.kind != "llm" and not (call.input_tokens or call.output_tokens):
                continue  # an embedding call without token counts: nothing to price
            cost = call_cost(prices, call.model, call.input_tokens, call.output_tokens, call.cached_input_tokens)
            t.cost[call.model] += cost
            query_cost, priced = query_cost + cost, priced + 1
            components["generation" if call.kind == "llm" else call.kind] += cost
        if priced:  # a query's cost is observed when it made a priced call
            t.query_cost[rv].values.append(query_cost)
            for component, usd in components.items():
                t.component_cost[component].values.append(usd)
        for f in q.filters:
            t.filter_queries[f.kind] += 1
            if f.candidates_in and f.candidates_out == 0:
                t.filter_exclusions[(f.kind, "emptied")] += 1
            if f.excluded:
                t.filter_exclusions[(f.kind, "removed_topk")] += 1
        for fb in q.feedback:
            t.feedback[fb.kind] += 1
            if fb.kind == "regenerate":
                t.regenerations["explicit"] += 1
                if fb.timing != "after_ttl":  # a click on a query the agent no longer holds names no labels
                    t.regenerated[q.trace_hex] = q.variant
    reasked = _reasked_queries(t.records)
    t.regenerations["inferred"] = len(reasked)
    t.regenerated.update((q.trace_hex, q.variant) for q in reasked)
    return t
